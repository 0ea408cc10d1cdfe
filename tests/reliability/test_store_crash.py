"""kill -9 of a server writing its SQLite store under load leaves a sound, complete store."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path

import httpx

from reference_server.store import SqliteStore
from tools.soak import ServerProcess, server_process

CHAINS = 8
KILL_AFTER = 60  # responses whose continuation succeeded


async def _chain(
    client: httpx.AsyncClient, index: int, found: list[str], stop: asyncio.Event
) -> None:
    """One conversation chained by id; ``found`` gets every id the server re-hydrated."""
    previous: str | None = None
    turn = 0
    while not stop.is_set():
        body = {
            "model": "sim-model",
            "input": [{"role": "user", "content": f"chain {index} turn {turn} " + "x" * 2000}],
            "tool_choice": "none",
            "store": True,
            "metadata": {"loopbench.output_tokens": "8"},
        }
        if previous is not None:
            body["previous_response_id"] = previous
        try:
            resp = await client.post("/responses", json=body)
        except httpx.HTTPError:
            return  # the server is gone
        assert resp.status_code == 200, resp.text
        if previous is not None:
            # The server read `previous` back from its store to answer this request.
            found.append(previous)
            if len(found) >= KILL_AFTER:
                stop.set()
        previous = resp.json()["id"]
        turn += 1


async def _load_then_kill(server: ServerProcess) -> list[str]:
    found: list[str] = []
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        tasks = [asyncio.ensure_future(_chain(client, i, found, stop)) for i in range(CHAINS)]
        await asyncio.wait_for(stop.wait(), 120)
        # Requests (and queued writes) are in flight right now.
        server.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(server.proc.wait, 30)
        await asyncio.gather(*tasks)
    return found


def test_kill_9_under_write_load_leaves_an_intact_store_with_every_committed_row(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store.sqlite3"
    args = [
        "--store",
        str(db),
        "--set",
        "engine.sustained_tps=20000",
        "--set",
        "engine.burst_tps=40000",
    ]
    with server_process(args) as server:
        rehydrated = asyncio.run(_load_then_kill(server))
        assert server.proc.returncode == -signal.SIGKILL
    assert len(rehydrated) >= KILL_AFTER

    # Reopen as a new process would: WAL recovery happens here.
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        rows = conn.execute("SELECT id FROM responses").fetchall()
    finally:
        conn.close()
    ids = {r[0] for r in rows}
    missing = set(rehydrated) - ids
    assert not missing, f"{len(missing)} committed responses lost"

    async def read_all() -> None:
        store = SqliteStore(db)
        try:
            for response_id in ids:
                stored = await store.get(response_id)
                assert stored is not None, response_id
                # Every chain is whole: its first item is turn 0 of its conversation.
                first = stored.items[0]
                assert "turn 0 " in str(first.get("content")), first
        finally:
            await store.close()

    asyncio.run(read_all())
