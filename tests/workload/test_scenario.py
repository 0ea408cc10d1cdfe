"""Scenario loading: every bad file gives one exact line; overrides; schema; shipped files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.wire.errors import ScenarioError
from harness.wire.exit_codes import ExitCode
from harness.wire.transports import TRANSPORT_NAMES
from harness.workload.distributions import ConstantDist, LognormalDist, UniformDist
from harness.workload.scenario import (
    InvalidScenarioError,
    load_scenario,
    scenario_json_schema,
    validate_scenario,
)

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"

GOOD = """\
name: ok
seed: 3
rollout:
  count: 4
  tool_calls: {dist: uniform, min: 8, max: 12}
load:
  mode: closed
  concurrency: 2
"""

# (file body, expected message after "<path>: ")
BAD: list[tuple[str, str | None]] = [
    (
        "name: x\nload:\n  concurency: 2\n",
        "load.concurency: unknown field (did you mean 'concurrency'?)",
    ),
    (
        "name: x\nrollout:\n  tool_calls: {dist: uniform, min: 8, max: 3}\n",
        "rollout.tool_calls.max: expected a number > min (8), got 3",
    ),
    (
        "name: x\nload:\n  mode: open\n  arrival: {process: poisson, rate: -2}\n",
        "load.arrival.rate: expected a number > 0, got -2",
    ),
    ("description: no name\n", "name: required field missing"),
    ("name: Quick Start\n", "name: expected lowercase letters, digits and '-', got 'Quick Start'"),
    (
        "name: x\ntransports: [http, websocket]\n",
        "transports[1]: expected one of http, chat, messages, http-chained, ws, ws-store, ws-append, "
        "got 'websocket'",
    ),
    ("name: x\ntransports: [http, htp]\n", None),  # checked separately: did-you-mean
    ("name: x\ntransports: [ws, ws]\n", "transports[1]: expected each transport once, got 'ws'"),
    (
        "name: x\nrollout:\n  tool_output_tokens: {dist: lognormal, median: 400, p95: 300}\n",
        "rollout.tool_output_tokens.p95: expected a number > median (400), got 300",
    ),
    (
        "name: x\nrollout:\n  tool_latency_ms: {dist: logn, median: 1, p95: 2}\n",
        "rollout.tool_latency_ms.dist: expected one of constant, uniform, normal, lognormal, "
        "empirical, got 'logn' (did you mean 'lognormal'?)",
    ),
    (
        "name: x\nrollout:\n  tool_latency_ms: {median: 100, p95: 600}\n",
        "rollout.tool_latency_ms: expected a mapping with 'dist' (one of constant, uniform, "
        "normal, lognormal, empirical), got {median: 100, p95: 600}",
    ),
    (
        "name: x\nrollout:\n  tool_latency_ms: {dist: lognormal, median: 100, p99: 600}\n",
        "rollout.tool_latency_ms.p99: unknown field (did you mean 'p95'?)",
    ),
    ("name: x\nrollout:\n  count: 4.5\n", "rollout.count: expected an integer, got 4.5"),
    ("name: x\nrollout:\n  count: 0\n", "rollout.count: expected an integer ≥ 1, got 0"),
    ("name: x\nrollout:\n  count: '6'\n", "rollout.count: expected an integer, got '6'"),
    (
        "name: x\nrollout:\n  final_answer_tokens: -5\n",
        "rollout.final_answer_tokens: expected a number ≥ 0, got -5",
    ),
    (
        "name: x\nrollout:\n  parallel_calls: {dist: uniform, min: 0, max: 3}\n",
        "rollout.parallel_calls.min: expected a number ≥ 1, got 0",
    ),
    (
        "name: x\nrollout:\n  think_ms: yes\n",
        "rollout.think_ms: expected a number or a mapping with 'dist', got true",
    ),
    (
        "name: x\nload:\n  mode: open\n",
        "load.arrival: expected an arrival rate (or stages) for open-loop mode, got nothing",
    ),
    (
        "name: x\nload:\n  mode: open\n  arrival: {process: gamma, rate: 2}\n",
        "load.arrival.cv: expected a number > 0 (or burstiness) for process gamma, got nothing",
    ),
    (
        "name: x\nload:\n  mode: open\n  arrival: {process: poisson, rate: 2, cv: 3}\n",
        "load.arrival.cv: expected no cv for process poisson, got 3",
    ),
    (
        "name: x\nload:\n  mode: open\n  arrival: {rate: 1}\n  bursts: [{at_s: 10, over_s: 2}]\n",
        "load.bursts[0].extra: required field missing",
    ),
    (
        "name: x\nload:\n  mode: open\n  arrival: {rate: 1}\n  duration_s: 30\n"
        "  bursts: [{at_s: 29, extra: 5, over_s: 2}]\n",
        "load.bursts[0].at_s: expected a burst ending within duration_s (30), got 29",
    ),
    (
        "name: x\nload:\n  stages: [{duration_s: 0, rate: 1}]\n",
        "load.stages[0].duration_s: expected a number > 0, got 0",
    ),
    (
        "name: x\nload:\n  mode: burst\n",
        "load.mode: expected one of closed, open, throughput, got 'burst'",
    ),
    (
        "name: x\nload:\n  mode: throughput\n",
        "load.throughput: expected a throughput target (tps) for throughput mode, got nothing",
    ),
    (
        "name: x\nload:\n  mode: throughput\n  throughput: {tps: 0}\n",
        "load.throughput.tps: expected a number > 0, got 0",
    ),
    (
        "name: x\nload:\n  mode: throughput\n  throughput: {tps: 1000, bursts: [{at_s: 5, tps: 4000}]}\n",
        "load.throughput.bursts[0].over_s: required field missing",
    ),
    (
        "name: x\nload:\n  mode: throughput\n  duration_s: 20\n"
        "  throughput: {tps: 1000, bursts: [{at_s: 15, over_s: 10, tps: 4000}]}\n",
        "load.throughput.bursts[0].at_s: expected a burst ending within duration_s (20), got 15",
    ),
    (
        "name: x\nload:\n  mode: throughput\n  throughput:\n    tps: 1000\n    bursts:\n"
        "      - {at_s: 5, over_s: 10, tps: 4000}\n      - {at_s: 12, over_s: 2, tps: 3000}\n",
        "load.throughput.bursts[1].at_s: expected bursts that do not overlap "
        "(previous ends at 15), got 12",
    ),
    (
        "name: x\nload:\n  mode: open\n  arrival: {rate: 1}\n  max_in_flight: 0\n",
        "load.max_in_flight: expected an integer ≥ 1, got 0",
    ),
    (
        "name: x\nload:\n  max_schedule_lag_ms: -1\n",
        "load.max_schedule_lag_ms: expected a number > 0, got -1",
    ),
    (
        "name: x\nrollout:\n  trace: traces/a.jsonl\n  tool_calls: 5\n",
        "rollout.tool_calls: expected no distribution next to rollout.trace "
        "(the trace gives every turn), got 5",
    ),
    ("name: x\nrollout:\n  trace: ''\n", "rollout.trace: expected a non-empty string, got ''"),
    (
        "name: x\nrollout:\n  reasoning_tokens: -300\n",
        "rollout.reasoning_tokens: expected a number ≥ 0, got -300",
    ),
    (
        "name: x\nrollout:\n  reasoning_tokens: {dist: lognormal, median: 300}\n",
        "rollout.reasoning_tokens.p95: required field missing",
    ),
    (
        "name: x\nrollout:\n  reasoning_tokens: {dist: uniform, min: -5, max: 10}\n",
        "rollout.reasoning_tokens.min: expected a number ≥ 0, got -5",
    ),
    (
        "name: x\nrollout:\n  reasoning_tokens: '300'\n",
        "rollout.reasoning_tokens: expected a number or a mapping with 'dist', got '300'",
    ),
    (
        "name: x\nrollout:\n  trace: traces/a.jsonl\n  reasoning_tokens: 300\n",
        "rollout.reasoning_tokens: expected no distribution next to rollout.trace "
        "(the trace gives every turn), got 300",
    ),
    (
        "name: x\nrollout:\n  count: 3\nload:\n  warmup_rollouts: 3\n",
        "load.warmup_rollouts: expected a number < rollout.count (3), got 3",
    ),
    ("name: x\nload: [1, 2]\n", "load: expected a mapping, got [1, 2]"),
    ("name: x\nseed: .nan\n", "seed: expected an integer, got nan"),
    (
        "name: x\nload:\n  mode: open\n  arrival: {rate: .inf}\n",
        "load.arrival.rate: expected a finite number, got inf",
    ),
    ("name: x\nflavour: spicy\n", None),  # unknown top-level key, no close match: lists fields
    ("- name: x\n", "expected a mapping of scenario fields, got a list [{name: x}]"),
    ("", "expected a mapping of scenario fields, got an empty file"),
    ("name: x\nseed: 1\nseed: 2\n", "invalid YAML at line 3, column 1: duplicate key 'seed'"),
    (
        "name: x\nload:\n  mode: open\n   concurrency: 2\n",
        "invalid YAML at line 4, column 15: mapping values are not allowed here",
    ),
]


def _write(tmp_path: Path, body: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize(("body", "message"), [b for b in BAD if b[1] is not None])
def test_bad_scenario_gives_one_exact_line(tmp_path: Path, body: str, message: str) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == f"{path}: {message}"
    assert "\n" not in str(info.value)
    assert info.value.source == str(path)


def test_catalogue_is_large() -> None:
    assert len(BAD) >= 10


def test_literal_typo_suggests_closest(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: x\ntransports: [http, htp]\n")
    with pytest.raises(ScenarioError, match=r"got 'htp' \(did you mean 'http'\?\)$"):
        load_scenario(path)


def test_unknown_key_without_close_match_lists_fields(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: x\nflavour: spicy\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.key == "flavour"
    assert str(info.value).startswith(f"{path}: flavour: unknown field (expected one of: name, ")


def test_missing_file() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario("scenarios/does-not-exist.yaml")
    assert str(info.value).startswith(
        "no scenario file or built-in named 'scenarios/does-not-exist.yaml'; built-ins: "
        "burst-storm, codex-reasoning, codex-replay,"
    ), str(info.value)


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="expected a YAML file, got a directory"):
        load_scenario(tmp_path)


def test_good_file_loads_with_defaults(tmp_path: Path) -> None:
    scenario = load_scenario(_write(tmp_path, GOOD, "ok.yaml"))
    assert scenario.name == "ok"
    assert scenario.transports == ["http", "ws"]
    assert scenario.load.concurrency == 2
    assert isinstance(scenario.rollout.tool_calls, UniformDist)
    # Defaults written as plain numbers are distributions as well.
    assert isinstance(scenario.rollout.final_answer_tokens, ConstantDist)
    assert scenario.source == str(tmp_path / "ok.yaml")


def test_overrides_apply_before_validation(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    scenario = load_scenario(
        path,
        {
            "load.concurrency": "4",
            "transports": "[http, ws-store]",
            "rollout.tool_output_tokens": "{dist: lognormal, median: 100, p95: 300}",
            "load.mode": "open",
            "load.arrival.rate": "2.5",
            "server.set.engine.sustained_tps": "500",
            "description": "",
        },
    )
    assert scenario.load.concurrency == 4
    assert scenario.transports == ["http", "ws-store"]
    assert isinstance(scenario.rollout.tool_output_tokens, LognormalDist)
    assert scenario.load.mode == "open"
    assert scenario.load.arrival is not None and scenario.load.arrival.rate == 2.5
    assert scenario.server.set == {"engine.sustained_tps": "500"}
    assert scenario.description == ""
    # The file itself is untouched by overrides.
    assert load_scenario(path).load.concurrency == 2


def test_override_into_existing_distribution(tmp_path: Path) -> None:
    scenario = load_scenario(_write(tmp_path, GOOD), {"rollout.tool_calls.max": "20"})
    tool_calls = scenario.rollout.tool_calls
    assert isinstance(tool_calls, UniformDist)
    assert tool_calls.max == 20


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"load.concurrency": "many"},
            "load.concurrency: expected an integer, got 'many' "
            "(from override load.concurrency=many)",
        ),
        (
            {"load.concurency": "4"},
            "load.concurency: unknown field (did you mean 'concurrency'?) "
            "(from override load.concurency=4)",
        ),
        (
            {"rollout.tool_calls.max": "3"},
            "rollout.tool_calls.max: expected a number > min (8), got 3 "
            "(from override rollout.tool_calls.max=3)",
        ),
        (
            {"rollout.count.max": "3"},
            "rollout.count.max: expected a mapping at rollout.count to set a field in, got 4",
        ),
    ],
)
def test_bad_override(tmp_path: Path, overrides: dict[str, str], message: str) -> None:
    path = _write(tmp_path, GOOD)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, overrides)
    assert str(info.value) == f"{path}: {message}"


def test_validate_scenario_does_not_mutate_input() -> None:
    data = {"name": "x", "load": {"concurrency": 1}}
    validate_scenario(data, overrides={"load.concurrency": "3"})
    assert data == {"name": "x", "load": {"concurrency": 1}}


def test_json_schema_export() -> None:
    schema = scenario_json_schema()
    text = json.dumps(schema)  # must be plain JSON
    assert schema["type"] == "object"
    assert schema["required"] == ["name"]
    for key in ("name", "seed", "transports", "server", "rollout", "load"):
        assert key in schema["properties"]
    assert schema["additionalProperties"] is False
    assert "lognormal" in text and "p95" in text
    assert "ws-append" in text
    # editors offer exactly the names a run accepts
    assert schema["properties"]["transports"]["items"]["enum"] == list(TRANSPORT_NAMES)


@pytest.mark.parametrize("name", ["quickstart", "tiny"])
def test_shipped_scenarios_validate(name: str) -> None:
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    assert scenario.name == name
    assert scenario.transports == ["http", "ws"]


def test_quickstart_shape() -> None:
    scenario = load_scenario(SCENARIOS / "quickstart.yaml")
    assert scenario.seed == 42
    assert 4 <= scenario.rollout.count <= 6
    assert scenario.load.mode == "closed" and scenario.load.concurrency == 2


def test_every_shipped_scenario_validates() -> None:
    files = sorted(SCENARIOS.glob("*.yaml"))
    assert files
    for path in files:
        load_scenario(path)


FIVE_MISTAKES = """\
name: My Bench
transports: [http, sdk-http]
rollout:
  tool_calls: {dist: uniform, min: 8, max: 3}
load:
  concurency: 2
  duration_s: -5
  mode: closed
"""


def test_every_mistake_of_a_file_in_one_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The unknown key hides the rest of `load` from pydantic, so duration_s is found only
    # by validating again with the unknown key set aside.
    path = _write(tmp_path, FIVE_MISTAKES)
    expected = [
        f"{path}: name: expected lowercase letters, digits and '-', got 'My Bench'",
        f"{path}: transports[1]: expected one of {', '.join(TRANSPORT_NAMES)}, "
        "got 'sdk-http' (did you mean 'http'?)",
        f"{path}: rollout.tool_calls.max: expected a number > min (8), got 3",
        f"{path}: load.concurency: unknown field (did you mean 'concurrency'?)",
        f"{path}: load.duration_s: expected a number > 0, got -5",
    ]
    with pytest.raises(InvalidScenarioError) as info:
        load_scenario(path)
    assert [str(p) for p in info.value.problems] == expected
    assert str(info.value) == "\n".join(expected)
    assert (info.value.key, info.value.source) == ("name", str(path))
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(path)])
    assert exc.value.code == ExitCode.USAGE
    out = capsys.readouterr()
    assert out.err.splitlines() == expected
    assert out.out == ""


def _problems(tmp_path: Path, body: str) -> list[tuple[str | None, str]]:
    """(field, detail) of each problem a scenario file of ``body`` is refused for, in order."""
    with pytest.raises(InvalidScenarioError) as info:
        load_scenario(_write(tmp_path, body))
    return [(p.key, p.detail) for p in info.value.problems]


def test_cross_field_checks_run_behind_field_errors(tmp_path: Path) -> None:
    body = "name: x\nseed: -1\nrollout: {count: 3}\nload: {warmup_rollouts: 3}\n"
    assert _problems(tmp_path, body) == [
        ("seed", "expected an integer ≥ 0, got -1"),
        ("load.warmup_rollouts", "expected a number < rollout.count (3), got 3"),
    ]


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        # A misspelt required key is not reported missing under its right name as well, and
        # a field set aside is not reported again by the check that then sees its default.
        pytest.param(
            "name: x\nrollout:\n  tool_latency_ms: {dist: lognormal, median: 100, p99: 600}\n"
            "load:\n  mode: open\n  arrival: {process: poisson, rate: -2}\n",
            ["rollout.tool_latency_ms.p99", "load.arrival.rate"],
            id="a-consequence-is-not-a-second-problem",
        ),
        pytest.param(
            "name: x\nload:\n  mode: open\n  arrival: {rate: 1}\n  duration_s: 10\n"
            "  bursts: [{at_s: 1, extra: 0}, {at_s: -1, extra: 2}]\n",
            ["load.bursts[0].extra", "load.bursts[1].at_s"],
            id="errors-in-list-items-keep-their-index",
        ),
    ],
)
def test_each_problem_is_named_once_by_its_field(
    tmp_path: Path, body: str, fields: list[str]
) -> None:
    assert [field for field, _ in _problems(tmp_path, body)] == fields


def test_missing_name_does_not_hide_the_rest(tmp_path: Path) -> None:
    assert _problems(tmp_path, "rollout: {count: 2}\nload: {warmup_rollouts: 2}\n") == [
        ("name", "required field missing"),
        ("load.warmup_rollouts", "expected a number < rollout.count (2), got 2"),
    ]


def test_run_of_an_unknown_transport_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "name: x\ntransports: [sdk-http]\n")
    with pytest.raises(SystemExit) as exc:
        main(["run", str(path), "--out", str(tmp_path / "results")])
    assert exc.value.code != ExitCode.OK
    assert capsys.readouterr().err == (
        f"error: {path}: transports[0]: expected one of {', '.join(TRANSPORT_NAMES)}, "
        "got 'sdk-http' (did you mean 'http'?)\n"
    )
    assert not (tmp_path / "results").exists()


def _properties(node: object, where: str = "#") -> list[tuple[str, dict[str, object]]]:
    """Every ``properties`` entry of a JSON Schema, wherever it is nested."""
    found: list[tuple[str, dict[str, object]]] = []
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            found.append((f"{where}.{name}", prop))
        for key, child in node.items():
            found += _properties(child, f"{where}/{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found += _properties(child, f"{where}[{i}]")
    return found


def test_every_schema_field_has_a_description() -> None:
    # What an editor shows on hover: a field without one shows only its type.
    props = _properties(scenario_json_schema())
    assert len(props) >= 60
    missing = [where for where, prop in props if not str(prop.get("description", "")).strip()]
    assert missing == []
    # The walk itself finds a field without a description.
    assert _properties({"properties": {"x": {"type": "integer"}}}) == [("#.x", {"type": "integer"})]
