"""Run loopbench, guidellm and aiperf side by side against one reference server.

One server (its own process, ``--timing-log``) serves every run.  For each stream count
the tools run one after the other (the order rotates from one stream count to the next,
so no tool always runs first), each as its own process; the CPU time each one used is
the ``RUSAGE_CHILDREN`` difference around it.  When every run is done the server stops,
its timing log is read, and each tool's per-request output is matched to it
(:mod:`bench.peers.match`).
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml

from bench.folders import fresh_folder
from bench.peers import commands as cmd
from bench.peers import locust_row, offline
from bench.peers.figures import FORMAT_VERSION, combined, precision_target, run_figures, target
from bench.peers.match import match_requests
from bench.peers.readers import (
    Measured,
    read_aiperf,
    read_guidellm,
    read_loopbench,
    without_warmup,
)
from bench.peers.timing_log import ServerEntry, parse_timing_log
from bench.selfbench.busy import BUSY_ATTEMPTS, until_quiet
from bench.selfbench.cpu_steal import read_cpu_times
from bench.selfbench.machine import run_header
from harness.run.embedded import server_child
from harness.wire.errors import LoopbenchError

TOOLS = ("loopbench", "guidellm", "aiperf")
#: loopbench's rows beside ``chat`` (information: the peers speak only Chat Completions);
#: issue 39 holds every transport to the same client-side error
MORE_TRANSPORTS = ("ws", "http")
#: the reference server of every run: 200-token answers at exactly 1,000 tokens/s (no
#: bursts), and enough modelled capacity that 64 streams neither queue nor slow each other
SERVER_ARGS = (
    "--port",
    "0",
    "--default-output-tokens",
    str(cmd.OUTPUT_TOKENS),
    "--store",
    ":memory:",
    "--set",
    "engine.burst_probability=0",
    "--set",
    "engine.max_streams=1024",
    "--set",
    "engine.aggregate_tps=1024000",
    "--set",
    "api.workers=1024",
)


class PeersError(LoopbenchError):
    """The peer bench could not run (its server failed, a file is missing)."""


@dataclass(frozen=True, slots=True)
class PeersOptions:
    levels: tuple[int, ...] = (1, 16, 64)
    per_stream: int = 10  # measured requests per stream ...
    min_requests: int = 50  # ... but at least this many
    tools: tuple[str, ...] = TOOLS
    more_transports: tuple[str, ...] = MORE_TRANSPORTS
    #: loopbench chat through `loopbench locust`, one worker (bench/peers/locust_row.py)
    locust: bool = True
    peers_venv: Path = Path(".venv-peers")
    artifacts: Path = Path("results/peers")
    run_timeout_s: float = 600.0
    #: runs of a step while the machine is busy before it is left unjudged
    busy_attempts: int = BUSY_ATTEMPTS

    @classmethod
    def quick(cls, **kw: Any) -> PeersOptions:
        # A smoke run: a busy step is marked, not repeated; 4 measured requests a level (each
        # is 0.2 s of decode, and one stream runs them one after another).
        return cls(levels=(1, 4), per_stream=1, min_requests=4, busy_attempts=1, **kw)

    def load(self, streams: int) -> cmd.Load:
        return cmd.Load(streams, max(self.min_requests, self.per_stream * streams), streams)


@dataclass(slots=True)
class _Run:
    tool: str
    transport: str
    streams: int
    load: cmd.Load
    folder: Path
    status: str = "ok"
    version: str | None = None
    rc: int | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    output: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: what other processes used during the (last) attempt (bench/selfbench/busy.py)
    busy: dict[str, Any] | None = None
    #: why this run's figures judge nothing (the machine stayed busy); "" if they do
    not_judged: str = ""


def peer_version(venv: Path, dist: str) -> str | None:
    """The installed version of ``dist`` in ``venv`` (from its dist-info), or None."""
    for site in sorted(venv.glob("lib/python*/site-packages")):
        for info in site.glob(f"{dist}-*.dist-info"):
            return info.name[len(dist) + 1 : -len(".dist-info")]
    return None


def _loopbench_version() -> str:
    try:
        return version("loopbench")
    except PackageNotFoundError:
        return "source"


def timed(
    argv: Sequence[str], *, env: dict[str, str], log: Path, timeout_s: float
) -> tuple[int, float, float]:
    """Run ``argv`` to completion: (exit code, wall s, CPU s of it and its reaped children).

    The CPU time is the ``RUSAGE_CHILDREN`` difference around the run: the tool's own
    process and every worker it waited for.  A process it left running, or one that
    outlived it, is not counted.  On timeout or an interrupt the whole process group is killed.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = -int(signal.SIGKILL)
        except BaseException:
            # Ctrl-C or a SIGTERM turned into one: the tool runs in a session of its own, so
            # nothing else would stop it loading the target after this process is gone.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return rc, wall, cpu


#: the file that marks a folder as this bench's artifacts, so that it may be emptied
MARKER = ".loopbench-peers"


def _fresh_folder(art: Path) -> None:
    """Empty ``art`` for this bench (one bench's files, never a mix of two)."""
    fresh_folder(art, marker=MARKER, option="--artifacts", made_by="bench.peers", error=PeersError)


def _order(tools: Sequence[str], i: int) -> list[str]:
    k = i % len(tools) if tools else 0
    return list(tools[k:]) + list(tools[:k])


def run_peers(opts: PeersOptions, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every run, then the matching; returns the JSON document of results/peers.json."""
    started = time.time()
    t0 = time.perf_counter()
    cpu0 = read_cpu_times()
    load0 = [round(x, 2) for x in os.getloadavg()]
    art = opts.artifacts
    _fresh_folder(art)
    hf_home = art / "hf-home"
    tags = offline.TagCounter()
    corpus = [offline.prompt(n) for n in range(200)]
    offline.write_tokenizer(hf_home, corpus)
    peer_env = offline.offline_env(hf_home)
    exes = {t: opts.peers_venv / "bin" / t for t in ("guidellm", "aiperf")}
    versions: dict[str, str | None] = {"loopbench": _loopbench_version()}
    tools_meta: dict[str, Any] = {"loopbench": {"version": versions["loopbench"], "status": "ok"}}
    if opts.locust and "loopbench" in opts.tools:
        versions[locust_row.TOOL] = versions["loopbench"]
        tools_meta[locust_row.TOOL] = tools_meta["loopbench"]
    for t in ("guidellm", "aiperf"):
        if t not in opts.tools:
            continue
        versions[t] = peer_version(opts.peers_venv, t)
        installed = exes[t].exists() and versions[t] is not None
        tools_meta[t] = {
            "version": versions[t],
            "status": "ok" if installed else "not installed",
            "where": str(exes[t]),
        }
        if not installed:
            say(f"{t}: not installed in {opts.peers_venv} (make bench-peers installs it)")

    timing_log = art / "server-timing.jsonl"
    runs: list[_Run] = []
    with server_child([*SERVER_ARGS, "--timing-log", str(timing_log)]) as server:
        base_url = server.ready.removesuffix("/v1").rstrip("/")
        say(f"reference server at {base_url}, timing log {timing_log}")
        for i, streams in enumerate(opts.levels):
            load = opts.load(streams)
            order = _order([t for t in TOOLS if t in opts.tools], i)
            if "loopbench" in opts.tools:
                order += [f"loopbench-{t}" for t in opts.more_transports]
            if opts.locust and "loopbench" in opts.tools:
                order.append(locust_row.TOOL)
            for name in order:
                tool, _, transport = name.partition("-")
                transport = transport or "chat"
                if name == locust_row.TOOL:
                    tool, transport = name, "chat"
                folder = art / f"{name}-{streams}"
                folder.mkdir()
                run = _Run(tool, transport, streams, load, folder, version=versions.get(tool))
                runs.append(run)
                if tools_meta.get(tool, {}).get("status") != "ok":
                    run.status = "not installed"
                    continue
                say(f"{streams} streams: {name} ({load.requests} requests + {load.warmup} warm-up)")
                _judged_run(
                    run,
                    partial(_run_tool, run, base_url, exes, peer_env, tags, opts.run_timeout_s),
                    say,
                    opts.busy_attempts,
                )
                if run.status != "ok":
                    say(f"  {run.status}")
        server_proc = server.proc
    if server_proc.returncode not in (0, -signal.SIGTERM, None):
        say(f"reference server exited with code {server_proc.returncode}")
    entries = _read_log(timing_log)
    docs = [_finish(run, entries) for run in runs]
    level = max(opts.levels) if opts.levels else 0
    verdict = target(docs, level)
    precision = precision_target(docs)
    return {
        "format_version": FORMAT_VERSION,
        **run_header("python -m bench.peers", started, t0, cpu0, load0),
        "workload": {
            "api": "chat completions, streamed",
            "input_tokens": offline.PROMPT_TOKENS,
            "output_tokens": cmd.OUTPUT_TOKENS,
            "decode_tps": 1000,
            "levels": list(opts.levels),
            "requests": {str(s): opts.load(s).requests for s in opts.levels},
            "warmup": {str(s): opts.load(s).warmup for s in opts.levels},
            "server_args": list(SERVER_ARGS),
        },
        "tools": tools_meta,
        "timing_log": {"path": str(timing_log), "entries": len(entries)},
        "runs": docs,
        "target": {"passed": verdict.passed, "text": verdict.text, **verdict.detail},
        "precision_target": {
            "passed": precision.passed,
            "text": precision.text,
            **precision.detail,
        },
        # what --check judges: both targets
        "passed": combined(verdict, precision),
    }


def _judged_run(
    run: _Run, go: Callable[[], None], say: Callable[[str], None], attempts: int
) -> None:
    """``go`` (:func:`_run_tool`), again (in an emptied folder, with fresh request tags) while other
    processes kept the machine busy; a run that stayed busy is marked not judged."""

    def attempt() -> None:
        for entry in run.folder.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        run.status = "ok"
        go()

    _, busy = until_quiet(attempt, say, attempts)
    if busy is not None:
        run.busy = busy.as_dict()
        if busy.busy:
            run.not_judged = busy.not_judged()
            say(f"  {run.not_judged}")


def _run_tool(
    run: _Run,
    base_url: str,
    exes: dict[str, Path],
    peer_env: dict[str, str],
    tags: offline.TagCounter,
    timeout_s: float,
) -> None:
    load, folder = run.load, run.folder
    numbers = tags.take(load.total)
    log = folder / "output.log"
    if run.tool == "guidellm":
        data = offline.write_lines(
            folder / "prompts.jsonl", offline.guidellm_rows(numbers, cmd.OUTPUT_TOKENS)
        )
        run.output = folder / "benchmarks.json"
        scenario = folder / "scenario.json"
        scenario.write_text(
            json.dumps(cmd.guidellm_scenario(base_url, load, data, run.output), indent=1)
        )
        argv = cmd.guidellm_argv(exes["guidellm"], scenario)
        env = peer_env
    elif run.tool == "aiperf":
        data = offline.write_lines(
            folder / "prompts.jsonl", offline.aiperf_rows(numbers, cmd.OUTPUT_TOKENS)
        )
        out_dir = folder / "artifacts"
        run.output = out_dir / "profile_export.jsonl"
        argv = cmd.aiperf_argv(exes["aiperf"], base_url, load, data, out_dir)
        env = peer_env
    else:
        scenario = folder / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(cmd.loopbench_scenario(load), sort_keys=False))
        argv = (locust_row.locust_argv if run.tool == locust_row.TOOL else cmd.loopbench_argv)(
            sys.executable, scenario, base_url, run.transport, folder, "run"
        )
        run.output = folder / "run" / "turns.csv.gz"
        env = dict(os.environ)
    (folder / "command.txt").write_text(" ".join(argv) + "\n")
    run.rc, run.wall_s, run.cpu_s = timed(argv, env=env, log=log, timeout_s=timeout_s)
    if run.rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        run.status = f"failed (exit {run.rc}; {log}): " + " / ".join(tail)[-300:]
    elif not run.output.exists():
        run.status = f"failed: no {run.output.name} in {run.output.parent}"


def _read_log(path: Path) -> list[ServerEntry]:
    if not path.exists():
        raise PeersError(
            f"the reference server wrote no timing log at {path}: its --timing-log option "
            "is needed to match each request to its modelled TTFT"
        )
    with path.open("rb") as f:
        return parse_timing_log(f, str(path))


def read_measured(tool: str, output: Path, transport: str, warmup: int) -> list[Measured]:
    """A finished run's per-request output, read by its tool's reader."""
    if tool == "guidellm":
        return without_warmup(read_guidellm(json.loads(output.read_text())), warmup)
    if tool == "aiperf":
        with output.open("rb") as f:
            return without_warmup(read_aiperf(f), warmup)
    with gzip.open(output, "rt", encoding="utf-8") as f:
        return read_loopbench(f.read(), transport, warmup)


def _finish(run: _Run, entries: Sequence[ServerEntry]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "tool": run.tool,
        "version": run.version,
        "transport": run.transport,
        "streams": run.streams,
        "requests": run.load.requests,
        "warmup": run.load.warmup,
        "status": run.status,
        "exit_code": run.rc,
        "wall_s": None if run.wall_s is None else round(run.wall_s, 2),
        "cpu_s": None if run.cpu_s is None else round(run.cpu_s, 2),
        "folder": str(run.folder),
        "busy": run.busy,
        "not_judged": run.not_judged or None,
    }
    if run.status != "ok" or run.output is None:
        return doc
    try:
        measured = read_measured(run.tool, run.output, run.transport, run.load.warmup)
    except (LoopbenchError, OSError, ValueError) as exc:
        doc["status"] = f"failed: {run.output} could not be read: {exc}"
        return doc
    api = "chat" if run.transport == "chat" else "responses"
    figs = run_figures(match_requests(measured, entries, api=api), len(measured))
    doc["figures"] = figs
    if run.cpu_s is not None and measured:
        doc["cpu_ms_per_request"] = round(1000 * run.cpu_s / len(measured), 2)
    return doc
