"""Synthetic results folders written through the real writer, for report tests without a server."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.metrics.summary import Accumulator
from harness.report import ResultsWriter
from harness.workload.records import RolloutRecord, TurnRecord

MS = 1_000_000


def make_run(
    path: Path,
    *,
    rollout_ms: dict[str, Sequence[float]],
    turns_per_rollout: int = 4,
    ttft_ms: dict[str, float] | None = None,
    seed: int = 0,
    finish: bool = True,
    failed_turns: dict[str, int] | None = None,
    scenario: dict[str, object] | None = None,
    partial: bool = False,
) -> Path:
    """A run whose rollout ``i`` of transport ``t`` lasts ``rollout_ms[t][i]`` ms.

    Each rollout has ``turns_per_rollout`` turns evenly spread over it; TTFT of
    transport ``t`` is ``ttft_ms[t]`` ms (default 50) with ±10 % seeded noise.  The first
    ``failed_turns[t]`` turns of transport ``t`` fail (``server_error``); ``scenario`` adds
    fields to the manifest's scenario; ``partial`` marks the summary partial.
    """
    rng = np.random.default_rng(seed)
    acc = Accumulator()
    manifest = {
        "run_id": path.name,
        "scenario_name": "synthetic",
        "scenario": {
            "name": "synthetic",
            "load": {"mode": "closed", "concurrency": 1},
            **(scenario or {}),
        },
        "seed": seed,
        "transports": list(rollout_ms),
        "embedded_server": False,
        "target": "none",
    }
    clock = 10 * 1_000_000_000
    with ResultsWriter(path, manifest) as writer:
        for transport, latencies in rollout_ms.items():
            base_ttft = (ttft_ms or {}).get(transport, 50.0)
            to_fail = (failed_turns or {}).get(transport, 0)
            for rid, lat in enumerate(latencies):
                start = clock
                step = int(lat * MS) // turns_per_rollout
                for k in range(turns_per_rollout):
                    sent = start + k * step
                    ttft = int(base_ttft * (0.9 + 0.2 * rng.random()) * MS)
                    first = sent + ttft
                    last = first + 40 * MS
                    fail = to_fail > 0
                    to_fail -= fail
                    rec = TurnRecord(
                        transport=transport,
                        rollout_id=rid,
                        turn_index=k,
                        sent_ns=sent,
                        first_event_ns=sent + ttft // 2,
                        first_token_ns=first,
                        last_token_ns=last,
                        done_ns=last + MS,
                        status="error" if fail else "completed",
                        error_kind="server_error" if fail else "",
                        error_message="HTTP 500: injected" if fail else "",
                        history_tokens=1000 * (k + 1),
                        output_tokens=41,
                        burst_tokens_max=41,
                        sim_api_pre_ms=ttft / MS / 2,
                        sim_prefill_ms=ttft / MS / 2,
                        sim_decode_ms=40.0,
                    )
                    writer.add_turn(rec)
                    acc.add_turn(rec)
                end = start + int(lat * MS)
                roll = RolloutRecord(
                    transport=transport,
                    rollout_id=rid,
                    intended_start_ns=start,
                    start_ns=start,
                    end_ns=end,
                    turns=turns_per_rollout,
                    status="completed",
                )
                writer.add_rollout(roll)
                acc.add_rollout(roll)
                clock = end + MS
        if finish:
            summary = acc.summary(path.name)
            summary["partial"] = partial
            writer.finish(summary, acc.histograms())
    return path
