"""``python -m bench.proxy``: the latency ``loopbench record`` adds to a turn, paired
(docs/traces.md, "What the proxy costs"); the measurement is :mod:`bench.proxy.latency`."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

from bench.cli_args import at_least
from bench.entry import exit_code
from bench.proxy.latency import BARE_RELAY, THIS_PROXY, run_bench
from bench.selfbench.cpu_steal import read_cpu_times, steal_percent
from harness.record.proxy import Upstream
from harness.run.embedded import embedded_server
from harness.wire.exit_codes import ExitCode, UsageParser
from harness.wire.stop_signal import sigterm_as_sigint


def build_parser() -> UsageParser:
    p = UsageParser(
        prog="python -m bench.proxy",
        description="Measure the latency the recording proxy adds, over N paired turns (direct "
        "vs through a `loopbench record` process), and print p50/p99; against the embedded "
        "server, a bare relay process (forwards bytes, records nothing) is measured in the "
        "same trials as the floor any extra hop costs (make bench-proxy; docs/traces.md).",
    )
    # the counts: flag, floor, default, metavar, help
    for flag, low, default, metavar, text in (
        ("--trials", 1, 1000, "N", "paired turns (1000)"),
        ("--streams", 1, 1, "K", "run K paired streams at once (the N pairs shared among them)"),
        ("--history", 0, 0, "M", "each request carries M earlier messages of ~100 tokens"),
    ):
        p.add_argument(flag, type=at_least(low), default=default, metavar=metavar, help=text)
    p.add_argument(
        "--upstream",
        metavar="URL",
        help="measure against this endpoint (http:// or https://, with its /v1 base path) "
        "instead of an embedded reference server; no bare relay then",
    )
    p.add_argument("--seed", type=int, default=0, help="the embedded server's seed")
    return p


@contextlib.contextmanager
def _upstream(url: str | None, seed: int) -> Iterator[str]:
    if url:
        Upstream.parse(url)  # a bad URL is refused before anything starts
        yield url
    else:
        with embedded_server(seed=seed) as embedded:
            yield embedded


def _progress(done: int, total: int, elapsed_s: float) -> None:
    left = f", about {elapsed_s / done * (total - done):.0f} s left" if done else ""
    print(f"bench.proxy: {done:,}/{total:,} trials, {elapsed_s:.0f} s{left}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # stopped by SIGTERM, the bench still stops the server and relays it started
    sigterm_as_sigint()
    with _upstream(args.upstream, args.seed) as upstream:
        before = read_cpu_times()
        load = os.getloadavg()
        # The bare relay forwards the client's Host header untouched: only an upstream that
        # does not route by it (the embedded server) can take it as the floor.
        proxies = (THIS_PROXY,) if args.upstream else (THIS_PROXY, BARE_RELAY)
        result = run_bench(
            upstream, args.trials, args.streams, args.history, proxies, progress=_progress
        )
        steal = steal_percent(before, read_cpu_times())
        load_after = os.getloadavg()
    print("\n".join(result.lines()))
    # A busy or stolen-from machine schedules the proxy late: the tail says so, not the
    # proxy's own work.
    print(
        f"  machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} before and "
        f"{load_after[0]:.2f} after, CPU steal "
        + ("unknown" if steal is None else f"{steal:.2f} %")
        + " during the trials"
    )
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(exit_code(main))
