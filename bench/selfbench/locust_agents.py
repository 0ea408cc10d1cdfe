"""Agents per Locust worker process: the agents-per-core search, through ``loopbench locust``.

The same steps as :mod:`.agents` (the same scenario, verdict and search), but each step
is a real Locust run: a master (on the server's core: it is not the process being
measured) and one worker process pinned to the client core, which runs its rollouts
in its edge host (harness/run/edge_host.py, a child that inherits the pin).  The
client's CPU is the worker's process tree, sampled over the steady window; the pace is
counted from the run's turn rows.  ``root`` names the checkout whose ``harness`` runs,
so two versions of the worker can be measured side by side in one run
(bench/selfbench/locust_side_by_side.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.selfbench.agents import (
    LIFECYCLE_TEXT_TURN,
    LIFECYCLE_TOOL_TURN,
    AgentsAnswer,
    AgentsOptions,
    AgentsStep,
    _cores,
    agents_figures,
    agents_server,
    scenario_fields,
    search_agents,
    step_from_summary,
)
from bench.selfbench.cpu_steal import read_cpu_times, steal_percent
from bench.selfbench.figures import Figure
from bench.selfbench.procs import SelfbenchError
from harness.report.results import load_run
from harness.run.locust_options import locust_argv
from harness.run.proc_cpu import tree_cpu_seconds

ROOT = Path(__file__).resolve().parents[2]
#: the figure's key and words
KEY = "locust_agents"
WHAT = "agents per Locust worker process"
#: how long a step may take beyond its scenario's duration (Locust's start-up, the results)
SLACK_S = 90.0
SAMPLE_S = 0.25


@dataclass(frozen=True, slots=True)
class LocustAgentsOptions:
    agents: AgentsOptions = field(
        default_factory=lambda: AgentsOptions(transports=("ws",), budget_s=300.0)
    )
    #: the checkout whose harness the master and worker run (a string: the options are
    #: written into the bench's JSON)
    root: str = str(ROOT)

    @classmethod
    def quick(cls) -> LocustAgentsOptions:
        # one step: a Locust run starts a master and a worker (seconds of imports)
        quick = AgentsOptions.quick()
        return cls(agents=replace(quick, transports=("ws",), start=4, max_steps=1))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pinned(cores: set[int] | None) -> Callable[[], None] | None:
    if cores is None:
        return None
    return lambda: os.sched_setaffinity(0, cores)


class _Sampler:
    """(epoch ns, worker tree CPU s, server tree CPU s) every :data:`SAMPLE_S`, in a thread."""

    def __init__(self, worker_pid: int, server_pid: int | None) -> None:
        self.samples: list[tuple[int, float | None, float | None]] = []
        self._pids = worker_pid, server_pid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="locust-agents-cpu")
        self._thread.start()

    def _run(self) -> None:
        worker, server = self._pids
        while not self._stop.wait(SAMPLE_S):
            srv = tree_cpu_seconds(server) if server else None
            self.samples.append((time.time_ns(), tree_cpu_seconds(worker), srv))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, t0: int, t1: int) -> tuple[float, float, float | None] | None:
        """(wall s, worker CPU s, server CPU s) between the samples nearest ``t0`` and ``t1``."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1 and s[1] is not None]
        if len(inside) < 2:
            return None
        (a, wa, sa), (b, wb, sb) = inside[0], inside[-1]
        assert wa is not None and wb is not None
        server = sb - sa if sa is not None and sb is not None else None
        return (b - a) / 1e9, wb - wa, server


#: Locust's CLI with ``harness`` imported from another checkout, before Locust puts the
#: working directory first on the path (and past an editable install's import hook)
_ELSEWHERE = (
    "import sys; root = sys.argv.pop(1); "
    "sys.meta_path[:] = [f for f in sys.meta_path if '_editable_' not in repr(f)]; "
    "sys.path.insert(0, root); import harness; "
    "from locust.main import main; sys.argv[0] = 'locust'; main()"
)


def _locust(root: Path, *args: str) -> list[str]:
    locustfile = str(root / "harness" / "locust_driver" / "locustfile.py")
    if root.resolve() == ROOT:
        return [sys.executable, "-m", "locust", "-f", locustfile, *args]
    return [sys.executable, "-c", _ELSEWHERE, str(root), "-f", locustfile, *args]


def run_locust_step(
    url: str,
    opts: AgentsOptions,
    transport: str,
    agents: int,
    server_pid: int | None,
    *,
    root: Path = ROOT,
    cores: tuple[set[int], set[int]] | None = None,
) -> AgentsStep:
    """One Locust run of ``agents`` agents over ``transport``, one worker; its verdict and cost."""
    name, rollout, load = scenario_fields(opts, agents, transport)
    doc = {"name": name, "seed": 11, "transports": [transport], "rollout": rollout, "load": load}
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
    duration_s = float(load["duration_s"])
    with tempfile.TemporaryDirectory(prefix="loopbench-selfbench-") as tmp:
        scenario = Path(tmp) / "scenario.yaml"
        scenario.write_text(json.dumps(doc), encoding="utf-8")  # JSON is YAML
        port = str(_free_port())
        quiet = ("--loglevel", "WARNING")
        master_cmd = _locust(
            root,
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            port,
            "--expect-workers",
            "1",
            "--expect-workers-max-wait",
            "60",
            "--headless",
            "--only-summary",
            "-H",
            url,
            "--scenario",
            str(scenario),
            # The step reads summary.json and the turn rows; report.md, report.html and
            # plots/ would cost the master ~4 s of rendering after the run, then be deleted.
            *locust_argv({"out": tmp, "run_id": name, "no_report": True}),
            *quiet,
        )
        worker_cmd = _locust(root, "--worker", "--master-host", "127.0.0.1", "--master-port", port)
        t0 = time.perf_counter()
        steal0 = read_cpu_times()
        logs = [Path(tmp) / "master.log", Path(tmp) / "worker.log"]
        with logs[0].open("wb") as mlog, logs[1].open("wb") as wlog:
            master = subprocess.Popen(
                master_cmd,
                env=env,
                stdout=mlog,
                stderr=subprocess.STDOUT,
                preexec_fn=_pinned(cores[1] if cores else None),
            )
            worker = subprocess.Popen(
                [*worker_cmd, *quiet],
                env=env,
                stdout=wlog,
                stderr=subprocess.STDOUT,
                preexec_fn=_pinned(cores[0] if cores else None),
            )
            sampler = _Sampler(worker.pid, server_pid)
            try:
                code = master.wait(timeout=duration_s + SLACK_S)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                sampler.stop()
                for proc in (master, worker):
                    if proc.poll() is None:
                        proc.terminate()
                    try:
                        proc.wait(15)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(5)
        steal = steal_percent(steal0, read_cpu_times())
        run_dir = Path(tmp) / name
        if code is None or not (run_dir / "summary.json").is_file():
            tail = " | ".join(
                line for log in logs for line in log.read_text(errors="replace").splitlines()[-3:]
            )
            raise SelfbenchError(f"locust step of {agents} agents ended with code {code}: {tail}")
        run = load_run(run_dir)
    turns = run.turns
    ok = turns[turns["status"].isin(("completed", "incomplete"))]
    first = int(turns["sent_ns"][turns["sent_ns"] > 0].min()) if len(turns) else 0
    rollout_s = opts.turn_period_s * (opts.tool_calls + 1)
    win0 = first + round((opts.turn_period_s + rollout_s) * 1e9)
    win1 = first + round(opts.step_seconds * 1e9 + (opts.turn_period_s + rollout_s) * 1e9)
    win1 = min(win1, first + round(duration_s * 1e9))
    done = ok["done_ns"].astype("int64")
    steady = ok[(done >= win0) & (done < win1)]
    in_window = len(steady)
    lifecycle = (steady["turn_index"] == opts.tool_calls).map(
        {True: LIFECYCLE_TEXT_TURN, False: LIFECYCLE_TOOL_TURN}
    )
    events = int((steady["delta_events"] + lifecycle).sum())
    rate = in_window / ((win1 - win0) / 1e9) if win1 > win0 and first else None
    cpu = sampler.between(win0, win1)
    return step_from_summary(
        opts,
        transport,
        agents,
        run.summary or {},
        rate=rate,
        cpu=cpu,
        turns=in_window,
        events=events,
        cpu_window="steady" if cpu is not None else "none",
        seconds=time.perf_counter() - t0,
        steal=steal,
    )


def measure_locust_agents(
    opts: LocustAgentsOptions, say: Callable[[str], None] = lambda _: None
) -> tuple[list[AgentsAnswer], dict[str, Any]]:
    """Per transport, the largest agent count one Locust worker process sustains."""
    answers: list[AgentsAnswer] = []
    a = opts.agents
    cores = _cores() if a.pin else None

    def step(url: str, o: AgentsOptions, t: str, n: int, pid: int | None) -> AgentsStep:
        return run_locust_step(url, o, t, n, pid, root=Path(opts.root), cores=cores)

    with agents_server(a) as (url, pid, facts):
        for transport in a.transports:
            search, steps = search_agents(url, a, transport, pid, say, step, WHAT)
            best = search.best
            at = next((s for s in steps if s.passed and s.agents == best), None)
            answers.append(AgentsAnswer(transport, int(best) if best else None, at, search, steps))
    facts = {**facts, "worker_core": sorted(cores[0]) if cores else None}
    facts["master_core"] = sorted(cores[1]) if cores else None
    return answers, facts


def locust_agents_figures(answers: Sequence[AgentsAnswer], bound_ms: float) -> list[Figure]:
    return [f for ans in answers for f in agents_figures(ans, bound_ms, KEY, WHAT)]
