"""What :func:`place` does to vLLM's processes and what it says it did, against a stand-in
process tree named as vLLM names its processes (an API server forking an engine core, which
forks a worker; the engine core with a second thread, as vLLM's has an output thread).
The kernel is real: affinities and nicenesses are set and read back through it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.real_engine import engine
from tools.real_engine.engine import CORE_NICE, _descendants, _named, place

_TREE = """
import os, threading, time
def named(name):
    with open("/proc/self/comm", "w") as f:
        f.write(name)
if os.fork() == 0:
    if os.fork() == 0:
        named("VLLM::Worker")
    else:
        named("VLLM::EngineCor")
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
time.sleep(60)
"""


def _nices(root: int, prefix: str) -> set[int]:
    pids = _named(_descendants(root), prefix)
    return {
        os.getpriority(os.PRIO_PROCESS, int(t))
        for pid in pids
        for t in os.listdir(f"/proc/{pid}/task")
    }


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


@pytest.fixture
def tree() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", _TREE], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            under = _descendants(proc.pid)
            cores = _named(under, "VLLM::EngineCor")
            if _named(under, "VLLM::Worker") and cores and len(_tasks(cores[0])) == 2:
                break
            time.sleep(0.05)
        yield proc.pid
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_a_placement_finds_no_vllm_under_a_process_that_is_not_one() -> None:
    said = place(os.getpid(), "engine-niced")
    assert said.text.startswith("placement engine-niced: no vLLM worker or engine-core process")
    assert not said.applied


def test_engine_niced_nices_every_thread_and_says_so(tree: int) -> None:
    said = place(tree, "engine-niced")
    assert _nices(tree, "VLLM::EngineCor") == {CORE_NICE}
    assert _nices(tree, "VLLM::Worker") == {CORE_NICE}
    assert said.applied
    assert f"at nice {CORE_NICE}, worker at nice {CORE_NICE}" in said.text


def test_vllm_leaves_a_just_started_server_as_it_is(tree: int) -> None:
    place(tree, "engine-niced")
    said = place(tree, "vllm")
    # untouched: what was there (here niced by the line above) stays, and is what is said
    assert _nices(tree, "VLLM::EngineCor") == {CORE_NICE}
    assert said.applied
    assert said.text.startswith("placement vllm (as vLLM placed them): ")
    assert f"at nice {CORE_NICE}, worker at nice {CORE_NICE}" in said.text


def test_vllm_with_reset_undoes_the_previous_placement(tree: int) -> None:
    place(tree, "engine-niced")
    said = place(tree, "vllm", reset=True)
    assert _nices(tree, "VLLM::EngineCor") == {0}
    assert _nices(tree, "VLLM::Worker") == {0}
    assert said.applied
    assert "at nice 0, worker at nice 0" in said.text


def test_a_niceness_that_could_not_be_lowered_is_reported_as_it_is(
    tree: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without CAP_SYS_NICE the kernel refuses to lower a niceness (EPERM); the tests may
    run as root, so the refusal is made here the way the kernel makes it."""
    place(tree, "engine-niced")
    real = os.setpriority

    def unprivileged(which: int, who: int, prio: int) -> None:
        if prio < os.getpriority(which, who):
            raise PermissionError(1, "Operation not permitted")
        real(which, who, prio)

    monkeypatch.setattr(engine.os, "setpriority", unprivileged)
    said = place(tree, "vllm", reset=True)
    assert _nices(tree, "VLLM::EngineCor") == {CORE_NICE}
    assert not said.applied
    assert f"engine core on {sorted(os.sched_getaffinity(0))} at nice {CORE_NICE}," in said.text
    assert "NOT applied: engine core at nice 0 (it is 19" in said.text
    assert "worker at nice 0 (it is 19" in said.text


def _group_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


needs_autogroups = pytest.mark.skipif(
    engine._autogroup(os.getpid()) is None, reason="the kernel schedules without autogroups"
)


@needs_autogroups
def test_group_niced_nices_vllms_own_session_and_says_so(tree: int) -> None:
    said = place(tree, "group-niced")
    assert _group_nice(tree) == CORE_NICE
    assert _nices(tree, "VLLM::Worker") == {CORE_NICE}
    assert said.applied
    assert said.text.endswith(f"vLLM's autogroup at nice {CORE_NICE}")
    said = place(tree, "vllm", reset=True)
    assert _group_nice(tree) == 0
    assert said.text.endswith("vLLM's autogroup at nice 0")


@needs_autogroups
def test_group_niced_leaves_the_callers_own_session_alone() -> None:
    """A server started in the caller's session shares the caller's autogroup: nicing it
    would nice the measuring client too."""
    proc = subprocess.Popen([sys.executable, "-c", _TREE])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _named(_descendants(proc.pid), "VLLM::Worker"):
            time.sleep(0.05)
        mine = _group_nice(os.getpid())
        said = place(proc.pid, "group-niced")
        assert _group_nice(os.getpid()) == mine
        assert "vLLM has no autogroup of its own" in said.text
    finally:
        for pid in _descendants(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        proc.kill()
        proc.wait()


def _cpus(pid: int) -> set[tuple[int, ...]]:
    return {tuple(sorted(os.sched_getaffinity(int(t)))) for t in _tasks(pid)}


needs_two_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="pinned splits the CPUs: it needs two"
)


@needs_two_cpus
@pytest.mark.parametrize("placement", ["pinned", "worker-alone"])
def test_a_split_puts_the_worker_on_the_last_cpu_and_the_front_end_on_the_others(
    tree: int, placement: str
) -> None:
    """``pinned`` keeps the engine core beside the worker, ``worker-alone`` beside the API
    server; both nice it so that its polling yields."""
    cpus = sorted(os.sched_getaffinity(0))
    back, front = (cpus[-1],), tuple(cpus[:-1])
    core_on = back if placement == "pinned" else front
    said = place(tree, placement)
    under = _descendants(tree)
    (worker,), (core,) = _named(under, "VLLM::Worker"), _named(under, "VLLM::EngineCor")
    assert _cpus(worker) == {back}
    assert _cpus(core) == {core_on}  # both threads of the engine core
    assert _nices(tree, "VLLM::EngineCor") == {CORE_NICE}
    assert _nices(tree, "VLLM::Worker") == {0}
    assert _cpus(tree) == {front}
    assert said.applied
    assert f"worker on CPUs {list(back)}, engine core on {list(core_on)} at nice {CORE_NICE}" in (
        said.text
    )
    assert f"API server on {list(front)}" in said.text
    assert engine.placement_env(placement) == {"VLLM_CPU_OMP_THREADS_BIND": str(cpus[-1])}
    said = place(tree, "vllm", reset=True)
    assert _cpus(core) == {tuple(cpus)}
    assert _cpus(tree) == {tuple(cpus)}


@needs_two_cpus
def test_pinned_binds_vllms_openmp_thread_and_the_caller_apart() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    assert engine.placement_env("pinned") == {"VLLM_CPU_OMP_THREADS_BIND": str(cpus[-1])}
    assert engine.placement_env("group-niced") == {}
    with engine.caller_placed("pinned"):
        assert sorted(os.sched_getaffinity(0)) == cpus[:-1]
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert child.stdout.strip() == str(cpus[:-1])  # what the caller starts runs there too
        # a placement made from inside (delivery places vLLM afresh there) still splits the
        # CPUs the process started with, not the front it is now confined to
        assert engine.split_cpus() == (set(cpus[:-1]), {cpus[-1]})
        assert engine.placement_env("pinned") == {"VLLM_CPU_OMP_THREADS_BIND": str(cpus[-1])}
    assert sorted(os.sched_getaffinity(0)) == cpus
    with engine.caller_placed("engine-niced"):
        assert sorted(os.sched_getaffinity(0)) == cpus


@needs_two_cpus
def test_pinned_loop_nices_the_engine_cores_main_thread_only(tree: int) -> None:
    """Its other threads (here the stand-in's second) wait for input and send output: at
    nice 0 they take the CPU from the worker as soon as they wake."""
    said = place(tree, "pinned-loop")
    (core,) = _named(_descendants(tree), "VLLM::EngineCor")
    nices = {
        int(t): os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir(f"/proc/{core}/task")
    }
    assert nices.pop(core) == CORE_NICE
    assert set(nices.values()) == {0}
    assert said.applied
    assert f"at nice 0 / {CORE_NICE}" in said.text
