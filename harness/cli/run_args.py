"""The options ``run`` and ``sweep`` share, and their checks before anything starts.

argparse checks types; what it cannot see (an empty ``--transports``, a ``--baseline``
that is not among the run's transports, ``--procs 0``) is refused here as a
:class:`UsageError` naming the option and the values it accepts, so that nothing is
silently ignored and no results folder is begun for a command line that cannot work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.cli.common import api_key, scenario_overrides
from harness.client.messages_api import CACHE_CONTROL
from harness.client.options import RECOVER_FROM, WS_SUBAGENTS, ClientSettings
from harness.client.shaping import RequestShaping, parse_header, redacted
from harness.report.sweep import parse_sweep_sets, split_values
from harness.run.goodput import SEARCH_DEFAULTS
from harness.run.live_export import DEFAULT_INTERVAL_S, LiveExport
from harness.run.runner import RunOptions
from harness.run.target import TargetFlags, resolve_target
from harness.transports.rx_socket import RX_STAMP_MODES, resolve_rx_stamp
from harness.wire.errors import ScenarioError, UsageError
from harness.wire.tokens import TokenConvention
from harness.wire.transports import parse_transports
from harness.workload.scenario import Scenario, load_scenario
from harness.workload.slo import SLO_FIELDS
from harness.workload.target import HEADER_NAME, extra_body_problem
from reference_server.core.profiles import ProfileError, load_profiles


def add_client_options(p: Any) -> None:
    """How the client talks to ``--target``: the options ``sweep`` takes as ``run`` does."""
    p.add_argument(
        "--api-key-env",
        help="name of the environment variable holding the API key for --target (sent as "
        "Authorization: Bearer, and as x-api-key by the messages transport)",
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
        "--ws-subagents",
        choices=WS_SUBAGENTS,
        default=None,
        help="how the WebSocket transports run a rollout's sub-agents (rollout.subagents): a "
        "connection each (connection, the scenario's default) or lanes (stream_id) on the "
        "rollout's own connection (lanes); overrides rollout.subagents.ws",
    )
    p.add_argument(
        "--rx-stamp",
        choices=RX_STAMP_MODES,
        default="auto",
        help="how each read is stamped: kernel (the socket's receive time, SO_TIMESTAMPNS, "
        "plain TCP on Linux; TLS connections are stamped in user space), user (when the read "
        "returned, as before) or auto (kernel where the machine supports it, else user; "
        "default); see docs/metrics.md §1.9",
    )
    p.add_argument(
        "--request-timeout-s",
        type=float,
        default=120.0,
        help="a response silent for this long is abandoned as an error of kind timeout",
    )
    add_target_options(p)
    add_server_metrics_options(p)
    add_slo_options(p)
    add_slice_option(p)


def add_endpoint_options(p: Any) -> None:
    """``--transports``, ``--target`` and ``--out``: what a measuring command runs, against what,
    and where its folders go."""
    p.add_argument(
        "--transports", help="comma-separated transports (default: the scenario's), e.g. http,ws"
    )
    p.add_argument(
        "--target",
        help="base URL of the endpoint, e.g. http://127.0.0.1:8000/v1 (Responses, Chat "
        "Completions or Anthropic Messages, as the transports need; default: an embedded "
        "reference server)",
    )
    p.add_argument("--out", default="results", help="results root folder (default: results/)")


def add_slice_option(p: Any) -> None:
    """``--slice-s``: the width of the report's time slices (docs/metrics.md, "Time slices")."""
    p.add_argument(
        "--slice-s",
        type=float,
        metavar="S",
        help="cut each transport's pass into slices of S seconds for slices.csv.gz and the "
        "report's timeline plot (per-slice p50/p90/p99 of TTFT, TTFOT and turn latency, turns/s, "
        "output tokens/s, errors/s); default: at most 60 slices over the longest pass, at least "
        "0.1 s wide",
    )


def add_slo_options(p: Any) -> None:
    """``--slo``: the scenario's ``slo:`` thresholds from the command line."""
    p.add_argument(
        "--slo",
        metavar="FIELD=MS,...",
        help="latency targets the summary's SLO attainment and goodput judge by, over the "
        f"scenario's slo: section; fields {', '.join(SLO_FIELDS)} (ms), e.g. --slo "
        "ttft_ms=500,turn_ms=2000 (docs/metrics.md, SLOs and goodput)",
    )


def slo_sets(value: str | None) -> list[str]:
    """``--slo ttft_ms=500,turn_ms=2000`` -> the overrides ``slo.ttft_ms=500``, ...; a
    malformed flag is a :class:`UsageError` naming it."""
    if value is None:
        return []
    expected = (
        f"expected FIELD=MS pairs separated by commas, FIELD one of {', '.join(SLO_FIELDS)} and "
        "MS a positive number of milliseconds, e.g. --slo ttft_ms=500,turn_ms=2000"
    )
    out: list[str] = []
    seen: set[str] = set()
    for item in value.split(","):
        field, sep, raw = item.partition("=")
        field = field.strip()
        if not sep or field not in SLO_FIELDS:
            raise UsageError(f"--slo {value!r}: {item.strip()!r}: {expected}")
        try:
            ms = float(raw)
        except ValueError:
            ms = float("nan")
        # "not > 0" also refuses nan
        if not ms > 0 or ms == float("inf"):
            raise UsageError(f"--slo {value!r}: {field}: {expected}; got {raw.strip()!r}")
        if field in seen:
            raise UsageError(f"--slo {value!r}: {field} given twice")
        seen.add(field)
        out.append(f"slo.{field}={ms!r}")
    return out


def add_server_metrics_options(p: Any) -> None:
    """``--server-metrics``: scraping the server's Prometheus endpoint during the run."""
    p.add_argument(
        "--server-metrics",
        metavar="URL",
        help="poll this Prometheus text endpoint during the run into server_metrics.csv.gz, e.g. "
        "http://127.0.0.1:8000/metrics (vLLM, SGLang); default: the embedded server's /metrics, "
        "nothing with --target (docs/server-metrics.md)",
    )
    p.add_argument(
        "--server-metrics-interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between two scrapes of --server-metrics (default 1)",
    )
    p.add_argument(
        "--no-server-metrics",
        action="store_true",
        help="do not scrape the embedded server's /metrics",
    )


def add_live_options(p: Any) -> None:
    """``--prometheus-port`` and its companions (docs/observability.md)."""
    p.add_argument(
        "--prometheus-port",
        type=int,
        metavar="PORT",
        help="serve the run's live metrics for Prometheus at http://HOST:PORT/metrics while it "
        "runs (0: a free port, printed); see docs/observability.md",
    )
    p.add_argument(
        "--prometheus-host",
        default="127.0.0.1",
        help="address --prometheus-port listens on (default 127.0.0.1; 0.0.0.0 for every "
        "interface)",
    )
    p.add_argument(
        "--prometheus-interval-s",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="S",
        help="the interval the exported latency percentiles cover (default "
        f"{DEFAULT_INTERVAL_S:g} s: set Prometheus' scrape_interval to the same)",
    )


@contextlib.contextmanager
def live_export(args: argparse.Namespace) -> Iterator[LiveExport | None]:
    """The exporter ``--prometheus-port`` asks for, serving inside the block (None without)."""
    if getattr(args, "prometheus_port", None) is None:
        yield None
        return
    with LiveExport(args.prometheus_host, args.prometheus_port, args.prometheus_interval_s) as live:
        print(f"prometheus: live metrics at {live.url}", file=sys.stderr, flush=True)
        yield live


def add_target_options(p: Any) -> None:
    """Request shaping for a real server, on top of the scenario's target: (docs/targets.md)."""
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="an extra header on every request and WebSocket handshake (repeatable); values of "
        "credential headers (authorization, x-api-key, *token*, *key*) are never printed",
    )
    p.add_argument(
        "--session-header",
        metavar="NAME",
        help="a header set to the rollout's id (RUN-ID-TRANSPORT-ROLLOUT) on every request of "
        "that rollout, e.g. X-Session-ID, so a router keeps a conversation on one replica",
    )
    p.add_argument(
        "--extra-body",
        metavar="JSON",
        help="fields merged into every request body, e.g. '{\"ignore_eos\": true}', or per API: "
        '\'{"chat": {"min_tokens": 64}}\' (APIs: responses, chat, messages)',
    )
    p.add_argument("--model", help="the model name sent in every request (the scenario's model:)")
    p.add_argument(
        "--tokenizer",
        metavar="PATH_OR_NAME",
        help="size the synthetic text and count streamed tokens with a Hugging Face tokenizer: "
        "a tokenizer.json (or its folder) or a model name already in the local cache (never "
        "downloaded); default: 4 characters per token",
    )


def target_flags(args: argparse.Namespace) -> TargetFlags:
    """The request-shaping flags, checked: a malformed one is a :class:`UsageError` naming it."""
    headers = []
    for raw in getattr(args, "header", None) or []:
        parsed = parse_header(raw)
        if parsed is None:
            name, sep, _ = raw.partition(":")
            name = name.strip()
            words = name.split()
            if not sep and len(words) > 1:
                # No colon: what follows the first word may be the value, a credential.
                name = words[0] + " …"
            # Only the name is repeated: the value may be a credential.
            raise UsageError(
                f"--header {name!r}: expected NAME:VALUE with a header name of letters, digits "
                "and -_.!#$%&'*+^`|~ and a value on one line, e.g. --header 'X-Team: perf'"
            )
        headers.append(parsed)
    session = getattr(args, "session_header", None)
    if session is not None and not HEADER_NAME.match(session):
        raise UsageError(
            f"--session-header {session!r}: expected a header name of letters, digits and "
            "-_.!#$%&'*+^`|~, e.g. X-Session-ID"
        )
    extra: dict[str, Any] = {}
    raw_extra = getattr(args, "extra_body", None)
    if raw_extra is not None:
        try:
            extra = json.loads(raw_extra)
        except ValueError as exc:
            raise UsageError(
                f"--extra-body: expected a JSON object, e.g. '{{\"ignore_eos\": true}}'; "
                f"it does not parse: {exc}"
            ) from None
        if not isinstance(extra, dict):
            raise UsageError(
                f"--extra-body: expected a JSON object of body fields, got {raw_extra}"
            )
        problem = extra_body_problem(extra)
        if problem is not None:
            field, expected, got = problem
            raise UsageError(
                f"--extra-body: {field or 'the object'}: expected {expected}, got {json.dumps(got)}"
            )
    tokenizer = getattr(args, "tokenizer", None)
    if tokenizer is not None and not tokenizer.strip():
        raise UsageError("--tokenizer: expected a tokenizer.json path or a model name, got ''")
    return TargetFlags(
        headers=tuple(headers),
        session_header=session,
        extra_body=extra,
        tokenizer=tokenizer,
    )


def scenario_sets(args: argparse.Namespace) -> list[str]:
    """``--set`` with ``--model`` as one more override (``model=NAME``, quoted as YAML)."""
    sets = list(args.set) + slo_sets(getattr(args, "slo", None))
    model = getattr(args, "model", None)
    if model is not None:
        sets.append(f"model={json.dumps(model)}")
    return sets


def run_scenario_of(args: argparse.Namespace) -> Scenario:
    """The scenario ``run`` measures: the file or built-in named, with ``--set`` and ``--model``."""
    return load_scenario(args.scenario, scenario_overrides(scenario_sets(args)))


def client_settings(args: argparse.Namespace, shaping: RequestShaping) -> ClientSettings:
    """The :class:`ClientSettings` that :func:`add_client_options` and ``shaping`` give."""
    return ClientSettings(
        api_key=api_key(args.api_key_env),
        hints=not args.no_hints,
        keepalive=not args.no_keepalive,
        verify_tls=not args.insecure,
        request_timeout_s=args.request_timeout_s,
        cache_control=args.cache_control,
        recover_from=args.recover_from,
        shaping=shaping,
        ws_subagents=args.ws_subagents,
        rx_stamp=args.rx_stamp,
    )


def run_options(args: argparse.Namespace, scenario: Scenario, **extra: Any) -> RunOptions:
    """The :class:`RunOptions` of ``run`` and of every run of a sweep: the endpoint, the client
    options and the request shaping (``scenario``'s ``target:`` section and the flags)."""
    shaping, tokens = resolve_target(scenario, target_flags(args))
    return RunOptions(
        transports=parse_transports(args.transports),
        target=args.target,
        client=client_settings(args, shaping),
        tokens=tokens,
        results_root=Path(args.out),
        baseline=args.baseline,
        server_metrics=args.server_metrics,
        server_metrics_interval_s=args.server_metrics_interval,
        scrape_embedded=not args.no_server_metrics,
        slice_s=getattr(args, "slice_s", None),
        **extra,
    )


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
    if procs > 1 and getattr(args, "prometheus_port", None) is not None:
        raise UsageError(
            f"--prometheus-port: not available with --procs {procs}: the client processes send "
            "what they measured only when they finish, so there is nothing live to serve; "
            "run without --procs to watch the run live"
        )
    if args.baseline is not None:
        named = parse_transports(args.transports)
        if named is None:
            named = run_scenario_of(args).transports
        _check_baseline(args.baseline, [named])


def check_sweep_args(args: argparse.Namespace) -> None:
    """``loopbench sweep``: as :func:`check_run_args`; the baseline must be in every variant."""
    _check_common(args)
    if getattr(args, "search", None) is not None:
        _check_search(args)
        return
    given = [
        f"--{k.replace('_', '-')}" for k in SEARCH_DEFAULTS if getattr(args, k, None) is not None
    ]
    if given:
        raise UsageError(
            f"{', '.join(given)}: only used by the goodput search; add --search goodput, or "
            f"drop {'them' if len(given) > 1 else 'it'}"
        )
    if not args.set:
        raise UsageError(
            "sweep: expected --set KEY=V1,V2,... (the swept field and its values), e.g. --set "
            "load.concurrency=1,2,4,8, or --search goodput"
        )
    if args.baseline is not None:
        named = parse_transports(args.transports)
        if named is None:
            key, values, fixed = parse_sweep_sets(args.set)
            scenarios = (
                load_scenario(args.scenario, {**fixed, key: v}) for v in dict.fromkeys(values)
            )
            _check_baseline(args.baseline, [s.transports for s in scenarios])
        else:
            _check_baseline(args.baseline, [named])


def check_seconds(args: argparse.Namespace, *options: str) -> None:
    """Each of ``options`` that was given is a positive number of seconds, else a UsageError."""
    for option in options:
        seconds = getattr(args, option, None)
        # "not > 0" also refuses nan, which compares false with everything.
        if seconds is not None and not seconds > 0:
            flag = option.replace("_", "-")
            raise UsageError(f"--{flag}: expected a positive number of seconds, got {seconds}")


def _check_common(args: argparse.Namespace) -> None:
    parse_transports(args.transports)
    check_seconds(
        args,
        "slice_s",
        "prometheus_interval_s",
        "server_metrics_interval",
        "request_timeout_s",
        "probe_timeout_s",
    )
    port = getattr(args, "prometheus_port", None)
    if port is not None and not 0 <= port <= 65535:
        raise UsageError(f"--prometheus-port: expected a port from 0 to 65535, got {port}")
    if getattr(args, "server_metrics", None) and getattr(args, "no_server_metrics", False):
        raise UsageError(
            "--no-server-metrics: cannot go with --server-metrics "
            f"{args.server_metrics}; give one or the other"
        )
    url = getattr(args, "server_metrics", None)
    if url is not None and not url.startswith(("http://", "https://")):
        raise UsageError(
            f"--server-metrics {url}: expected an http:// or https:// URL, e.g. "
            "http://127.0.0.1:8000/metrics"
        )
    target_flags(args)
    slo_sets(getattr(args, "slo", None))
    try:
        resolve_rx_stamp(getattr(args, "rx_stamp", "auto"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_baseline(baseline: str, runs: Sequence[Sequence[str]]) -> None:
    """``baseline`` must be a transport of every run it is to be compared in."""
    for transports in runs:
        if baseline not in transports:
            raise UsageError(
                f"--baseline {baseline}: expected one of the run's transports: "
                f"{', '.join(transports)}"
            )


def shaping_line(shaping: RequestShaping, tokens: TokenConvention) -> str:
    """One line saying how requests are shaped (credential values hidden); '' when they are not."""
    parts = []
    if shaping.headers:
        parts.append("headers " + ", ".join(f"{k}: {redacted(k, v)}" for k, v in shaping.headers))
    if shaping.session_header:
        parts.append(f"session header {shaping.session_header}")
    extra = shaping.describe()["extra_body"]
    if extra:
        parts.append("extra body " + json.dumps(extra, sort_keys=True))
    if tokens.name != "4-chars":
        parts.append(f"tokenizer {tokens.name}")
    return "request shaping: " + "; ".join(parts) if parts else ""


def _check_search(args: argparse.Namespace) -> None:
    """``sweep --search goodput``: every --set fixes one value; the bounds make sense.

    The search options are None when not given (so a sweep without --search can tell they
    were given); here they take their defaults."""
    for key, default in SEARCH_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, default)
    for item in args.set:
        value = item.partition("=")[2]
        if len(split_values(value)) > 1:
            raise UsageError(
                f"--set {item!r}: with --search the load is chosen by the search; give one "
                f"value per field (the field searched is --search-param)"
            )
    target = args.target_attainment
    if not 0 < target <= 1:
        raise UsageError(
            f"--target-attainment: expected a share above 0 and at most 1, e.g. 0.99, got {target}"
        )
    if not args.start > 0:
        raise UsageError(f"--start: expected a positive load, got {args.start}")
    if not args.max_load >= args.start:
        raise UsageError(
            f"--max-load: expected a load at least --start ({args.start:g}), got {args.max_load:g}"
        )
    if args.rollouts_per_agent < 1:
        raise UsageError(
            f"--rollouts-per-agent: expected a positive number, got {args.rollouts_per_agent}"
        )
    if args.max_steps < 1:
        raise UsageError(f"--max-steps: expected a positive number of runs, got {args.max_steps}")
    if args.baseline is not None:
        raise UsageError(
            "--baseline: not used with --search: each step runs one transport, so there is "
            "nothing to compare within a run"
        )


def check_server_profiles(scenario: Scenario, source: str) -> None:
    """The profiles and overrides the embedded server will be started with (the ``server:``
    section, and the window ``context_window_tokens`` sets: ``embedded_overrides``) are ones
    it accepts: a typo is a scenario error (file and field) now, not a server that exits at
    start.  An error inside a profile file is the field that names the file, the file and its
    key kept in the message.
    """
    server = scenario.server
    try:
        load_profiles(*scenario.server_profiles(), scenario.embedded_overrides())
    except ProfileError as exc:
        if exc.profile is not None:
            where = f"server.{exc.profile}_profile"
            # a name that resolves to no file is the field's own value; a file says where in it
            detail = exc.detail if exc.source == f"{exc.profile} profile" else str(exc)
        elif exc.key in server.set:
            where, detail = f"server.set.{exc.key}", exc.detail
        else:
            # not written under server.set: the override context_window_tokens implies
            where = "context_window_tokens"
            detail = f"the embedded server's {exc.key} (set from it): {exc.detail}"
        raise ScenarioError(source, where, detail) from None
