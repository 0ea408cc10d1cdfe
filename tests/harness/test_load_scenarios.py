"""Every shipped scenario validates, and each of the load scenarios runs at reduced size.

Reduced with ``--set``-style overrides (fewer and smaller rollouts, short
schedules) against the session's shared reference server; one runs through the
CLI with its own embedded server, as from a fresh clone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.run.runner import RunOptions, run_scenario
from harness.wire.transports import TRANSPORT_NAMES
from harness.workload.rollout import generate_rollouts, load_scenario_trace
from harness.workload.scenario import load_scenario
from tests.plan_tokens import history_tokens
from tests.runs import ROOT, run_cli

SCENARIOS = ROOT / "scenarios"

SMALL = {
    "rollout.system_tokens": "200",
    "rollout.tool_schema_tokens": "100",
    "rollout.tool_output_tokens": "60",
    "rollout.tool_latency_ms": "5",
    "rollout.step_output_tokens": "30",
    "rollout.final_answer_tokens": "40",
    "rollout.think_ms": "0",
}

# scenario -> overrides that shrink it to a few seconds (the shape of the load is kept).
REDUCED: dict[str, dict[str, str]] = {
    "tiny": {},
    "quickstart": {**SMALL, "rollout.count": "2", "rollout.tool_calls": "2"},
    "codex-spark-bugfix": {**SMALL, "rollout.count": "2", "rollout.tool_calls": "3"},
    "codex-reasoning": {**SMALL, "rollout.count": "2", "rollout.tool_calls": "3"},
    "long-horizon": {**SMALL, "rollout.count": "1", "rollout.tool_calls": "6"},
    # Compacts before turns 3 and 5 or so: ~1,000 tokens of history, 512 + 300 after.
    "long-horizon-compact": {
        **SMALL,
        "rollout.count": "1",
        "rollout.tool_calls": "8",
        "rollout.compact_at_tokens": "1000",
    },
    "burst-storm": {
        **SMALL,
        "rollout.tool_calls": "2",
        "load.duration_s": "1.5",
        "load.arrival.rate": "3",
        "load.bursts": "[{at_s: 0.5, extra: 4, over_s: 0.2}]",
    },
    "many-agents": {
        **SMALL,
        "rollout.tool_calls": "2",
        "load.duration_s": "1.5",
        "load.arrival.rate": "4",
        "load.warmup_rollouts": "1",
    },
    "tps-target": {
        **SMALL,
        "rollout.tool_calls": "2",
        "load.duration_s": "1.5",
        "load.throughput": "{tps: 600, bursts: [{at_s: 0.5, over_s: 0.5, tps: 1200}]}",
    },
    "codex-replay": {"rollout.count": "1", "transports": "[ws]"},
    # The fork at turn 1 needs the parent to reach it: 3 tool calls, sub-agents of 2.
    "subagents": {
        **SMALL,
        "rollout.count": "2",
        "rollout.tool_calls": "3",
        "rollout.subagents.tool_calls": "2",
    },
}


def _shipped() -> list[Path]:
    return sorted(SCENARIOS.rglob("*.yaml"))


def test_every_shipped_scenario_validates_and_generates() -> None:
    files = _shipped()
    assert {p.stem for p in files} >= set(REDUCED)
    for path in files:
        scenario = load_scenario(path)
        assert generate_rollouts(scenario), path
    proc = run_cli("validate", *files, timeout=60)
    assert proc.stdout.count(": ok") == len(files)


@pytest.mark.parametrize("name", ["sdk-http", "sdk-ws"])
def test_validate_refuses_a_transport_that_cannot_run(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sdk.yaml"
    path.write_text(f"name: sdk\ntransports: [http, {name}]\n")
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(path)])
    assert exc.value.code == 4
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith(
        f"{path}: transports[1]: expected one of {', '.join(TRANSPORT_NAMES)}, got {name!r}"
    ), out.err


def test_validate_and_run_name_a_server_profile_the_embedded_server_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in ``server:`` is the scenario's error (file, field, what was expected), from
    ``validate`` and before ``run`` starts a server that would exit at once."""
    bad = {
        "engine": (
            "server:\n  engine_profile: cerebras\n",
            "server.engine_profile: expected a shipped profile (cerebras-spark, gpu-legacy) or "
            "a path to a YAML file, got 'cerebras'",
        ),
        "api": ("server:\n  api_profile: optimised\n", "server.api_profile: expected a shipped"),
        "set": ("server:\n  set:\n    engine.bogus: 1\n", "server.set.engine.bogus: unknown"),
    }
    for name, (body, message) in bad.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"name: {name}\ntransports: [http]\n{body}")
        for command, prefix in (("validate", ""), ("run", "error: ")):
            with pytest.raises(SystemExit) as exc:
                main(
                    [
                        command,
                        str(path),
                        *(["--out", str(tmp_path / "out")] if command == "run" else []),
                    ]
                )
            assert exc.value.code == 4
            first = capsys.readouterr().err.splitlines()[0]
            assert first.startswith(f"{prefix}{path}: {message}"), (command, first)
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


def _refused_by_validate_and_run(
    scenario: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, str]:
    """Writes the scenario; both commands must exit 4, start nothing and name the file first
    (``run`` after ``error: ``). Each command's first line on stderr after that."""
    scenario.write_text(text)
    out = scenario.parent / "out"
    rest: dict[str, str] = {}
    for command in ("validate", "run"):
        with pytest.raises(SystemExit) as exc:
            main([command, str(scenario), *(["--out", str(out)] if command == "run" else [])])
        assert exc.value.code == 4, command
        line = capsys.readouterr().err.splitlines()[0]
        named = f"{'error: ' if command == 'run' else ''}{scenario}: "
        assert line.startswith(named), (command, line)
        rest[command] = line.removeprefix(named)
    assert not out.exists()
    return rest


ENGINE = ROOT / "reference_server" / "profiles" / "engine-cerebras-spark.yaml"


def _engine_profile(path: Path, **changed: object) -> Path:
    """The shipped engine profile with some parameters replaced."""
    lines = [
        f"{line.partition(':')[0]}: {changed[line.partition(':')[0]]}"
        if line.partition(":")[0] in changed
        else line
        for line in ENGINE.read_text().splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_error_inside_a_profile_file_is_the_field_that_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The scenario's field (server.engine_profile), then the profile file and its key: both
    files are named, with what was expected."""
    engine = _engine_profile(tmp_path / "my-engine.yaml", sustained_tps=-1)
    api = tmp_path / "my-api.yaml"
    api.write_text("name: mine\nworkers: [1\n")
    cases = {
        engine: (
            "engine_profile",
            "my-engine.yaml: sustained_tps: expected a number > 0, got -1",
        ),
        api: ("api_profile", "my-api.yaml: line 3: expected valid YAML"),
    }
    for profile, (field, message) in cases.items():
        text = f"name: s\ntransports: [http]\nserver:\n  {field}: {profile}\n"
        for command, rest in _refused_by_validate_and_run(
            tmp_path / f"{field}.yaml", text, capsys
        ).items():
            assert rest.startswith(f"server.{field}: "), (command, rest)
            assert rest.endswith(message), (command, rest)


def test_the_window_the_scenario_gives_the_embedded_server_is_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """context_window_tokens becomes the embedded server's engine.context_window_tokens: an
    output cap above it, in server.set or in a profile file, would stop the server at start."""
    engine = _engine_profile(tmp_path / "engine.yaml", max_output_tokens=300000)
    cases = {
        "set": (
            "context_window_tokens: 60000\nserver:\n  set:\n    engine.max_output_tokens: 70000\n",
            "server.set.engine.max_output_tokens: expected an integer ≤ context_window_tokens "
            "(60000), got 70000",
        ),
        "window": (
            f"context_window_tokens: 200000\nserver:\n  engine_profile: {engine}\n",
            "context_window_tokens: the embedded server's engine.context_window_tokens (set from "
            "it): expected an integer ≥ max_output_tokens (300000), got 200000",
        ),
    }
    for name, (body, message) in cases.items():
        text = f"name: {name}\ntransports: [http]\n{body}"
        refused = _refused_by_validate_and_run(tmp_path / f"{name}.yaml", text, capsys)
        assert refused == {"validate": message, "run": message}


def test_every_top_level_scenario_has_a_reduced_run() -> None:
    assert {p.stem for p in SCENARIOS.glob("*.yaml")} == set(REDUCED)


def test_shipped_shapes_match_their_documentation() -> None:
    def final_history(name: str, count: int) -> list[int]:
        s = load_scenario(SCENARIOS / f"{name}.yaml", {"rollout.count": str(count)})
        return sorted(history_tokens(p, len(p.turns) - 1) for p in generate_rollouts(s))

    bugfix = load_scenario(SCENARIOS / "codex-spark-bugfix.yaml")
    assert all(20 <= p.tool_call_count <= 30 for p in generate_rollouts(bugfix))
    hist = final_history("codex-spark-bugfix", 200)
    assert 50_000 <= hist[len(hist) // 2] <= 70_000
    # codex-reasoning: the bug-fix rollouts, each turn reasoning ~300 tokens (median)
    reasoning = generate_rollouts(load_scenario(SCENARIOS / "codex-reasoning.yaml"))
    drawn = sorted(t.reasoning_tokens for p in reasoning for t in p.turns)
    assert 250 <= drawn[len(drawn) // 2] <= 350
    assert [[(t.output_tokens, t.tool_calls) for t in p.turns] for p in reasoning] == [
        [(t.output_tokens, t.tool_calls) for t in p.turns] for p in generate_rollouts(bugfix)
    ]
    horizon = load_scenario(SCENARIOS / "long-horizon.yaml")
    assert {p.tool_call_count for p in generate_rollouts(horizon)} == {100}
    hist = final_history("long-horizon", 40)
    assert 130_000 <= hist[len(hist) // 2] <= 170_000
    storm = generate_rollouts(load_scenario(SCENARIOS / "burst-storm.yaml"))
    assert sum(p.tags["arrival"] == "burst" for p in storm) == 60
    tps = load_scenario(SCENARIOS / "tps-target.yaml")
    assert tps.load.mode == "throughput" and tps.load.throughput is not None
    assert tps.load.throughput.tps == 1000 and tps.load.throughput.bursts[0].tps == 4000
    replay = load_scenario(SCENARIOS / "codex-replay.yaml")
    assert len(generate_rollouts(replay)) == len(load_scenario_trace(replay) or [])


@pytest.mark.parametrize("name", sorted(REDUCED))
def test_shipped_scenario_runs_reduced(name: str, fast_server_url: str, tmp_path: Path) -> None:
    # each shipped scenario runs whole and counts right: its schedule and rollouts are the
    # claim, not the server's modelled latencies
    path = SCENARIOS / f"{name}.yaml"
    scenario = load_scenario(path, REDUCED[name])
    opts = RunOptions(target=fast_server_url, results_root=tmp_path, run_id=name, render=False)
    summary = run_scenario(scenario, str(path), opts).summary
    planned = summary["load"]["rollouts_planned"]
    assert planned == len(generate_rollouts(scenario))
    warmup = scenario.load.warmup_rollouts
    for transport, t in summary["transports"].items():
        assert t["turns"]["errors"] == 0, (transport, t["errors_by_kind"])
        assert t["rollouts"]["count"] == planned - warmup, transport
        assert t["schedule"]["started"] == planned - warmup
        assert t["schedule"]["dropped"] == 0
    assert set(summary["transports"]) == set(scenario.transports)


@pytest.mark.slow
def test_burst_storm_through_the_cli(tmp_path: Path) -> None:
    """A real process: only its stderr is a pipe as in CI logs, where progress must be plain
    lines (a terminal's escape codes there are the defect this catches)."""
    sets = [f"--set={k}={v}" for k, v in REDUCED["burst-storm"].items()]
    proc = run_cli(
        "run",
        SCENARIOS / "burst-storm.yaml",
        "--out",
        tmp_path,
        "--run-id",
        "storm",
        *sets,
        timeout=120,
        report=False,
    )
    assert "load generator (intended vs actual starts)" in proc.stdout
    assert "cancelled" in proc.stdout
    # Non-TTY progress: plain lines, one at the end of each pass at least.
    assert "rollouts" in proc.stderr and "\x1b[" not in proc.stderr
    summary = json.loads((tmp_path / "storm" / "summary.json").read_text())
    assert summary["load"]["mode"] == "open"
    for t in summary["transports"].values():
        assert t["schedule_lag_ms"]["p99"] is not None
        assert t["schedule"]["intended"] == summary["load"]["rollouts_planned"]


def test_a_profile_file_is_found_next_to_the_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`server.engine_profile: my-engine.yaml` means the file beside the scenario (as
    rollout.trace does), wherever the command is run from; a shipped name stays a name."""
    folder = tmp_path / "scenarios"
    folder.mkdir()
    _engine_profile(folder / "my-engine.yaml", sustained_tps=1500)
    scenario = folder / "s.yaml"
    scenario.write_text(
        "name: s\ntransports: [http]\nrollout:\n  count: 1\n  tool_calls: 1\n"
        "server:\n  engine_profile: my-engine.yaml\n  api_profile: optimized\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_scenario(str(scenario))
    assert loaded.server_profiles() == ("optimized", str(folder / "my-engine.yaml"))
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(scenario)])
    assert exc.value.code == 0, capsys.readouterr().err
    capsys.readouterr()
    # the embedded server starts with it (it exited at start: no such profile in the cwd);
    # the report is not this test's business
    monkeypatch.setattr("harness.run.runner.render_run_safely", lambda run_dir: None)
    with pytest.raises(SystemExit) as exc:
        main(["run", str(scenario), "--out", str(tmp_path / "out"), "--run-id", "r", "-q"])
    assert exc.value.code == 0, capsys.readouterr().err
    # what the run printed (on a busy machine, a slow-scrape warning) is not validate's
    capsys.readouterr()
    # and a broken file there is reported as that field, so it was the file read
    _engine_profile(folder / "my-engine.yaml", sustained_tps=-1)
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(scenario)])
    assert exc.value.code == 4
    assert capsys.readouterr().err.startswith(f"{scenario}: server.engine_profile: ")
