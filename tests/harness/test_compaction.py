"""rollout.compact_at_tokens over every transport, and the recovery from a compacted base.

tiny.yaml made to grow (six 1,000-token tool outputs) with compaction at 3,000 tokens:
each rollout compacts before turns 3 and 6, against the embedded reference server.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.metrics import definitions as D
from harness.wire.transports import TRANSPORT_NAMES
from tests.runs import NO_MODELLED_WAITS, run_tiny

GROWING = {
    "rollout.tool_calls": "6",
    "rollout.tool_output_tokens": "1000",
    "rollout.compact_at_tokens": "3000",
}


def after(turns: pd.DataFrame, compaction: pd.Series) -> pd.Series:
    """The model turn that follows a compaction (same rollout and turn index)."""
    same = turns[
        (turns.rollout_id == compaction.rollout_id)
        & (turns.turn_index == compaction.turn_index)
        & ~turns.compaction
    ]
    assert len(same) == 1
    return same.iloc[0]


def test_compaction_over_every_transport(tmp_path: Path) -> None:
    # what each transport sends and records is the claim, not how long it took: no modelled
    # waits (the compaction's latency is still measured, and checked against the summary)
    run = run_tiny(tmp_path, list(TRANSPORT_NAMES), GROWING, server_args=list(NO_MODELLED_WAITS))
    assert run.summary is not None
    for name in TRANSPORT_NAMES:
        turns = run.turns[run.turns.transport == name]
        rollouts = run.rollouts[run.rollouts.transport == name]
        assert (rollouts.status == "completed").all(), name
        assert (turns.status == "completed").all(), name
        compactions = turns[turns.compaction]
        assert sorted(compactions.turn_index) == [3, 3, 6, 6], name
        for _, c in compactions.iterrows():
            # The whole history went to /responses/compact: no stream, so no TTFT.
            assert c.history_tokens >= 3000 and c.input_tokens >= 3000
            assert c.first_token_ns == 0 and c.first_event_ns == 0 and c.done_ns > c.sent_ns
            nxt = after(turns, c)
            # The turn goes on from the compaction item + the user prompt, a new chain
            # on every transport (nothing cached or stored holds the compacted base).
            assert nxt.input_tokens < c.input_tokens / 3
            assert nxt.sim_cache == "none"
        # ... and the summary counts them and times them apart from the sampling turns
        group = run.summary["transports"][name]["compaction_ms"]
        latency_ms = (compactions.done_ns - compactions.sent_ns) / 1e6
        assert group["count"] == 4, name
        assert group["mean"] == pytest.approx(latency_ms.mean(), rel=0.01), name
    shown = [m.name for m, _ in D.cli_columns(run.summary)]
    assert "compaction_ms" in shown and "tls_ms" not in shown  # no https: no TLS column


@pytest.mark.parametrize("recover_from", ["full", "compacted"])
def test_recovery_resends_the_full_history_or_the_compacted_base(
    tmp_path: Path, recover_from: str
) -> None:
    # Every WebSocket create finds its connection cache dropped: previous_response_not_found,
    # recovered by a resend on the same connection.
    run = run_tiny(
        tmp_path,
        ["ws"],
        GROWING,
        recover_from=recover_from,
        server_args=[*NO_MODELLED_WAITS, "--fault", "evict_rate=1", "--fault", "seed=3"],
    )
    turns = run.turns
    assert (turns.status == "completed").all()
    chained = turns[~turns.compaction & (turns.turn_index > 0)]
    # Turns right after a compaction start a new chain: nothing to lose, nothing recovered.
    fresh = chained.turn_index.isin([3, 6])
    assert (chained[fresh].recoveries == 0).all()
    recovered = chained[~fresh]
    assert (recovered.recoveries == 1).all() and (recovered.recovery_ns > 0).all()
    assert (run.rollouts.recoveries == len(recovered) // 2).all()
    # After the first compaction the resend is the whole uncompacted history (full) or the
    # compacted base and what followed it (compacted).
    late = recovered[recovered.turn_index.isin([4, 5])]
    if recover_from == "full":
        assert (late.input_tokens > late.history_tokens + 2000).all()
    else:
        assert (late.input_tokens < late.history_tokens + 100).all()
    assert run.manifest["client_options"]["recover_from"] == recover_from
