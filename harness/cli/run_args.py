"""The options ``run`` and ``sweep`` share, and their checks before anything starts.

argparse checks types; what it cannot see (an empty ``--transports``, a ``--baseline``
that is not among the run's transports, ``--procs 0``) is refused here as a
:class:`UsageError` naming the option and the values it accepts, so that nothing is
silently ignored and no results folder is begun for a command line that cannot work.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from harness.cli.common import api_key, scenario_overrides
from harness.client.messages_api import CACHE_CONTROL
from harness.client.options import RECOVER_FROM
from harness.report.sweep import parse_sweep_sets
from harness.wire.errors import UsageError
from harness.wire.transports import TRANSPORT_NAMES
from harness.workload.scenario import load_scenario


def add_client_options(p: Any) -> None:
    """How the client talks to ``--target``: the options ``sweep`` takes as ``run`` does."""
    p.add_argument(
        "--api-key-env", help="name of the environment variable holding the API key for --target"
    )
    p.add_argument(
        "--no-keepalive", action="store_true", help="HTTP: open a new connection for every request"
    )
    p.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    p.add_argument(
        "--cache-control",
        choices=CACHE_CONTROL,
        default="conversation",
        help="the messages transport's prompt-cache breakpoints: none; system (the system "
        "prompt and the last tool); conversation (those and the last message's last block, as "
        "coding agents do; default)",
    )
    p.add_argument(
        "--no-hints",
        action="store_true",
        help="send no loopbench.* metadata hints (as a real endpoint would be driven; output "
        "length is then bounded by max_output_tokens only)",
    )
    p.add_argument(
        "--recover-from",
        choices=RECOVER_FROM,
        default="full",
        help="after a compaction (rollout.compact_at_tokens), what a WebSocket turn resends when "
        "its chain is gone (previous_response_not_found): every item (full, default) or the "
        "compacted base and the items since (compacted)",
    )
    p.add_argument(
        "--request-timeout-s",
        type=float,
        default=120.0,
        help="a response silent for this long is abandoned as an error of kind timeout",
    )


def client_run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~harness.run.runner.RunOptions` fields :func:`add_client_options` sets."""
    return {
        "api_key": api_key(args.api_key_env),
        "keepalive": not args.no_keepalive,
        "verify_tls": not args.insecure,
        "cache_control": args.cache_control,
        "hints": not args.no_hints,
        "request_timeout_s": args.request_timeout_s,
        "recover_from": args.recover_from,
    }


def check_run_args(args: argparse.Namespace) -> None:
    """``loopbench run``: raise :class:`UsageError` for the first option that cannot work."""
    _check_common(args)
    if getattr(args, "tls", False) and args.target is not None:
        raise UsageError(
            "--tls: starts the embedded server with TLS, so it cannot go with --target; "
            f"give an https:// URL instead (--target {args.target})"
        )
    procs = getattr(args, "procs", 1)
    if procs < 1:
        raise UsageError(f"--procs: expected a positive number of client processes, got {procs}")
    if args.baseline is not None:
        named = _transports(args.transports)
        if named is None:
            named = load_scenario(args.scenario, scenario_overrides(args.set)).transports
        _check_baseline(args.baseline, [named])


def check_sweep_args(args: argparse.Namespace) -> None:
    """``loopbench sweep``: as :func:`check_run_args`; the baseline must be in every variant."""
    _check_common(args)
    if args.baseline is not None:
        named = _transports(args.transports)
        if named is not None:
            _check_baseline(args.baseline, [named])
        else:
            key, values, fixed = parse_sweep_sets(args.set)
            _check_baseline(
                args.baseline,
                [
                    load_scenario(args.scenario, {**fixed, key: v}).transports
                    for v in dict.fromkeys(values)
                ],
            )


def _check_common(args: argparse.Namespace) -> None:
    _transports(args.transports)
    timeout = getattr(args, "request_timeout_s", None)
    # "not > 0" also refuses nan, which compares false with everything.
    if timeout is not None and not timeout > 0:
        raise UsageError(
            f"--request-timeout-s: expected a positive number of seconds, got {timeout}"
        )


def _transports(value: str | None) -> list[str] | None:
    """The names ``--transports`` gives, each known and named once; None if not given."""
    if value is None:
        return None
    expected = f"expected one or more of {', '.join(TRANSPORT_NAMES)}, separated by commas"
    names = [t.strip() for t in value.split(",")]
    if not any(names):
        raise UsageError(f"--transports {value!r}: no transport named; {expected}")
    for t in names:
        if not t:
            raise UsageError(f"--transports {value!r}: an empty name between commas; {expected}")
        if t not in TRANSPORT_NAMES:
            raise UsageError(f"--transports {value!r}: unknown transport {t!r}; {expected}")
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:
        raise UsageError(f"--transports {value!r}: {', '.join(twice)} named more than once")
    return names


def _check_baseline(baseline: str, runs: Sequence[Sequence[str]]) -> None:
    """``baseline`` must be a transport of every run it is to be compared in."""
    for transports in runs:
        if baseline not in transports:
            raise UsageError(
                f"--baseline {baseline}: expected one of the run's transports: "
                f"{', '.join(transports)}"
            )
