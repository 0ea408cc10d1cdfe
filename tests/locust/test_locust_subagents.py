"""Sub-agents run under ``loopbench run`` only: the Locust edge refuses them before starting."""

from __future__ import annotations

import pytest

from harness.cli.main import main
from harness.locust_driver.agent_loop import run_rollout
from harness.wire.errors import UsageError
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import load_scenario


def test_locust_refuses_a_scenario_with_subagents(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["locust", "subagents"])
    assert exc.value.code == 4
    err = capsys.readouterr().err
    assert "rollout.subagents: sub-agents run under loopbench run only" in err, err
    assert err.count("\n") == 1


def test_the_gevent_loop_refuses_a_plan_that_forks() -> None:
    # a trace's sub-agents reach the worker as plans: refused before any I/O
    plan = generate_rollouts(load_scenario("subagents"))[0]
    with pytest.raises(UsageError, match="forks sub-agents, which run under loopbench run only"):
        run_rollout(
            None,  # type: ignore[arg-type]
            plan,
            intended_start_ns=0,
            round_index=0,
            model="m",
            on_turn=lambda rec: None,
            sleep=lambda s: None,
        )
