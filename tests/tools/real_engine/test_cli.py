"""`python -m tools.real_engine`'s command line: help, and usage errors exit 4 (no engine)."""

from __future__ import annotations

import signal
from pathlib import Path
from types import ModuleType

import pytest

from bench.options import options_from
from harness.wire.errors import LoopbenchError
from harness.wire.exit_codes import ExitCode
from tests.tools.real_engine.engine_venv import assert_usage_errors
from tools.real_engine import __main__ as cli
from tools.real_engine import delivery, scrape_cost, simulate
from tools.real_engine.__main__ import main
from tools.real_engine.run import Options
from tools.real_engine.simulate import SIM_PLACEMENT, SIM_REQUESTS, SimOptions


def test_help_lists_the_targets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "within 3 ms of vLLM's" in out and "within 2 % (p50, mean)" in out


def test_a_bad_argument_or_a_missing_engine_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = "expected none or some of chat, http, http-chained, messages"
    assert_usage_errors(main, ["--transports", "ws"], expected, tmp_path, capsys)
    # a folder it did not make is never emptied
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("x")
    assert main(["--out", str(mine)]) == ExitCode.USAGE
    assert "was not made by python -m tools.real_engine" in capsys.readouterr().err
    assert (mine / "keep.txt").exists()


def test_the_simulation_takes_the_placement_the_main_runner_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/real-engine.md says `--placement vllm` restores vLLM's own for both runners; the
    sim's default is its own (the placement where vLLM repeated itself best)."""
    seen: list[SimOptions] = []

    def stop(opts: SimOptions) -> None:
        seen.append(opts)
        raise LoopbenchError("stopped here")

    monkeypatch.setattr(simulate, "run_sim", stop)
    assert simulate.main(["--placement", "vllm"]) == ExitCode.USAGE
    assert simulate.main([]) == ExitCode.USAGE
    # run_sim hands the placement to the real-engine options it starts vLLM with
    assert [options_from(Options, o).placement for o in seen] == ["vllm", SIM_PLACEMENT]
    assert [o.requests for o in seen] == [SIM_REQUESTS, SIM_REQUESTS]
    capsys.readouterr()
    for runner in (main, simulate.main):
        with pytest.raises(SystemExit):
            runner(["--help"])
        assert "leaves them as vLLM puts them" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("module", "measure"),
    [(cli, "run"), (simulate, "run_sim"), (delivery, "run"), (scrape_cost, "run")],
    ids=["real_engine", "simulate", "delivery", "scrape_cost"],
)
def test_a_sigterm_stops_the_run_as_ctrl_c_does(
    module: ModuleType,
    measure: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `timeout` or a cancelled CI step sends SIGTERM: it must unwind through the run (whose
    `serving` block stops the vLLM it started) instead of ending the process at once, in
    every command that starts vLLM."""

    def run(*args: object, **kwargs: object) -> None:
        signal.raise_signal(signal.SIGTERM)
        raise AssertionError("not reached: SIGTERM is raised as KeyboardInterrupt")

    monkeypatch.setattr(module, measure, run)
    term, intr = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert module.main(["--out", str(tmp_path / "out")]) == ExitCode.INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, term)
        signal.signal(signal.SIGINT, intr)
    assert "interrupted: vLLM stopped" in capsys.readouterr().err
