"""Sub-agents run under ``loopbench run`` only: ``loopbench locust`` refuses them before starting."""

from __future__ import annotations

import pytest

from harness.cli.main import main


def test_locust_refuses_a_scenario_with_subagents(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["locust", "subagents"])
    assert exc.value.code == 4
    err = capsys.readouterr().err
    assert "rollout.subagents: sub-agents run under loopbench run only" in err, err
    assert err.count("\n") == 1
