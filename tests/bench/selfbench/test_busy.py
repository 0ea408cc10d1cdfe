"""The benches' busy-machine judge: other processes' CPU during a step, and what follows."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bench.selfbench.__main__ as selfbench_main
import bench.selfbench.bench as selfbench
from bench.peers.figures import target
from bench.selfbench.busy import OTHERS_MAX_CORE_SHARE, _Reading, others_between
from bench.selfbench.figures import at_most, figure
from harness.wire.exit_codes import ExitCode

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(busy_ticks: int, steal_ticks: int = 0, idle: int = 0) -> tuple[int, ...]:
    # user nice system idle iowait irq softirq steal guest guest_nice
    return (busy_ticks, 0, 0, idle, 0, 0, 0, steal_ticks, 0, 0)


def test_others_are_the_machines_busy_time_minus_the_benchs_own_tree_plus_steal() -> None:
    before = _Reading(_cpu(0), 10.0, 100.0)
    # 2 s wall: 3 s of CPU busy machine-wide (0.5 s of it stolen), 1 s of it the bench's
    after = _Reading(_cpu(int(2.5 * TICK), int(0.5 * TICK), TICK), 11.0, 102.0)
    busy = others_between(before, after)
    assert busy is not None
    assert busy.others_cores == pytest.approx(1.0) and busy.steal_cores == pytest.approx(0.25)
    assert busy.busy and busy.not_judged() == (
        "not judged: the machine was busy (others used 100 % of a core)"
    )
    # the bench alone: quiet (tick rounding below zero is nobody)
    alone = others_between(before, _Reading(_cpu(TICK), 11.02, 102.0))
    assert alone is not None and alone.others_cores == 0.0 and not alone.busy
    assert others_between(_Reading(None, 1.0, 0.0), after) is None


HOG_S = 20.0  # bounded: the hog ends by itself even if the test is killed


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc")
def test_a_bench_step_beside_a_cpu_hog_is_not_judged_and_exits_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real judge and exit codes around a tiny step (0.3 s) with a busy-loop beside it."""
    runs: list[int] = []

    def tiny_step(opts: object, out: selfbench._Collected, say: object) -> None:
        runs.append(1)
        time.sleep(0.3)  # the bench idles: whatever is busy is someone else
        out.figures.append(figure("tiny", "tiny step", 1.0, "ms", at_most(2.0, "<= 2 ms")))

    monkeypatch.setattr(selfbench, "_memory", tiny_step)
    # Another process, not the bench's: started through a launcher that exits at once, so the
    # hog is re-parented and its CPU is not the bench's process tree's (a child's would be).
    spin = f"import time\nt = time.monotonic() + {HOG_S}\nwhile time.monotonic() < t: pass"
    launcher = (
        "import subprocess, sys\n"
        f"print(subprocess.Popen([sys.executable, '-c', {spin!r}], start_new_session=True,"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
    )  # the hog holds no end of the pipe, or reading the pid would wait for it to end
    hog_pid = int(subprocess.check_output([sys.executable, "-c", launcher], text=True))
    try:
        time.sleep(0.2)  # the hog is spinning
        code = selfbench_main.main(
            ["--steps", "memory", "--check", "-q", "--out", str(tmp_path / "sb.json")]
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hog_pid, signal.SIGKILL)
    out = capsys.readouterr().out
    assert code == ExitCode.INVALID, out
    assert len(runs) == 3  # repeated while busy, then set aside
    assert "| not judged |" in out
    assert "not judged: the machine was busy (others used " in out
    assert OTHERS_MAX_CORE_SHARE < 1.0  # a spinning core is always over the line


def test_a_busy_run_leaves_the_peer_target_unjudged() -> None:
    def run(tool: str, p: float, busy: str = "") -> dict[str, object]:
        return {"tool": tool, "transport": "chat", "streams": 4, "status": "ok",
                "not_judged": busy or None, "figures": {"error_ms": {"p50": p, "p99": p}}}  # fmt: skip

    quiet = target([run("loopbench", 0.1), run("guidellm", 10.0)], 4)
    assert quiet.passed is True
    busy = target([run("loopbench", 0.1), run("guidellm", 10.0, "not judged: x")], 4)
    assert busy.passed is None and busy.text.startswith("not judged: x")
