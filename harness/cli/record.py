"""``loopbench record``: record an agent's traffic as a replayable trace (docs/traces.md)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from harness.cli.common import add_command, examples
from harness.record.proxy import (
    OBSERVERS,
    READY_PREFIX,
    Upstream,
    UpstreamError,
    record_until_stopped,
)
from harness.run.embedded import embedded_server
from harness.run.event_loop import run_async
from harness.wire.exit_codes import ExitCode
from harness.wire.plural import counted, plural


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "record",
        description="Listen on http://127.0.0.1:PORT/v1, forward every request byte for byte "
        "to --upstream (default: an embedded reference server) and, on Ctrl-C or SIGTERM, "
        "write what the agent did as a loopbench trace: per conversation and turn the "
        "tokens in, out, cached and reasoning, the tool calls and the tool time between a "
        "response and the next request, and which conversations are sub-agents of which. "
        "Responses (HTTP+SSE and WebSocket), Chat Completions and Anthropic Messages. No "
        "content is stored unless --keep-content; credentials are never stored. Replay the "
        "trace with a scenario's `rollout.trace: FILE`. Exit 3 when the trace misses exchanges "
        "because the recorder's observer fell behind, hung or died (record again; the traffic "
        "itself was relayed unchanged). See docs/traces.md.",
        epilog=examples(
            "loopbench record --port 8080 --out traces/mine.jsonl   # then OPENAI_BASE_URL="
            "http://127.0.0.1:8080/v1 my-agent",
            "loopbench record --upstream https://my-endpoint.example/v1 --port 8080",
            "loopbench record --upstream http://127.0.0.1:8000/v1 --port 0 --keep-content",
        ),
    )
    p.add_argument(
        "--upstream",
        metavar="URL",
        help="where to forward (http:// or https://, with its /v1 base path); default: start "
        "the embedded reference server",
    )
    p.add_argument("--port", type=int, default=8080, help="port to listen on (0: any free one)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--out", default="trace.jsonl", metavar="FILE", help="trace file to write")
    p.add_argument(
        "--keep-content",
        action="store_true",
        help="also store each turn's request body and response output in the rollout's meta",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="the embedded server's seed (without --upstream)"
    )
    p.add_argument(
        "--observer",
        choices=OBSERVERS,
        default="process",
        help="where the exchanges are read: in a process of their own at a lower priority "
        "(default; the relay shares no GIL with the reading) or on a thread of the proxy's "
        "process (one process fewer)",
    )
    p.set_defaults(func=cmd_record)


@contextlib.contextmanager
def _upstream(args: argparse.Namespace) -> Iterator[str]:
    if args.upstream:
        Upstream.parse(args.upstream)  # a bad URL is refused before anything starts
        yield args.upstream
    else:
        with embedded_server(seed=args.seed) as url:
            yield url


def cmd_record(args: argparse.Namespace) -> int:
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        raise UpstreamError(
            f"--out {args.out}: expected a file in an existing folder, got {folder} missing"
        )
    with _upstream(args) as upstream:

        def ready(port: int) -> None:
            print(
                f"{READY_PREFIX}http://{args.host}:{port}/v1 → {upstream} "
                f"(Ctrl-C writes {args.out})",
                flush=True,
            )

        proxy, rollouts, failed = run_async(
            record_until_stopped(
                upstream,
                args.out,
                host=args.host,
                port=args.port,
                keep_content=args.keep_content,
                observer=args.observer,
                on_ready=ready,
            )
        )
    observed = proxy.observed
    # The recorder's own failure comes first and sets the exit code: the trace is not what
    # was relayed (exit 3: record again); the traffic itself was relayed unchanged.
    for why in observed.lost:
        print(f"error: the trace misses exchanges: {why}", file=sys.stderr)
    unread = observed.unread
    if unread:
        print(
            f"{counted(len(unread), 'exchange')} could not be read (first: {unread[0]}); "
            f"{plural(len(unread), 'it counts', 'they count')} as failed",
            file=sys.stderr,
        )
    print(
        f"wrote {args.out}: {counted(rollouts, 'rollout')} from "
        f"{counted(len(proxy.exchanges), 'exchange')} "
        f"({failed} failed, not replayed)",
        file=sys.stderr,
    )
    # Only Ctrl-C or SIGTERM ends a recording: 130, the table's row for both, unless the
    # trace misses exchanges (3: record again, which a stop cannot hide).
    return ExitCode.INVALID if observed.lost else ExitCode.INTERRUPTED
