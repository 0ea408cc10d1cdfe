"""One simulated run: a real master, fake workers, their logs joined into figures.

The master is ``locust --master --headless`` on :mod:`.master_locustfile` (the loopbench
locustfile, timed) with a scenario written here: closed loop, ``workers × agents``
agents, the selfbench profile's ten turns a rollout, enough rollouts that none runs out
before ``--loopbench-run-time``.  The fake workers are ``procs`` processes of
:mod:`.fake_workers`, ``workers / procs`` zmq clients each.  The run is bounded: the master
stops the test at its run time, collects the finals and quits, which ends the fake
workers; a process still alive past the deadline is killed.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.master_sim.figures import figures
from bench.selfbench.busy import measure_busy
from bench.selfbench.memory import TURNS_PER_ROLLOUT
from harness.report.results import ROLLOUTS, TURNS, read_csv_gz
from harness.run.locust_options import locust_argv
from harness.wire.errors import LoopbenchError

ROOT = Path(__file__).resolve().parents[2]
MASTER_LOCUSTFILE = Path(__file__).with_name("master_locustfile.py")
#: the loopbench shape spawns at most this many users a second (ScenarioShape.tick)
SPAWN_RATE = 1000
#: how long the master may take past the run time: plan, finals (FINAL_WAIT_S), quitting
GRACE_S = 90.0


class SimError(LoopbenchError):
    """The simulation could not run (a process failed or overran): said in one line."""


@dataclass(frozen=True, slots=True)
class SimOptions:
    workers: int = 64
    agents: int = 150
    seconds: float = 20.0
    procs: int = 4
    turn_rate: float = 1.0


def scenario_yaml(opts: SimOptions) -> str:
    """Closed loop over ws; rollouts enough for the ramp and ``seconds`` of load."""
    users = opts.workers * opts.agents
    ramp_s = users / SPAWN_RATE
    rollout_s = TURNS_PER_ROLLOUT / opts.turn_rate
    count = users + math.ceil(users * (ramp_s + opts.seconds) / rollout_s * 1.2)
    return f"""name: master-sim
seed: 1
transports: [ws]
rollout:
  count: {count}
  system_tokens: 400
  tool_schema_tokens: 200
  user_prompt_tokens: 100
  tool_calls: {TURNS_PER_ROLLOUT - 1}
  tool_output_tokens: {{dist: uniform, min: 100, max: 300}}
  tool_latency_ms: {{dist: uniform, min: 500, max: 1500}}
  step_output_tokens: {{dist: uniform, min: 40, max: 80}}
  final_answer_tokens: 100
load: {{mode: closed, concurrency: {users}, warmup_rollouts: 0}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _tail(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return " | ".join(lines[-4:])


def run_sim(opts: SimOptions, work: Path | None = None) -> dict[str, Any]:
    """Run one simulation; its figures (:func:`.figures.figures`) plus the busy machine's."""
    if opts.workers < 1 or opts.agents < 1 or opts.procs < 1:
        raise SimError("--workers, --agents and --procs: expected at least 1 each")
    with tempfile.TemporaryDirectory(prefix="loopbench-master-sim-") as tmp:
        folder = Path(work or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        result, busy = measure_busy(lambda: _run(opts, folder))
    result["machine"] = None if busy is None else busy.as_dict()
    result["not_judged"] = busy.not_judged() if busy is not None and busy.busy else ""
    return result


def _run(opts: SimOptions, folder: Path) -> dict[str, Any]:
    scenario = folder / "scenario.yaml"
    scenario.write_text(scenario_yaml(opts), encoding="utf-8")
    port = _free_port()
    users = opts.workers * opts.agents
    run_time = users / SPAWN_RATE + opts.seconds
    deadline_s = run_time + GRACE_S + 120.0  # the plan is generated before the run time starts
    env = dict(
        os.environ, PYTHONUNBUFFERED="1", LOOPBENCH_MASTER_SIM_OUT=str(folder / "master.json")
    )
    env.pop("LOOPBENCH_PARENT_PID", None)
    master_cmd = [
        sys.executable, "-m", "locust", "-f", str(MASTER_LOCUSTFILE),
        "--master", "--headless", "--expect-workers", str(opts.workers),
        "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
        "--scenario", str(scenario), "-H", "http://127.0.0.1:9/v1",
        # no report: the figures read the stamps and the rows; plots of the run would cost
        # the master CPU after the measurement, for a folder nobody opens
        *locust_argv({"out": folder / "results", "run_id": "sim", "run_time": f"{run_time:g}",
                      "no_report": True}),
        "--only-summary", "--loglevel", "WARNING", "--exit-code-on-error", "0",
    ]  # fmt: skip
    started = time.monotonic()
    procs: list[subprocess.Popen[bytes]] = [_spawn(master_cmd, folder / "master.log", env)]
    per_proc = math.ceil(opts.workers / opts.procs)
    for i, first in enumerate(range(0, opts.workers, per_proc)):
        n = min(per_proc, opts.workers - first)
        fake_cmd = [
            sys.executable, "-m", "bench.master_sim.fake_workers",
            "--master-port", str(port), "--workers", str(n), "--name", f"fake{i}", "--first-index", str(first),
            "--turn-rate", f"{opts.turn_rate:g}", "--deadline-s", f"{deadline_s:g}",
            "--out", str(folder / f"workers-{i}.json"),
        ]  # fmt: skip
        procs.append(_spawn(fake_cmd, folder / f"workers-{i}.log", env))
    try:
        for proc in procs:
            proc.wait(timeout=max(1.0, started + deadline_s + 15 - time.monotonic()))
    except subprocess.TimeoutExpired as exc:
        raise SimError(f"the simulation overran {deadline_s + 15:.0f} s; logs in {folder}") from exc
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    fig = collect(folder, opts)
    fig["fake_workers_exit_codes"] = [p.returncode for p in procs[1:]]
    fig["master_exit_code"] = procs[0].returncode
    return fig


def collect(folder: Path, opts: SimOptions) -> dict[str, Any]:
    """The figures of a finished simulation from what its processes left in ``folder``."""
    if not (folder / "master.json").exists():
        raise SimError(f"the master wrote no figures: {_tail(folder / 'master.log')}")
    outs = [folder / f"workers-{i}.json" for i in range(_procs_used(opts))]
    missing = [p.name for p in outs if not p.exists()]
    if missing:
        raise SimError(f"fake workers wrote no log ({', '.join(missing)})")
    master = json.loads((folder / "master.json").read_text(encoding="utf-8"))
    logs = [log for p in outs for log in json.loads(p.read_text(encoding="utf-8"))]
    run_dir = folder / "results" / "sim"
    turns = len(read_csv_gz(run_dir / TURNS)) if (run_dir / TURNS).exists() else 0
    rollouts = len(read_csv_gz(run_dir / ROLLOUTS)) if (run_dir / ROLLOUTS).exists() else 0
    fig = figures(
        logs,
        master,
        rows_on_disk=turns,
        rollout_rows_on_disk=rollouts,
        offered_turns_per_s=opts.workers * opts.agents * opts.turn_rate,
    )
    fig["options"] = {
        "workers": opts.workers,
        "agents_per_worker": opts.agents,
        "seconds": opts.seconds,
        "procs": opts.procs,
        "turn_rate": opts.turn_rate,
    }
    return fig


def _procs_used(opts: SimOptions) -> int:
    return math.ceil(opts.workers / math.ceil(opts.workers / opts.procs))
