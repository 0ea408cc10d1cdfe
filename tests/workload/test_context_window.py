"""Scenarios whose rollouts outgrow the model's context window are refused before they run."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.main import main
from harness.wire.errors import ScenarioError
from harness.workload.rollout import context_tokens, generate_rollouts
from harness.workload.scenario import InvalidScenarioError, validate_scenario

GROWING = {
    "name": "growing",
    "rollout": {
        "count": 2,
        "system_tokens": 1000,
        "tool_schema_tokens": 0,
        "user_prompt_tokens": 100,
        "tool_calls": 10,
        "tool_output_tokens": 1000,
        "step_output_tokens": 50,
        "final_answer_tokens": 50,
    },
}


def test_history_estimate_counts_items_and_requested_output() -> None:
    plan = generate_rollouts(validate_scenario(GROWING))[0]
    per_turn = context_tokens(plan)
    # Turn 0: 1,000 + 100 tokens and two items of framing; it asks for 2 x 50 + 32 = 132.
    assert per_turn[0] == (1100 + 8, 132)
    # Each turn adds its call (50 tokens) and the tool output (1,000), 8 framing tokens.
    assert per_turn[1] == (1108 + 1050 + 8, 132)
    assert per_turn[10][0] == 1108 + 10 * 1058


def test_a_rollout_over_the_window_is_refused_naming_the_turn() -> None:
    scenario = validate_scenario({**GROWING, "context_window_tokens": 6000})
    with pytest.raises(ScenarioError) as err:
        generate_rollouts(scenario)
    # Turn 4 holds 1,108 + 4 x 1,058 = 5,340 tokens + 132 requested: fits; turn 5 does not.
    assert str(err.value) == (
        "<scenario>: context_window_tokens: expected rollouts that fit the context window of "
        "6,000 tokens, but rollout 0 turn 5 needs 6,530 (history 6,398 + requested output 132); "
        "set rollout.compact_at_tokens below the window, shorten the rollout, or set "
        "context_window_tokens to your endpoint's"
    )


def test_a_compacting_rollout_is_not_refused() -> None:
    data = {**GROWING, "context_window_tokens": 6000}
    data["rollout"] = {**GROWING["rollout"], "compact_at_tokens": 4000}
    assert generate_rollouts(validate_scenario(data))


def test_compact_at_tokens_must_be_below_the_window() -> None:
    data = {**GROWING, "context_window_tokens": 6000}
    data["rollout"] = {**GROWING["rollout"], "compact_at_tokens": 6000}
    with pytest.raises(InvalidScenarioError) as err:
        validate_scenario(data)
    assert str(err.value) == (
        "<scenario>: rollout.compact_at_tokens: expected a number of tokens below "
        "context_window_tokens (6000), got 6000"
    )


def _too_long(tmp_path: Path) -> Path:
    """A scenario file whose rollout outgrows the default 400,000-token context window."""
    path = tmp_path / "long.yaml"
    path.write_text(
        "name: long\nrollout:\n  count: 1\n  tool_calls: 100\n  tool_output_tokens: 5000\n"
    )
    return path


def test_validate_exits_4_with_the_file_turn_and_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _too_long(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["validate", str(path)])
    assert exc.value.code == 4
    err = capsys.readouterr().err
    assert err.startswith(
        f"{path}: context_window_tokens: expected rollouts that fit the context window of 400,000 tokens, but rollout 0 turn 79 needs "
    )
    assert "(history " in err and "+ requested output " in err


def test_run_refuses_it_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _too_long(tmp_path)
    out = tmp_path / "results"
    with pytest.raises(SystemExit) as exc:
        main(["run", str(path), "--out", str(out), "-q"])
    assert exc.value.code == 4
    assert "rollout 0 turn 79 needs " in capsys.readouterr().err
    assert not out.exists()


def test_the_embedded_servers_window_applies_unless_one_is_written() -> None:
    small = {**GROWING, "server": {"set": {"engine.context_window_tokens": 6000}}}
    assert validate_scenario(small).window_tokens == 6000
    with pytest.raises(ScenarioError, match="context window of 6,000 tokens"):
        generate_rollouts(validate_scenario(small))
    written = {**small, "context_window_tokens": 20000}
    assert validate_scenario(written).window_tokens == 20000
    assert generate_rollouts(validate_scenario(written))


def test_a_written_window_is_the_embedded_servers_too() -> None:
    # Validated against 20,000 tokens, run against a server enforcing 400,000 (or the reverse)
    # would fail mid-run: the embedded server gets the window the scenario declares.
    written = validate_scenario({**GROWING, "context_window_tokens": 20000})
    assert written.embedded_overrides() == {
        "engine.context_window_tokens": "20000",
        "engine.max_output_tokens": "20000",  # the cap may not exceed the window
    }
    large = validate_scenario({**GROWING, "context_window_tokens": 1_000_000})
    assert large.embedded_overrides() == {"engine.context_window_tokens": "1000000"}
    # nothing written: the server keeps its profile's window; server.set always wins
    assert validate_scenario(GROWING).embedded_overrides() == {}
    both = {**GROWING, "context_window_tokens": 20000}
    both["server"] = {"set": {"engine.context_window_tokens": 30000}}
    assert validate_scenario(both).embedded_overrides()["engine.context_window_tokens"] == "30000"
