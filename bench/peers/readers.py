"""Each tool's per-request output, read into one shape (pure: parses decoded documents).

* guidellm 0.8.1: ``benchmarks.json``, ``benchmarks[].requests.{successful,errored,
  incomplete}[]``: ``response_id`` (the server's ``chatcmpl-…`` id), the prompt in
  ``request_args``, ``info.timings.{request_start,first_token_iteration,
  last_token_iteration}`` (Unix seconds), ``time_to_first_token_ms``, ``output_tokens``.
* aiperf 0.13.0: ``profile_export.jsonl``, one record per request: ``metadata.
  {x_request_id,request_start_ns,benchmark_phase}``, ``metrics.{time_to_first_token,
  decode_duration,output_token_count}`` (each ``{"value", "unit"}``), ``error`` on failure.
* loopbench: ``turns.csv.gz`` rows: ``response_id``, ``sent_ns``, ``first_token_ns``,
  ``first_output_ns``, ``last_token_ns``, ``output_tokens`` (monotonic ns), and
  ``server_read_ms`` where known; rollouts below the scenario's ``warmup_rollouts`` are
  warm-up.

Decode TPS is computed the same way for every tool: (output tokens − 1) over the time
from the first to the last output token, as docs/metrics.md defines ``decode_tps``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from harness.wire.errors import LoopbenchError

#: the tag the runner puts in every peer prompt, and the server's timing log extracts
TAG_RE = re.compile(r"lbq-[0-9a-z]+")


class ToolOutputError(LoopbenchError):
    """A tool's output file is not in the format its reader expects."""


@dataclass(frozen=True, slots=True)
class Measured:
    """One request as a tool reported it."""

    ok: bool
    ttft_ms: float | None
    decode_tps: float | None = None
    response_id: str | None = None
    request_id: str | None = None
    tag: str | None = None
    # when the tool started the request, Unix ns (None: the tool keeps only a monotonic clock)
    start_unix_ns: int | None = None
    # the token counts the tool reported (the server's usage where it reads it); None: not given
    input_tokens: int | None = None
    output_tokens: int | None = None
    # how long the request waited before the server read it (its arrival stamp − the tool's
    # send stamp, one clock): only loopbench has both on one clock (None: not known)
    server_read_ms: float | None = None
    # the measured first-to-last output token span, and whether the last token's read also
    # carried the terminal event (one stamp for both: loopbench's rows; None: not known)
    decode_ms: float | None = None
    last_with_terminal: bool | None = None
    # the visible outputs the first token's read carried (turns.csv.gz first_arrival_deltas:
    # more than 1, the first token carries a later segment's stamp; None: not known)
    first_read_deltas: int | None = None


def find_tag(text: str) -> str | None:
    m = TAG_RE.search(text)
    return m.group(0) if m else None


def decode_tps(tokens: Any, seconds: Any) -> float | None:
    """(tokens − 1) / seconds, or None when either is missing or there is no decode span."""
    if isinstance(tokens, bool) or not isinstance(tokens, int | float):
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    if tokens < 2 or seconds <= 0:
        return None
    return (float(tokens) - 1.0) / float(seconds)


def _count(value: Any) -> int | None:
    number = _num(value)
    return None if number is None else round(number)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def without_warmup(measured: Sequence[Measured], warmup: int) -> list[Measured]:
    """``measured`` less the ``warmup`` requests that started first (by the tool's start time).

    Every tool gets the same warm-up this way: guidellm's own warm-up phase counts
    completed requests, so the requests already in flight when it ends would still be
    measured, and their first wave is the one that opens the connections.
    """
    order = sorted(
        range(len(measured)),
        key=lambda i: (measured[i].start_unix_ns is None, measured[i].start_unix_ns or 0, i),
    )
    skip = set(order[: max(0, warmup)])
    return [m for i, m in enumerate(measured) if i not in skip]


# ---------------------------------------------------------------- guidellm


def _guidellm_prompt_tag(request_args: Any) -> str | None:
    # request_args is the request as a JSON string; the tag is in the user message.
    if isinstance(request_args, str):
        return find_tag(request_args)
    if isinstance(request_args, dict):
        return find_tag(orjson.dumps(request_args).decode())
    return None


def _guidellm_request(req: Mapping[str, Any], ok: bool) -> Measured:
    info = _obj(req.get("info"))
    timings = _obj(info.get("timings"))
    start = _num(timings.get("request_start")) or _num(req.get("request_start_time"))
    first = _num(timings.get("first_token_iteration"))
    last = _num(timings.get("last_token_iteration"))
    ttft = _num(req.get("time_to_first_token_ms"))
    if ttft is None and start is not None and first is not None:
        ttft = (first - start) * 1000.0
    tps = decode_tps(
        req.get("output_tokens"), None if first is None or last is None else last - first
    )
    rid = req.get("response_id")
    return Measured(
        ok=ok and ttft is not None,
        ttft_ms=ttft,
        decode_tps=tps,
        response_id=rid if isinstance(rid, str) and rid else None,
        tag=_guidellm_prompt_tag(req.get("request_args")),
        start_unix_ns=None if start is None else round(start * 1e9),
        input_tokens=_count(req.get("prompt_tokens")),
        output_tokens=_count(req.get("output_tokens")),
    )


def read_guidellm(doc: Any) -> list[Measured]:
    """Every request of every benchmark in a guidellm ``benchmarks.json`` (decoded)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ToolOutputError(
            "guidellm benchmarks.json: expected an object with a 'benchmarks' list"
        )
    out: list[Measured] = []
    for i, bench in enumerate(doc["benchmarks"]):
        requests = bench.get("requests") if isinstance(bench, dict) else None
        if not isinstance(requests, dict):
            raise ToolOutputError(
                f"guidellm benchmarks.json: benchmarks[{i}].requests must be an object with "
                "'successful', 'errored' and 'incomplete' lists"
            )
        for group in ("successful", "errored", "incomplete"):
            for req in requests.get(group) or []:
                if isinstance(req, dict):
                    out.append(_guidellm_request(req, group == "successful"))
    return out


# ---------------------------------------------------------------- aiperf


def _metric(metrics: Mapping[str, Any], name: str, unit: str) -> float | None:
    """``metrics[name].value`` converted to ``unit`` (ms or tokens)."""
    m = metrics.get(name)
    if not isinstance(m, dict):
        return None
    value = _num(m.get("value"))
    if value is None:
        return None
    have = str(m.get("unit") or unit)
    scale = {("ns", "ms"): 1e-6, ("us", "ms"): 1e-3, ("s", "ms"): 1e3, ("sec", "ms"): 1e3}
    return value * scale.get((have, unit), 1.0)


def read_aiperf(lines: Iterable[str | bytes]) -> list[Measured]:
    """The profiling-phase records of an aiperf ``profile_export.jsonl`` (warm-up left out)."""
    out: list[Measured] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ToolOutputError(
                f"aiperf profile_export.jsonl line {n}: not JSON ({exc})"
            ) from exc
        meta = rec.get("metadata") if isinstance(rec, dict) else None
        metrics = rec.get("metrics") if isinstance(rec, dict) else None
        if not isinstance(meta, dict) or not isinstance(metrics, dict):
            raise ToolOutputError(
                f"aiperf profile_export.jsonl line {n}: expected 'metadata' and 'metrics' objects"
            )
        if meta.get("benchmark_phase", "profiling") != "profiling":
            continue
        ttft = _metric(metrics, "time_to_first_token", "ms")
        decode_ms = _metric(metrics, "decode_duration", "ms")
        tokens = _metric(metrics, "output_token_count", "tokens")
        start = meta.get("request_start_ns")
        rid = meta.get("x_request_id")
        out.append(
            Measured(
                ok=not rec.get("error") and ttft is not None,
                ttft_ms=ttft,
                decode_tps=decode_tps(tokens, None if decode_ms is None else decode_ms / 1000.0),
                request_id=rid if isinstance(rid, str) and rid else None,
                start_unix_ns=start
                if isinstance(start, int) and not isinstance(start, bool)
                else None,
                input_tokens=_count(_metric(metrics, "input_sequence_length", "tokens")),
                output_tokens=_count(tokens),
            )
        )
    return out


# ---------------------------------------------------------------- loopbench


def _int(row: Mapping[str, str], key: str) -> int:
    try:
        return int(float(row.get(key) or 0))
    except ValueError:
        return 0


def _ms_or_none(row: Mapping[str, str], key: str) -> float | None:
    try:
        return float(row[key]) if row.get(key) else None
    except ValueError:
        return None


def read_loopbench(text: str, transport: str, warmup_rollouts: int) -> list[Measured]:
    """The measured turns of ``transport`` in a ``turns.csv.gz`` (decompressed text)."""
    reader = csv.DictReader(io.StringIO(text))
    need = {"transport", "rollout_id", "response_id", "sent_ns", "first_token_ns", "status"}
    missing = need - set(reader.fieldnames or ())
    if missing:
        raise ToolOutputError(
            f"loopbench turns.csv.gz: missing columns {', '.join(sorted(missing))}"
        )
    out: list[Measured] = []
    for row in reader:
        if row["transport"] != transport or _int(row, "rollout_id") < warmup_rollouts:
            continue
        sent, first = _int(row, "sent_ns"), _int(row, "first_token_ns")
        start_out = _int(row, "first_output_ns") or first
        last = _int(row, "last_token_ns")
        done = _int(row, "done_ns")
        together = _int(row, "first_arrival_deltas") if row.get("first_arrival_deltas") else -1
        ttft = (first - sent) / 1e6 if first > 0 and sent > 0 else None
        out.append(
            Measured(
                ok=row["status"] in ("completed", "incomplete") and ttft is not None,
                ttft_ms=ttft,
                decode_tps=decode_tps(_int(row, "output_tokens"), (last - start_out) / 1e9),
                response_id=row["response_id"] or None,
                input_tokens=_int(row, "input_tokens"),
                output_tokens=_int(row, "output_tokens"),
                server_read_ms=_ms_or_none(row, "server_read_ms"),
                decode_ms=(last - start_out) / 1e6 if last > start_out > 0 else None,
                last_with_terminal=last == done if last > 0 and done > 0 else None,
                first_read_deltas=together if together >= 0 else None,
            )
        )
    return out
