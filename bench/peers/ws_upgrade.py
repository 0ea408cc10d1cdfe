"""The server's CPU per WebSocket upgrade: ``python -m bench.peers.ws_upgrade``.

A rollout owns its WebSocket, so a single-turn workload (the peers' bench) opens one
per request, and every upgrade is CPU on the reference server's one event loop beside
the token streams it paces (issue 39 item 2).  This opens and closes ``--connections``
WebSockets against each server in turn, round by round (the machine is shared:
whatever else runs slows a round of any of them), and reads each server process's
on-CPU time from ``/proc/<pid>/task/*/schedstat`` (ns, every thread) before and after:

* ``reference``: ``python -m reference_server``, this checkout;
* ``baseline``: the same from another checkout (``--baseline PATH``: its folder holding
  ``reference_server/`` and ``harness/``), for a before/after in one run;
* ``bare``: the self-benchmark's bare server (:mod:`bench.selfbench.raw_server`: an RFC 6455 handshake
  and a close echo in one asyncio protocol, no ASGI), the floor that the kernel's TCP
  work and the event loop leave.

``--stall N`` measures what that CPU does to a stream beside it: one response decoding
at 1,000 tokens/s (the peers' server settings) while another process opens and closes
N WebSockets at once, four times; the figure is the stream's largest gap between two
deltas during each burst, against the same without the burst (N = 0).

Each round runs under the bench's busy-machine accounting (:mod:`bench.selfbench.busy`); a round
during which other processes stayed busy is marked "not judged", and so is the figure
built from it, which then exits 3 (not comparable).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from bench.peers.bench import SERVER_ARGS
from bench.selfbench.busy import BUSY_ATTEMPTS, until_quiet
from bench.selfbench.raw_server import READY_PREFIX as RAW_READY
from harness.run.child import ready_child
from harness.run.embedded import READY_PREFIX, server_child
from harness.wire.exit_codes import ExitCode, UsageParser

#: client connections open at once while a round opens its connections
CONCURRENCY = 8
#: connections opened and closed before a round's measured ones (imports, first paths)
WARMUP = 100


def process_cpu_ns(pid: int) -> int:
    """On-CPU ns of every thread of ``pid`` so far (``schedstat``: not clock ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total


async def open_and_close(url: str, n: int) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one() -> None:
        async with gate, connect(url, compression=None, open_timeout=30):
            pass

    await asyncio.gather(*(one() for _ in range(n)))


def _server(kind: str, baseline: Path | None) -> tuple[list[str], str, dict[str, str] | None]:
    if kind == "bare":
        return (
            [sys.executable, "-m", "bench.selfbench.raw_server", "--deltas", "1"],
            RAW_READY,
            None,
        )
    argv = [sys.executable, "-P", "-m", "reference_server", "--port", "0", "--store", ":memory:"]
    env = None if kind == "reference" else {**os.environ, "PYTHONPATH": str(baseline)}
    return argv, READY_PREFIX, env


def _url(kind: str, ready: str) -> str:
    if kind == "bare":
        return f"ws://127.0.0.1:{ready.strip()}/v1/responses"
    return ready.replace("http://", "ws://").rstrip("/") + "/responses"


def measure(kind: str, baseline: Path | None, connections: int) -> float:
    """Server CPU (ms) per upgrade, open to close, over ``connections`` WebSockets."""
    argv, prefix, env = _server(kind, baseline)
    with ready_child(argv, prefix, what=f"{kind} server", timeout_s=60, env=env) as child:
        url = _url(kind, child.ready)
        asyncio.run(open_and_close(url, WARMUP))
        before = process_cpu_ns(child.proc.pid)
        asyncio.run(open_and_close(url, connections))
        return (process_cpu_ns(child.proc.pid) - before) / 1e6 / connections


def run(
    kinds: list[str],
    baseline: Path | None,
    connections: int,
    rounds: int,
    say: Callable[[str], None],
    attempts: int = BUSY_ATTEMPTS,
) -> dict[str, Any]:
    per_kind: dict[str, list[float]] = {k: [] for k in kinds}
    not_judged = ""
    for r in range(1, rounds + 1):
        say(f"round {r}/{rounds}")

        def one_round() -> dict[str, float]:
            return {k: measure(k, baseline, connections) for k in kinds}

        got, busy = until_quiet(one_round, say, attempts)
        if busy is not None and busy.busy:
            not_judged = busy.not_judged()
            say(f"  {not_judged}")
        for k, ms in got.items():
            per_kind[k].append(ms)
    medians = {k: round(statistics.median(v), 4) for k, v in per_kind.items()}
    doc: dict[str, Any] = {
        "figure": "server CPU per WebSocket upgrade (connect + close), ms",
        "connections_per_round": connections,
        "rounds": {k: [round(x, 4) for x in v] for k, v in per_kind.items()},
        "median_ms": medians,
        "not_judged": not_judged,
    }
    if medians.get("baseline"):
        doc["reference_over_baseline"] = round(medians["reference"] / medians["baseline"], 3)
    return doc


#: bursts beside the decoding stream, and the pause before each
BURSTS = 4
BURST_GAP_S = 0.3
#: the stream's length: 8 s at 1,000 tokens/s, longer than the bursts take on a busy machine
STREAM_TOKENS = 8000


async def _stream_gaps(url: str, n: int) -> list[float]:
    """The largest gap (ms) between two deltas of one long response during each burst of ``n``."""
    stamps: list[float] = []
    create = {"type": "response.create", "model": "sim-model", "input": "go"}
    async with connect(url, compression=None, max_size=None) as ws:
        await ws.send(json.dumps(create))

        async def read() -> None:
            async for raw in ws:
                kind = json.loads(raw)["type"]
                if kind == "response.output_text.delta":
                    stamps.append(time.perf_counter())
                elif kind in ("response.completed", "response.failed", "error"):
                    return

        reader = asyncio.ensure_future(read())
        while len(stamps) < 100 and not reader.done():  # decoding at its pace
            await asyncio.sleep(0.01)
        # The burst comes from another process: this loop only stamps the stream's deltas.
        burster = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.peers.ws_upgrade",
            "--burst-child",
            url,
            str(n),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert burster.stdin is not None and burster.stdout is not None
        await burster.stdout.readline()
        windows = []
        for _ in range(BURSTS):
            await asyncio.sleep(BURST_GAP_S)
            start = time.perf_counter()
            burster.stdin.write(b"go\n")
            await burster.stdin.drain()
            await burster.stdout.readline()
            windows.append((start, time.perf_counter()))
        burster.stdin.close()
        await burster.wait()
        reader.cancel()
    if not stamps or stamps[-1] < windows[-1][1]:
        raise RuntimeError("the stream ended before the last burst: raise STREAM_TOKENS")
    gaps = []
    for start, end in windows:
        inside = [t for t in stamps if start <= t <= end + 0.01]
        gaps.append(max((b - a for a, b in itertools.pairwise(inside)), default=0.0))
    return [round(g * 1000, 2) for g in gaps]


def stall(n: int, say: Callable[[str], None], attempts: int = BUSY_ATTEMPTS) -> dict[str, Any]:
    """The stream's largest token gaps during bursts of ``n`` upgrades and of none."""

    def once() -> dict[str, list[float]]:
        out = {}
        for burst in (0, n):
            args = [*SERVER_ARGS, "--default-output-tokens", str(STREAM_TOKENS)]
            with server_child(args) as server:
                url = server.ready.replace("http://", "ws://").rstrip("/") + "/responses"
                out[str(burst)] = asyncio.run(_stream_gaps(url, burst))
        return out

    got, busy = until_quiet(once, say, attempts)
    not_judged = busy.not_judged() if busy is not None and busy.busy else ""
    return {
        "figure": f"largest token gap of a 1,000 tok/s stream during a burst of {n} upgrades, ms",
        "gaps_ms": got,
        "not_judged": not_judged,
    }


def _burst_child(url: str, n: int) -> None:
    print("ready", flush=True)
    for _ in sys.stdin:
        asyncio.run(open_and_close(url, n) if n else asyncio.sleep(0))
        print("done", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = UsageParser(prog="python -m bench.peers.ws_upgrade", description=__doc__)
    parser.add_argument("--connections", type=int, default=2000, help="per server per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside")
    parser.add_argument("--no-bare", action="store_true", help="leave out the bare floor")
    parser.add_argument("--out", type=Path, help="JSON to write")
    parser.add_argument(
        "--stall", type=int, metavar="N", help="measure a stream's token gaps beside N upgrades"
    )
    parser.add_argument("--burst-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.burst_child:
        _burst_child(args.burst_child[0], int(args.burst_child[1]))
        return
    if args.stall is not None:
        if args.stall < 1:
            parser.error(f"--stall: expected a positive number, got {args.stall}")
        doc = stall(args.stall, lambda s: print(s, flush=True))
        for burst, gaps in doc["gaps_ms"].items():
            print(f"burst of {burst}: largest token gap {', '.join(f'{g:.1f}' for g in gaps)} ms")
        _finish(doc, args.out)
    if args.connections < 1 or args.rounds < 1:
        parser.error("--connections and --rounds must be positive")
    if args.baseline is not None and not (args.baseline / "reference_server").is_dir():
        parser.error(f"--baseline {args.baseline}: no reference_server/ folder in it")
    kinds = (
        ["reference"] + (["baseline"] if args.baseline else []) + ([] if args.no_bare else ["bare"])
    )
    doc = run(kinds, args.baseline, args.connections, args.rounds, lambda s: print(s, flush=True))
    for kind, ms in doc["median_ms"].items():
        rounds = ", ".join(f"{x:.3f}" for x in doc["rounds"][kind])
        print(f"{kind}: {ms:.3f} ms per upgrade (median of {rounds})")
    if "reference_over_baseline" in doc:
        print(f"reference / baseline: {doc['reference_over_baseline']:.2f}")
    _finish(doc, args.out)


def _finish(doc: dict[str, Any], out: Path | None) -> None:
    """Say why the figure is not judged (if so), write the JSON, exit 3 then (else 0)."""
    if doc["not_judged"]:
        print(doc["not_judged"])
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")
    sys.exit(ExitCode.INVALID if doc["not_judged"] else ExitCode.OK)


if __name__ == "__main__":
    main()
