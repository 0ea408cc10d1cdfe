"""``loopbench probe``: which APIs an endpoint has and what they support, each answer with its
evidence."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harness.cli.common import add_command, api_key, examples
from harness.cli.run_args import check_seconds, target_flags
from harness.client.probe import REACHABLE, as_json, table
from harness.client.shaping import RequestShaping
from harness.run.probe import DEFAULT_MODEL, DEFAULT_TIMEOUT_S, probe
from harness.wire.exit_codes import ExitCode
from harness.wire.plural import counted


def add_parser(sub: Any) -> None:
    p = add_command(
        sub,
        "probe",
        description="Send a few tiny requests (16 output tokens, 48 for the tool call; the "
        "prompt-caching check sends a ~2.7k-token system prompt twice) to an endpoint and print, per feature, whether "
        "it is supported and the evidence: reachable; the Responses API (SSE streaming, "
        "store + previous_response_id, WebSocket mode, previous_response_id on a WebSocket, "
        "generate: false, lanes, background mode, compaction, GET/DELETE of a stored response); "
        "the Chat Completions API (streamed, usage with stream_options.include_usage, tool calls "
        "streamed, cached tokens reported); the Anthropic Messages API (streamed, prompt "
        "caching). Exits 0 when the probe ran (whatever it found), 4 when the target is "
        "unreachable.",
        epilog=examples(
            "loopbench probe --target http://127.0.0.1:8000/v1",
            "loopbench probe --target https://api.example.com/v1 --api-key-env OPENAI_API_KEY --json",
        ),
    )
    p.add_argument(
        "--target",
        required=True,
        help="base URL of the endpoint, e.g. http://127.0.0.1:8000/v1 (the APIs' paths "
        "/responses, /chat/completions and /messages are under it)",
    )
    p.add_argument(
        "--api-key-env",
        help="name of the environment variable holding the API key for --target (sent as "
        "Authorization: Bearer, and as x-api-key to the Messages API)",
    )
    p.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"model named in the requests (default {DEFAULT_MODEL})",
    )
    p.add_argument(
        "--timeout-s",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds each check may take (default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="an extra header on every probe request and handshake (repeatable), as run's "
        "--header: a gateway's own auth or routing header (docs/targets.md)",
    )
    p.add_argument(
        "--session-header",
        metavar="NAME",
        help="a header set to a probe session id on every request, as run's --session-header",
    )
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=cmd_probe)


#: the value of --session-header on the probe's requests
PROBE_SESSION = "loopbench-probe"


def cmd_probe(args: argparse.Namespace) -> int:
    check_seconds(args, "timeout_s")
    flags = target_flags(args)
    findings = probe(
        args.target,
        api_key=api_key(args.api_key_env),
        verify_tls=not args.insecure,
        timeout_s=args.timeout_s,
        model=args.model,
        # The probe is one session of its own: its id is a fixed name, on every request.
        shaping=RequestShaping(
            headers=flags.headers
            + (((flags.session_header, PROBE_SESSION),) if flags.session_header else ())
        ),
    )
    reach = next(f for f in findings if f.feature == REACHABLE)
    if not reach.supported:
        # the one line that matters, first
        print(
            f"error: target {args.target} is unreachable: {reach.evidence}",
            file=sys.stderr,
            flush=True,
        )
    if args.json:
        print(json.dumps(as_json(args.target, findings), indent=2))
    elif not reach.supported:
        # The checks it made pointless in one line, not a row each (they were ~40 lines of
        # "not checked: the target is unreachable" before anything else).
        skipped = [f for f in findings if not f.checked]
        print(table(args.target, [f for f in findings if f.checked]))
        if skipped:
            print(f"not checked: {counted(len(skipped), 'feature')} (the target is unreachable)")
    else:
        print(table(args.target, findings))
    return ExitCode.OK if reach.supported else ExitCode.USAGE
