"""Built-in scenarios by name, `loopbench scenarios` and `loopbench init`, from any folder."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.wire.errors import ScenarioError
from harness.wire.exit_codes import ExitCode
from harness.workload.builtin import (
    BUILTIN_DIR,
    builtin_scenarios,
    looks_like_path,
    shadowed_entries,
    shadowed_note,
)
from harness.workload.rollout import load_scenario_trace
from harness.workload.scenario import load_scenario
from harness.workload.starter import starter_scenario

ROOT = Path(__file__).resolve().parents[2]


def _main(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    assert isinstance(code, int)
    return code


def test_builtins_are_the_shipped_files_and_each_has_a_description() -> None:
    found = builtin_scenarios()
    assert {"tiny", "quickstart", "reproduce/codex-cerebras"} <= set(found)
    assert set(found) == {p.stem for p in BUILTIN_DIR.glob("*.yaml")} | {
        f"reproduce/{p.stem}" for p in (BUILTIN_DIR / "reproduce").glob("*.yaml")
    }
    for name, path in found.items():
        assert load_scenario(path).description, name


def test_a_name_loads_the_builtin_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_scenario("tiny").name == "tiny"
    assert load_scenario("tiny.yaml").source == str(BUILTIN_DIR / "tiny.yaml")
    assert load_scenario("reproduce/decode-cerebras").name == "decode-cerebras"
    # The path the package lays them out under, as docs write it, means the built-in too.
    assert load_scenario("scenarios/quickstart.yaml").source == str(BUILTIN_DIR / "quickstart.yaml")
    assert load_scenario("harness/scenarios/tiny.yaml").name == "tiny"
    # The trace of a built-in resolves next to the built-in file, not in the working folder.
    replay = load_scenario("codex-replay")
    assert load_scenario_trace(replay)


def test_a_file_of_the_same_name_wins_over_the_builtin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text("name: mine\n")
    assert load_scenario("tiny.yaml").name == "mine"
    assert load_scenario("tiny").name == "tiny"


def test_a_local_entry_named_like_a_builtin_runs_only_when_written_as_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38: a folder ``tiny/`` in the working folder hid the built-in (``expected a YAML
    file, got a directory``).  A bare name is the built-in, with a note; ``./tiny`` is the
    path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    assert load_scenario("tiny").source == str(BUILTIN_DIR / "tiny.yaml")
    assert shadowed_entries("tiny") == ["tiny"]
    assert shadowed_note("tiny") == (
        "'tiny' is the built-in scenario; the folder ./tiny here was not used "
        "(write ./tiny to run a local file)"
    )
    with pytest.raises(ScenarioError, match="expected a YAML file, got a directory"):
        load_scenario("./tiny")
    assert _main(["validate", "tiny"]) == ExitCode.OK
    err = capsys.readouterr().err
    assert err == f"note: {shadowed_note('tiny')}\n"
    # A file without a suffix is the same case; with its suffix it is written as a file.
    (tmp_path / "quickstart").write_text("name: mine\n")
    (tmp_path / "quickstart.yaml").write_text("name: mine-too\n")
    assert load_scenario("quickstart").name == "quickstart"
    assert shadowed_entries("quickstart") == ["quickstart", "quickstart.yaml"]
    assert "the file ./quickstart and the file ./quickstart.yaml here were not used" in (
        shadowed_note("quickstart") or ""
    )
    assert load_scenario("./quickstart").name == "mine"
    assert load_scenario("quickstart.yaml").name == "mine-too"
    assert load_scenario(str(tmp_path / "quickstart")).name == "mine"
    # Nothing to say when nothing was left unused, or the name is no built-in's.
    assert shadowed_note("burst-storm") is None
    assert shadowed_note("./tiny") is None
    (tmp_path / "mine").mkdir()
    assert shadowed_note("mine") is None
    with pytest.raises(ScenarioError, match="expected a YAML file, got a directory"):
        load_scenario("mine")


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("tiny", False),
        ("reproduce/tiny", True),
        ("./tiny", True),
        ("tiny.yaml", True),
        ("tiny.yml", True),
        (".tiny", True),
        ("/abs/tiny", True),
    ],
)
def test_looks_like_path(name: str, path: bool) -> None:
    assert looks_like_path(name) is path


def test_a_user_scenario_trace_resolves_next_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "bench"
    (folder / "traces").mkdir(parents=True)
    shipped = BUILTIN_DIR / "traces" / "codex-sample.jsonl"
    (folder / "traces" / "t.jsonl").write_text(shipped.read_text())
    (folder / "s.yaml").write_text("name: s\nrollout:\n  trace: traces/t.jsonl\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_scenario_trace(load_scenario(folder / "s.yaml"))


def test_an_unknown_name_lists_the_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario("quikstart")
    names = ", ".join(builtin_scenarios())
    assert str(info.value) == (
        f"no scenario file or built-in named 'quikstart' (did you mean 'quickstart'?); "
        f"built-ins: {names}"
    )
    assert _main(["validate", "quikstart"]) == ExitCode.USAGE
    assert "no scenario file or built-in named 'quikstart' (did you mean" in capsys.readouterr().err
    # nothing close: no guess, only the list
    with pytest.raises(ScenarioError) as info:
        load_scenario("zzzzzz")
    assert str(info.value) == f"no scenario file or built-in named 'zzzzzz'; built-ins: {names}"
    with pytest.raises(ScenarioError, match=r"\(did you mean 'reproduce/codex-reasoning'\?\)"):
        load_scenario("reproduce/codex-reasonin")
    with pytest.raises(ScenarioError) as info:
        load_scenario("old/scenarios/tiny.yaml")
    assert str(info.value).startswith(
        "no scenario file or built-in named 'old/scenarios/tiny.yaml' (did you mean 'tiny'?); "
        "built-ins: burst-storm,"
    )


def test_scenarios_lists_every_builtin_with_its_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _main(["scenarios"]) == ExitCode.OK
    lines = capsys.readouterr().out.splitlines()
    found = builtin_scenarios()
    assert len(lines) == len(found)
    for line, (name, path) in zip(lines, found.items(), strict=True):
        assert line.split()[0] == name
        assert line.endswith(load_scenario(path).description)
    assert _main(["scenarios", "--path", "tiny"]) == ExitCode.OK
    assert capsys.readouterr().out.strip() == str(BUILTIN_DIR / "tiny.yaml")
    assert _main(["scenarios", "--path", "nope"]) == ExitCode.USAGE
    assert "(did you mean" not in capsys.readouterr().err
    assert _main(["scenarios", "--path", "tinny"]) == ExitCode.USAGE
    assert "no built-in scenario named 'tinny' (did you mean 'tiny'?)" in capsys.readouterr().err


def test_init_writes_a_commented_starter_that_validates_and_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _main(["init", "my-agent"]) == ExitCode.OK
    written = tmp_path / "my-agent.yaml"
    text = written.read_text()
    assert text == starter_scenario("my-agent")
    assert load_scenario(written).name == "my-agent"
    # Commented: every rollout and load field says what it does.
    body = text.split("rollout:", 1)[1]
    fields = [line for line in body.splitlines() if line.startswith("  ")]
    assert fields and all("#" in line for line in fields), fields
    assert _main(["validate", str(written)]) == ExitCode.OK
    capsys.readouterr()

    written.write_text("name: edited\n")
    assert _main(["init", "my-agent"]) == ExitCode.USAGE
    assert written.read_text() == "name: edited\n"
    assert capsys.readouterr().err == "error: my-agent.yaml: already exists; not overwritten\n"
    assert _main(["init", "My Agent"]) == ExitCode.USAGE
    assert not (tmp_path / "My Agent.yaml").exists()
    assert _main(["init", str(tmp_path / "other.yaml")]) == ExitCode.OK
    assert load_scenario(tmp_path / "other.yaml").name == "other"


@pytest.mark.parametrize("name", ["starter", *builtin_scenarios()])
def test_a_description_states_the_rollouts_and_tool_calls_the_scenario_has(
    name: str, tmp_path: Path
) -> None:
    # `loopbench scenarios` and the report show the description: it must not promise
    # another workload than the fields give (the starter once said 4 rollouts of 8).
    if name == "starter":
        path = tmp_path / "my-agent.yaml"
        path.write_text(starter_scenario("my-agent"))
        scenario = load_scenario(path)
    else:
        scenario = load_scenario(builtin_scenarios()[name])
    rollouts = re.search(r"\b(\d+) rollouts\b", scenario.description)
    calls = re.search(r"\brollouts x (~?)(\d+) tool calls\b", scenario.description)
    if name == "starter":
        assert rollouts and calls, scenario.description
    if rollouts:
        assert int(rollouts.group(1)) == scenario.rollout.count, scenario.description
    if calls:
        mean = scenario.rollout.tool_calls.mean()
        stated = int(calls.group(2))
        assert stated == round(mean) if calls.group(1) else stated == mean, scenario.description


def test_run_by_name_from_an_empty_folder(tmp_path: Path) -> None:
    work = tmp_path / "empty"
    work.mkdir()
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "tiny", "--out", str(out), "--run-id", "t", "-q"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "t" / "summary.json").read_text())
    assert summary["scenario"] == "tiny"
    assert set(summary["transports"]) == {"http", "ws"}
    assert list(work.iterdir()) == []
