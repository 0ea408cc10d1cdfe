"""Keep-alive HTTP records the pool's truth: ``new_connection`` on the first request of each
pooled connection, with ``connected_ns``, and nowhere else (calibrate fits its connection
term from these columns, docs/model.md §10)."""

from __future__ import annotations

from pathlib import Path

from tests.runs import run_tiny

# api profile "optimized": connect_ms 25 on top of fixed 12 and 3 hops of 1 ms
CONNECT_FIXED_HOPS_MS = 25 + 12 + 3


def test_keepalive_records_each_new_pooled_connection(tmp_path: Path) -> None:
    run = run_tiny(tmp_path, ["http", "http-chained"], {"load.concurrency": "2"})
    turns = run.turns
    for name in ("http", "http-chained"):
        t = turns[turns["transport"] == name]
        new = t[t["new_connection"]]
        # two rollouts at once: the pool opened two connections and reused them after that
        assert len(new) == 2, name
        assert (
            (new["sent_ns"] < new["connected_ns"]) & (new["connected_ns"] < new["first_event_ns"])
        ).all()
        assert (t.loc[~t["new_connection"], "connected_ns"] == 0).all()
        # the server saw the same: only the new connections paid its connection cost
        assert (new["sim_api_pre_ms"] >= CONNECT_FIXED_HOPS_MS).all()
        assert (t.loc[~t["new_connection"], "sim_api_pre_ms"] < CONNECT_FIXED_HOPS_MS).all()
    rollouts = run.rollouts
    assert rollouts.groupby("transport")["connections"].sum().to_dict() == {
        "http": 2,
        "http-chained": 2,
    }


def test_without_keepalive_every_request_is_a_new_connection(tmp_path: Path) -> None:
    run = run_tiny(tmp_path, ["http"], {}, keepalive=False)
    turns = run.turns
    assert turns["new_connection"].all() and (turns["connected_ns"] > turns["sent_ns"]).all()
