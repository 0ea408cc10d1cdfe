"""What loopbench's own ``--server-metrics`` scrapes cost vLLM's TTFT: ``python -m
tools.real_engine.scrape_cost``.

vLLM serves ``/metrics`` from its API server's event loop (prometheus_client's ASGI app
renders the whole registry synchronously), and with the fine buckets of `make real-engine` the
answer is ~300 kB.  While it renders, no stream of that server moves.  This times GET /metrics
on the engine, then runs loopbench's chat window at several ``--server-metrics-interval``
settings, alternating window by window on one engine, and sets beside each window loopbench's
TTFT minus vLLM's at p50 and p99 and how many turns met a scrape (docs/real-engine.md, "The
scrapes").
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from bench.options import options_from
from tools.real_engine import side_by_side
from tools.real_engine.capture import Reads, post_stream
from tools.real_engine.compare import TTFT_BOUND_MS, aligned, rank_quantile
from tools.real_engine.engine import MODEL_NAME, attached, serving, stopping_vllm
from tools.real_engine.run import SCRAPE_INTERVAL_S, Options, prepare, warm_up

#: setting name -> loopbench's --server-metrics-interval (s)
SETTINGS = {"every-1s": 1.0, "every-2s": 2.0, "ends-only": SCRAPE_INTERVAL_S}
#: a scrape "meets" a turn when its midpoint lies between the turn's send (less this, the
#: longest scrape measured here) and its first token
MEET_MS = 60.0


def time_scrapes(url: str, n: int) -> dict[str, float]:
    """``n`` GETs of ``url`` one after another: the size and the time of each (ms)."""
    took: list[float] = []
    size = 0
    for _ in range(n):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as resp:
            size = len(resp.read())
        took.append((time.perf_counter() - t0) * 1000)
    return {
        "n": n,
        "bytes": size,
        "min_ms": round(min(took), 1),
        "p50_ms": round(rank_quantile(took, 0.5) or 0, 1),
        "max_ms": round(max(took), 1),
    }


def _stream_into(reads: list[Reads], base_url: str, body: Mapping[str, object]) -> None:
    reads.append(post_stream(base_url, "/v1/chat/completions", body))


def stalls(base_url: str, metrics_url: str, pairs: int) -> dict[str, list[float]]:
    """The longest gap between two reads of a 128-token chat stream (ms), with one GET
    /metrics sent 40 ms into the stream and without, alternating ``pairs`` times."""
    body = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": "read the failing test and fix the module"}],
        "stream": True,
        "ignore_eos": True,
        "min_tokens": 128,
        "max_completion_tokens": 128,
    }
    found: dict[str, list[float]] = {"with_scrape": [], "without": []}
    for _ in range(pairs):
        for arm in found:
            reads: list[Reads] = []
            streaming = threading.Thread(
                target=_stream_into, args=(reads, base_url, body), name="stream"
            )
            streaming.start()
            time.sleep(0.04)
            if arm == "with_scrape":
                time_scrapes(metrics_url, 1)
            streaming.join()
            stamps = [t for t, _ in reads[0]]
            # from the second read on: the first holds the head and the role
            gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(stamps[1:])]
            # a stream read in one or two pieces (the client starved) has no gap to show
            if gaps and len(stamps) > 16:
                found[arm].append(round(max(gaps), 1))
    return found


def scrape_stamps(folder: Path) -> list[int]:
    """The instants (perf_counter ns, the clock of turns.csv) of the run's own scrapes."""
    path = folder / "server_metrics.csv.gz"
    if not path.exists():
        return []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return sorted({round(float(r["t_s"]) * 1e9) for r in csv.DictReader(f)})


def meetings(
    turns: Sequence[Mapping[str, str]], stamps: Sequence[int], late_ms: float | None
) -> dict[str, int]:
    """``met``: turns between whose send and first token a scrape fell; ``late``: turns whose
    TTFT exceeds ``late_ms`` (vLLM's p99 over the window + the front end's bound); and the
    late turns that met a scrape."""
    met = late = late_met = 0
    for r in turns:
        sent, first = int(r["sent_ns"]), int(r["first_token_ns"])
        hit = any(sent - MEET_MS * 1e6 <= s <= first for s in stamps)
        is_late = late_ms is not None and (first - sent) / 1e6 > late_ms
        met += hit
        late += is_late
        late_met += hit and is_late
    return {"met": met, "late": late, "late_met": late_met}


def _diff(rows: Sequence[object], stat: str) -> float | None:
    for r in rows:
        if getattr(r, "metric", "") == "ttft_ms" and getattr(r, "stat", "") == stat:
            d = r.diff  # type: ignore[attr-defined]
            return None if d is None else round(d, 2)
    return None


def run(
    opts: Options, names: Sequence[str], rounds: int, engine_url: str | None, stall_pairs: int
) -> dict[str, object]:
    ready = prepare(opts)
    running = (
        attached(engine_url)
        if engine_url
        else serving(opts.engine_venv, ready.model, ready.hf_home, opts.out / "vllm.log")
    )
    windows: list[dict[str, object]] = []
    with running as engine:
        warm_up(opts, engine, "chat", ready.tokenizer, ready.scenarios)
        idle = time_scrapes(engine.metrics_url, 10)
        print(f"GET /metrics, idle engine: {json.dumps(idle)}")
        stalled = stalls(engine.base_url, engine.metrics_url, stall_pairs)
        print(f"longest gap between reads of one stream (ms): {json.dumps(stalled)}")
        for r in range(1, rounds + 1):
            for name in names:
                setting = replace(opts, scrape_interval_s=SETTINGS[name])
                window = side_by_side.chat_window(setting, engine, ready, f"{name}+{r}")
                p99 = window.engine_p99_ms
                late_ms = None if p99 is None else p99 + TTFT_BOUND_MS
                stamps = scrape_stamps(window.folder)
                windows.append(
                    {
                        "setting": name,
                        "round": r,
                        "turns": len(window.turns),
                        "scrapes": len(stamps),
                        **meetings(window.turns, stamps, late_ms),
                        "ttft_p50_diff": _diff(window.rows, "p50"),
                        "ttft_p99_diff": _diff(window.rows, "p99"),
                        "note": window.note,
                    }
                )
                print(json.dumps(windows[-1]))
    return {"get_metrics_idle": idle, "stream_gaps_ms": stalled, "windows": windows}


def render(windows: Sequence[Mapping[str, object]]) -> str:
    keys: tuple[str, ...] = ("setting", "round", "turns", "scrapes", "met", "late", "late_met")
    keys += ("ttft_p50_diff", "ttft_p99_diff")
    return aligned([keys] + [tuple(str(w[k]) for k in keys) for w in windows])


def main(argv: Sequence[str] | None = None) -> int:
    p = side_by_side.parser(
        "python -m tools.real_engine.scrape_cost",
        __doc__,
        "results/real-engine-scrapes",
        tuple(SETTINGS),
        rounds=3,
        requests=60,
    )
    p.add_argument("--engine-url", default=None, help="an engine already running (see run.py)")
    p.add_argument("--stall-pairs", type=int, default=10, help="streams with and without a scrape")
    args = p.parse_args(argv)
    opts, names = options_from(Options, args), args.settings
    return stopping_vllm(
        lambda: _measured(opts, names, args.rounds, args.engine_url, args.stall_pairs),
        engine_url=args.engine_url,
    )


def _measured(
    opts: Options, names: Sequence[str], rounds: int, engine_url: str | None, stall_pairs: int
) -> int:
    since = side_by_side.started()
    found = run(opts, names, rounds, engine_url, stall_pairs)
    table = render(found["windows"])  # type: ignore[arg-type]
    side_by_side.finish(opts, "scrape-cost.json", since, found, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
