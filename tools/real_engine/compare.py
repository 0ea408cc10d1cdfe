"""Each tool's figures beside vLLM's own over the same window, and the targets (pure).

A client measures from its send to the bytes it reads; vLLM from the request's arrival in its
engine front end to the token leaving the engine.  The difference on TTFT is what the HTTP
front end and the client add; on ITL and TPOT both sides time the same tokens, so the two
should agree; token counts come from the server's usage on the client side and from the
engine's counters, so they must be equal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.metrics.definitions import MIN_OUTPUT_ARRIVALS, released_call
from harness.workload.records import OK_TURN_STATUSES
from tools.real_engine.engine_metrics import (
    CACHED_TOKENS,
    GENERATION_TOKENS,
    ITL,
    PROMPT_TOKENS,
    REQUESTS,
    TPOT,
    TTFT,
    Snapshot,
)

#: loopbench's TTFT may exceed vLLM's by the HTTP front end, no more (ms, at p50 and p99)
TTFT_BOUND_MS = 3.0
#: ITL and TPOT: the same tokens timed on both sides (relative, at p50 and in the mean)
INTERVAL_BOUND = 0.02
STATS = ("p50", "p99", "mean")
#: loopbench's figure -> vLLM's histogram of the same thing.  ttfb_ms is the response's first
#: event of any kind: on a forced tool call vLLM sends its role chunk on the engine's first
#: iteration and withholds the call until it parses, so the first event, not the first
#: visible token, is what follows the engine's first token (issue 38 item 2)
_ENGINE = {"ttft_ms": TTFT, "ttfb_ms": TTFT, "itl_ms": ITL, "tpot_ms": TPOT}
#: shown beside them with no engine figure: what the endpoint held a call back
_CLIENT_ONLY = ("held_back_ms",)
#: a window whose deltas carried one token each (or near): only then are loopbench's gaps
#: between deltas the engine's gaps between tokens, and its ITL quantiles vLLM's.  vLLM's
#: detokenizer holds back a token that does not decode alone (a lone byte of a UTF-8 character,
#: U+FFFD) and sends it with the next: the tiny model's tokenizer had 128 such tokens, ~0.74
#: deltas a token (tools/real_engine/lone_bytes.py renames them; docs/real-engine.md, "ITL")
ONE_TOKEN_DELTAS = 0.98
#: judged relative to vLLM's figure (the first-token times are judged in ms)
_RELATIVE = ("itl_ms", "tpot_ms")
_TOKENS = {
    "input": PROMPT_TOKENS,
    "output": GENERATION_TOKENS,
    "cached": CACHED_TOKENS,
    "requests": REQUESTS,
}


@dataclass
class ClientFigures:
    """What one tool reported over one window: ``{metric: {stat: ms}}`` and token sums."""

    tool: str
    label: str  # the API or transport, e.g. "chat"
    times: dict[str, dict[str, float]] = field(default_factory=dict)
    tokens: dict[str, int | None] = field(default_factory=dict)
    checked: bool = False  # the time targets apply (loopbench's text turns)
    #: the first event must follow vLLM's TTFT within the text bound (forced tool calls)
    first_event_checked: bool = False
    tokens_checked: bool = False  # the token counts must equal the engine's (loopbench, any turn)
    #: gaps between deltas per gap between tokens over the streamed turns (None: unknown)
    deltas_per_token: float | None = None
    #: tool-call turns streamed after a hold (definitions.RELEASED_CALL: vLLM releases a forced
    #: call once the JSON before it parsed, with its name alone or a burst), and how many of them
    #: the summary left out of TPOT and decode TPS and counted (``honesty.<t>.output_burst``)
    released_in_burst: int = 0
    burst_counted: int | None = None


@dataclass(frozen=True)
class Row:
    tool: str
    label: str
    metric: str  # ttft_ms, itl_ms, tpot_ms, or a token count: input, output, cached, requests
    stat: str  # p50, p99, mean, sum
    client: float | None
    engine: float | None
    resolution: float | None  # the width of vLLM's bucket holding the quantile (ms)
    bound: str  # the target in words, "" when none applies
    ok: bool | None  # None: no target, or a side without the figure

    @property
    def diff(self) -> float | None:
        if self.client is None or self.engine is None:
            return None
        return self.client - self.engine


def rank_quantile(values: Sequence[float], q: float) -> float | None:
    """The value at rank ceil(q·n) of the sorted values (as loopbench's summary reads its
    histograms), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def stats_ms(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    out = {"mean": sum(values) / len(values)}
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        v = rank_quantile(values, q)
        if v is not None:
            out[name] = v
    return out


def loopbench_figures(
    summary: Mapping[str, object],
    transport: str,
    turns: Sequence[Mapping[str, str]],
    *,
    checked: bool,
    first_event_checked: bool = False,
) -> ClientFigures:
    """loopbench's own figures: the summary's percentiles (what it prints) and the token
    sums of the transport's rows in ``turns.csv.gz``."""
    per = summary.get("transports")
    block = per.get(transport) if isinstance(per, dict) else None
    times: dict[str, dict[str, float]] = {}
    for metric in (*_ENGINE, *_CLIENT_ONLY):
        got = block.get(metric) if isinstance(block, dict) else None
        wanted = (*STATS, "count") if metric in _CLIENT_ONLY else STATS
        if isinstance(got, dict):
            times[metric] = {
                s: float(got[s]) for s in wanted if isinstance(got.get(s), int | float)
            }
    mine = [r for r in turns if r.get("transport") == transport]
    streamed = [r for r in mine if _int(r, "output_arrivals") >= MIN_OUTPUT_ARRIVALS]
    token_gaps = sum(max(0, _int(r, "output_tokens") - 1) for r in streamed)
    deltas_per_token = None
    if token_gaps and "itl_ms" in times:
        span = sum(_int(r, "last_token_ns") - _int(r, "first_token_ns") for r in streamed)
        # like vLLM's ITL mean (_sum/_count: its gaps between a request's tokens), per token,
        # not per delta: the summary's mean divides by the deltas
        times["itl_ms"]["mean"] = span / token_gaps / 1e6
        deltas_per_token = sum(max(0, _int(r, "delta_events") - 1) for r in streamed) / token_gaps
    released = sum(
        1
        for r in streamed
        if r.get("status", "completed") in OK_TURN_STATUSES
        and released_call(_int(r, "function_calls"), _int(r, "first_arrival_tokens"))
    )
    honesty = summary.get("honesty")
    counts = honesty.get(transport) if isinstance(honesty, dict) else None
    # a summary without the block counted none
    counted = counts.get("output_burst", 0) if isinstance(counts, dict) else 0
    tokens: dict[str, int | None] = {
        "input": sum(_int(r, "input_tokens") for r in mine),
        "output": sum(_int(r, "output_tokens") for r in mine),
        "cached": sum(_int(r, "cached_tokens") for r in mine),
        "requests": len(mine),
    }
    return ClientFigures(
        "loopbench",
        transport,
        times,
        tokens,
        checked,
        first_event_checked=first_event_checked,
        tokens_checked=True,
        deltas_per_token=deltas_per_token,
        released_in_burst=released,
        burst_counted=counted if isinstance(counted, int) else None,
    )


def peer_figures(
    tool: str,
    label: str,
    ttft_ms: Sequence[float],
    tpot_ms: Sequence[float],
    input_tokens: Sequence[int | None],
    output_tokens: Sequence[int | None],
) -> ClientFigures:
    """A peer's per-request figures (bench.peers.readers), summarized the same way."""

    def total(values: Sequence[int | None]) -> int | None:
        return None if any(v is None for v in values) else sum(v or 0 for v in values)

    times = {"ttft_ms": stats_ms(ttft_ms), "tpot_ms": stats_ms(tpot_ms)}
    tokens = {
        "input": total(input_tokens),
        "output": total(output_tokens),
        "cached": None,
        "requests": len(input_tokens),
    }
    return ClientFigures(tool, label, times, tokens, checked=False)


def _int(row: Mapping[str, str], key: str) -> int:
    try:
        return int(float(row.get(key) or 0))
    except ValueError:
        return 0


def compare(client: ClientFigures, engine: Snapshot) -> list[Row]:
    """One row per figure both sides could have; targets only where ``client.checked``."""
    rows: list[Row] = []
    for metric, name in _ENGINE.items():
        hist = engine.histograms.get(name)
        theirs = client.times.get(metric, {})
        if not theirs:
            continue
        for stat in STATS:
            value, width = None, None
            if hist is not None:
                if stat == "mean":
                    mean = hist.mean
                    value = None if mean is None else mean * 1000.0
                else:
                    got = hist.quantile(0.5 if stat == "p50" else 0.99)
                    if got is not None:
                        value, width = got[0] * 1000.0, got[1] * 1000.0
            mine = theirs.get(stat)
            bound, ok = "", None
            first_token = metric == "ttft_ms" and client.checked
            first_event = metric == "ttfb_ms" and client.first_event_checked
            if (first_token or first_event) and stat != "mean":
                bound = f"|diff| <= {TTFT_BOUND_MS:g} ms"
                if mine is not None and value is not None:
                    ok = abs(mine - value) <= TTFT_BOUND_MS
            elif client.checked and metric in ("itl_ms", "tpot_ms") and stat != "p99":
                if metric == "itl_ms" and stat == "p50" and not _one_token_deltas(client):
                    # gaps between deltas of several tokens are not gaps between tokens
                    rows.append(
                        Row(client.tool, client.label, metric, stat, mine, value, width, "", None)
                    )
                    continue
                bound = f"|diff| <= {INTERVAL_BOUND:.0%}"
                if mine is not None and value:
                    ok = abs(mine - value) <= INTERVAL_BOUND * value
            rows.append(Row(client.tool, client.label, metric, stat, mine, value, width, bound, ok))
    if client.deltas_per_token is not None:
        # vLLM's engine steps give each request one token (no speculative decoding here)
        rows.append(
            Row(
                client.tool,
                client.label,
                "deltas/token",
                "mean",
                client.deltas_per_token,
                1.0,
                None,
                "",
                None,
            )
        )
    if client.first_event_checked:
        # TPOT and decode TPS leave out a call released after a hold (its span from the release
        # misses what was decoded before): every such turn left out, and counted
        bound = f"= {client.released_in_burst} released after a hold"
        ok = client.burst_counted == client.released_in_burst
        rows.append(
            Row(
                client.tool,
                client.label,
                "released left out",
                "count",
                None if client.burst_counted is None else float(client.burst_counted),
                None,
                None,
                bound,
                ok,
            )
        )
    for metric in _CLIENT_ONLY:
        for stat, shown in client.times.get(metric, {}).items():
            rows.append(Row(client.tool, client.label, metric, stat, shown, None, None, "", None))
    for metric, counter in _TOKENS.items():
        mine_n = client.tokens.get(metric)
        if mine_n is None:
            continue
        theirs_n = engine.counters.get(counter)
        bound = "equal" if client.tokens_checked and metric != "requests" else ""
        ok = None if theirs_n is None or not bound else float(mine_n) == theirs_n
        rows.append(
            Row(client.tool, client.label, metric, "sum", float(mine_n), theirs_n, None, bound, ok)
        )
    return rows


def _one_token_deltas(client: ClientFigures) -> bool:
    return client.deltas_per_token is None or client.deltas_per_token >= ONE_TOKEN_DELTAS


def missed(rows: Sequence[Row]) -> list[Row]:
    """The rows whose target was not met, or could not be evaluated (a side had no figure)."""
    return [r for r in rows if r.bound and r.ok is not True]


def _fmt(value: float | None, metric: str, stat: str = "") -> str:
    if value is None:
        return "-"
    if metric == "deltas/token":
        return f"{value:.2f}"
    if metric.endswith("_ms") and stat != "count":
        return f"{value:.2f}"
    return f"{value:,.0f}"


def render(rows: Sequence[Row], engine: str = "vLLM") -> str:
    """The table `make real-engine` prints (and docs/real-engine.md shows); ``engine`` heads
    the engine's column (what answered, :func:`tools.real_engine.engine.identify`)."""
    head = ("tool", "api", "figure", "stat", "client", engine, "bucket", "diff", "target", "")
    lines: list[tuple[str, ...]] = [head]
    for r in rows:
        diff = r.diff
        if diff is None:
            shown = "-"
        elif r.metric == "deltas/token":
            shown = f"{diff:+.2f}"
        elif r.metric.endswith("_ms"):
            rel = f" ({diff / r.engine:+.1%})" if r.engine and r.metric in _RELATIVE else ""
            shown = f"{diff:+.2f}{rel}"
        else:
            shown = f"{diff:+,.0f}"
        verdict = "" if not r.bound else ("ok" if r.ok else "MISSED" if r.ok is False else "n/a")
        lines.append(
            (
                r.tool,
                r.label,
                r.metric,
                r.stat,
                _fmt(r.client, r.metric, r.stat),
                _fmt(r.engine, r.metric),
                "-" if r.resolution is None else f"{r.resolution:.2f}",
                shown,
                r.bound,
                verdict,
            )
        )
    return aligned(lines)


def aligned(lines: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, the first line a head underlined with dashes."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
