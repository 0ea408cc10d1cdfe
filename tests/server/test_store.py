"""The SQLite store: real files, real threads; chains re-hydrate in order and never mix."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from reference_server.store import MEMORY, SqliteStore, default_store_path


def _msg(text: str) -> dict[str, str]:
    return {"type": "message", "role": "user", "content": text}


def test_chain_rehydrates_in_order_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "store.sqlite3"

    async def write() -> None:
        store = SqliteStore(path)
        store.put("r1", None, [_msg("a"), _msg("b")], 0)
        store.put("r2", "r1", [_msg("c")], 1)
        store.put("r3", "r2", [_msg("d")], 2)
        got = await store.get("r3")  # ordered after the puts without awaiting them
        assert got is not None and [i["content"] for i in got.items] == ["a", "b", "c", "d"]
        assert got.function_calls == 2
        await store.close()

    async def read() -> None:
        store = SqliteStore(path)
        got = await store.get("r2")
        assert got is not None and [i["content"] for i in got.items] == ["a", "b", "c"]
        assert await store.get("nope") is None
        assert await store.count() == 3
        await store.close()

    asyncio.run(write())
    asyncio.run(read())
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_concurrent_chains_do_not_mix() -> None:
    async def main() -> None:
        store = SqliteStore(MEMORY)

        async def chain(name: str, turns: int) -> list[str]:
            prev = None
            for i in range(turns):
                rid = f"{name}{i}"
                store.put(rid, prev, [_msg(f"{name}-{i}")], i)
                prev = rid
                await asyncio.sleep(0)  # interleave the chains
            got = await store.get(str(prev))
            assert got is not None
            return [str(item["content"]) for item in got.items]

        results = await asyncio.gather(*(chain(n, 6) for n in ("x", "y", "z")))
        for name, items in zip(("x", "y", "z"), results, strict=True):
            assert items == [f"{name}-{i}" for i in range(6)]
        await store.close()

    asyncio.run(main())


def test_expired_ancestor_makes_the_chain_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"

    async def main() -> None:
        store = SqliteStore(path)
        store.put("old", None, [_msg("a")], 0)
        store.put("new", "old", [_msg("b")], 0)
        await store.flush()
        await store.close()
        db = sqlite3.connect(path)
        db.execute("UPDATE responses SET created_at = 0 WHERE id = 'old'")
        db.commit()
        db.close()
        reopened = SqliteStore(path, retention_s=3600)
        assert await reopened.get("new") is None  # its context cannot be rebuilt any more
        assert await reopened.count() == 1
        await reopened.close()

    asyncio.run(main())


def test_store_does_not_run_on_the_event_loop_thread() -> None:
    import threading

    async def main() -> None:
        store = SqliteStore(MEMORY)
        seen: list[str] = []
        original = store._get_sync

        def spy(rid: str) -> object:
            seen.append(threading.current_thread().name)
            return original(rid)

        store._get_sync = spy  # type: ignore[method-assign]
        await store.get("x")
        await store.close()
        assert seen and seen[0].startswith("loopbench-store")
        assert seen[0] != threading.current_thread().name

    asyncio.run(main())


def test_default_path_is_under_the_user_cache_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/tmp/xdg-cache")
    path = default_store_path()
    assert path.name == "responses.sqlite3" and "loopbench" in path.parts
    import sys

    if sys.platform.startswith("linux"):
        assert str(path).startswith("/tmp/xdg-cache/")
