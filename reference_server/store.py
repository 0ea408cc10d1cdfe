"""Where ``store: true`` responses live between requests: SQLite, off the event loop.

The rows, the one recursive query and the one worker thread: docs/server.md, "The store".
That thread runs jobs in submission order, so :meth:`SqliteStore.put` need not be awaited:
a ``get`` submitted after a ``put`` always sees it, and the write stays off the response's
critical path.  ``path=":memory:"`` keeps the database in process (lost on exit).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson

MEMORY = ":memory:"
# The Responses API keeps stored responses for 30 days; so does the reference server by default.
DEFAULT_RETENTION_S = 30 * 24 * 3600.0

Items = list[dict[str, Any]]
_log = logging.getLogger("reference_server.store")
_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    previous_id TEXT,
    created_at REAL NOT NULL,
    depth INTEGER NOT NULL,
    function_calls INTEGER NOT NULL,
    items BLOB NOT NULL
)
"""
_CHAIN = """
WITH RECURSIVE chain(id, previous_id, depth, items) AS (
    SELECT id, previous_id, depth, items FROM responses WHERE id = ?
    UNION ALL
    SELECT r.id, r.previous_id, r.depth, r.items FROM responses r JOIN chain c ON r.id = c.previous_id
)
SELECT previous_id, depth, items FROM chain ORDER BY depth
"""
# The response objects (retrieve, cancel, input_items) and, for a background response,
# its events (a stream resumed after it ended).  Kept apart from the chain rows above so
# the chain's schema and queries stay as they are.
_OBJECTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS response_objects (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    background INTEGER NOT NULL,
    n_output INTEGER NOT NULL,
    response BLOB NOT NULL,
    events BLOB
)
"""
_TABLES = ("responses", "response_objects")
# The Responses API keeps stored responses for 30 days; a long-running server also needs a
# bound on their number (docs/server.md "The store").
DEFAULT_MAX_RESPONSES = 100_000


def default_store_path() -> Path:
    """``<user cache dir>/loopbench/responses.sqlite3`` (XDG, macOS and Windows conventions)."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "loopbench" / "responses.sqlite3"


@dataclass(slots=True)
class StoredResponse:
    """A stored response as re-hydrated: the full chain context, oldest item first."""

    response_id: str
    items: Items  # every input and output item of the chain through this response
    function_calls: int = 0  # function calls made along the chain (the scripted agent counts them)


@dataclass(slots=True)
class StoredObject:
    """A stored response object (what ``GET /v1/responses/{id}`` answers) and its bookkeeping."""

    response: dict[str, Any]
    background: bool
    n_output: int  # output items at the end of the response's chain row (0 if it has none)


class SqliteStore:
    """``store: true`` responses in SQLite, accessed from one worker thread."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        retention_s: float = DEFAULT_RETENTION_S,
        max_responses: int = DEFAULT_MAX_RESPONSES,
    ) -> None:
        self.path = MEMORY if str(path) == MEMORY else str(path or default_store_path())
        self.retention_s = retention_s
        self.max_responses = max_responses
        # Pruning is amortised: it runs once the rows exceed the cap by this many, and then
        # deletes that many oldest rows in one statement (1% of the cap, at least one row).
        self._prune_batch = max(1, max_responses // 100)
        self._rows: dict[str, int] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="loopbench-store")
        self._db: sqlite3.Connection | None = None
        self._closed = False

    # -- worker-thread side ------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            if self.path != MEMORY:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            if self.path != MEMORY:
                # WAL: readers never block the writer; NORMAL sync is durable across process crashes.
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_SCHEMA)
            db.execute(_OBJECTS_SCHEMA)
            for table in _TABLES:
                db.execute(
                    f"DELETE FROM {table} WHERE created_at < ?", (time.time() - self.retention_s,)
                )
                self._rows[table] = int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
                self._prune(db, table)
            self._db = db
        return self._db

    def _put_sync(self, rid: str, previous_id: str | None, items: Items, calls: int) -> None:
        db = self._conn()
        depth = 0
        if previous_id is not None:
            row = db.execute("SELECT depth FROM responses WHERE id = ?", (previous_id,)).fetchone()
            depth = row[0] + 1 if row else 0
            if row is None:
                previous_id = None  # the parent expired: this row starts a (shorter) chain
        db.execute(
            "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)",
            (rid, previous_id, time.time(), depth, calls, orjson.dumps(items)),
        )
        self._inserted(db, "responses")

    def _inserted(self, db: sqlite3.Connection, table: str) -> None:
        self._rows[table] += 1
        if self._rows[table] >= self.max_responses + self._prune_batch:
            self._prune(db, table)

    def _prune(self, db: sqlite3.Connection, table: str) -> None:
        """Delete the oldest rows of ``table`` beyond the cap."""
        excess = self._rows[table] - self.max_responses
        if excess <= 0:
            return
        # Rows are appended in time order (an update re-inserts its row), so the rowid order
        # is the age order: no index on created_at to keep per row.
        db.execute(
            f"DELETE FROM {table} WHERE rowid IN "
            f"(SELECT rowid FROM {table} ORDER BY rowid LIMIT ?)",
            (excess,),
        )
        self._rows[table] = int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def _put_object_sync(
        self,
        rid: str,
        response: dict[str, Any],
        background: bool,
        n_output: int,
        events: bytes | None,
    ) -> None:
        db = self._conn()
        row = None
        if background:  # only a background response's object is written more than once
            known = db.execute("SELECT created_at FROM response_objects WHERE id = ?", (rid,))
            row = known.fetchone()
        # A status update keeps the row's age (and does not count as a new row).
        created = row[0] if row else time.time()
        db.execute(
            "INSERT OR REPLACE INTO response_objects VALUES (?, ?, ?, ?, ?, ?)",
            (rid, created, int(background), n_output, _pack(response), events),
        )
        if row is None:
            self._inserted(db, "response_objects")

    def _get_object_sync(self, rid: str) -> StoredObject | None:
        sql = "SELECT response, background, n_output FROM response_objects WHERE id = ?"
        row = self._conn().execute(sql, (rid,)).fetchone()
        if row is None:
            return None
        return StoredObject(orjson.loads(zlib.decompress(row[0])), bool(row[1]), int(row[2]))

    def _events_sync(self, rid: str) -> bytes | None:
        row = (
            self._conn()
            .execute("SELECT events FROM response_objects WHERE id = ?", (rid,))
            .fetchone()
        )
        return None if row is None or row[0] is None else zlib.decompress(row[0])

    def _own_items_sync(self, rid: str) -> Items | None:
        row = self._conn().execute("SELECT items FROM responses WHERE id = ?", (rid,)).fetchone()
        return None if row is None else list(orjson.loads(row[0]))

    def _delete_sync(self, rid: str) -> bool:
        db = self._conn()
        found = False
        for table in _TABLES:
            if db.execute(f"DELETE FROM {table} WHERE id = ?", (rid,)).rowcount:
                self._rows[table] -= 1
                found = True
        return found

    def _get_sync(self, response_id: str) -> StoredResponse | None:
        db = self._conn()
        rows = db.execute(_CHAIN, (response_id,)).fetchall()
        if not rows or rows[0][0] is not None or len(rows) != rows[-1][1] + 1:
            return None  # unknown, or an ancestor was pruned: the context cannot be rebuilt
        items: Items = []
        for _, _, blob in rows:
            items.extend(orjson.loads(blob))
        fc = db.execute("SELECT function_calls FROM responses WHERE id = ?", (response_id,))
        return StoredResponse(response_id, items, int(fc.fetchone()[0]))

    def _count_sync(self) -> int:
        return int(self._conn().execute("SELECT count(*) FROM responses").fetchone()[0])

    def _close_sync(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- event-loop side ---------------------------------------------------------------------

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.wrap_future(self._executor.submit(fn, *args))

    def _queue(self, fn: Callable[..., None], *args: Any) -> None:
        if not self._closed:
            self._executor.submit(fn, *args).add_done_callback(_log_failure)

    def put(
        self,
        response_id: str,
        previous_id: str | None,
        new_items: Items,
        function_calls: int,
    ) -> None:
        """Queue a write and return at once (a later :meth:`get` is ordered after it).

        ``new_items`` are what this response added to its chain: its input items
        (without ``instructions``, which are not inherited) and its output items.
        """
        self._queue(self._put_sync, response_id, previous_id, list(new_items), function_calls)

    async def get(self, response_id: str) -> StoredResponse | None:
        """The full context through ``response_id``, or None if it is unknown or expired."""
        return await self._run(self._get_sync, response_id)

    def put_object(
        self,
        response_id: str,
        response: dict[str, Any],
        *,
        background: bool,
        n_output: int,
        events: bytes | None = None,
    ) -> None:
        """Queue the write of a response object (a later read is ordered after it).

        ``events`` (a background response's SSE frames, see reference_server/background.py)
        are stored compressed.
        """
        packed = None if events is None else zlib.compress(events, 1)
        self._queue(self._put_object_sync, response_id, response, background, n_output, packed)

    async def get_object(self, response_id: str) -> StoredObject | None:
        """The stored response object, or None if it is unknown, deleted or pruned."""
        return await self._run(self._get_object_sync, response_id)

    async def events(self, response_id: str) -> bytes | None:
        """A finished background response's stored events (as written by :meth:`put_object`)."""
        return await self._run(self._events_sync, response_id)

    async def own_items(self, response_id: str) -> Items | None:
        """Only what ``response_id``'s own row added to its chain (when its chain is broken)."""
        return await self._run(self._own_items_sync, response_id)

    async def delete(self, response_id: str) -> bool:
        """Delete a response (its object and its chain row); False if there was none."""
        return await self._run(self._delete_sync, response_id)

    async def count(self) -> int:
        """Rows in the store (tests and diagnostics)."""
        return await self._run(self._count_sync)

    async def flush(self) -> None:
        """Wait until every queued write is committed."""
        await self._run(lambda: None)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._run(self._close_sync)
        self._executor.shutdown(wait=False)


def _pack(response: dict[str, Any]) -> bytes:
    # Compressed: the object is about as large as the chain row beside it (echoed request
    # fields, usage, sim_timing), and it compresses to about half.
    return zlib.compress(orjson.dumps(response), 1)


def _log_failure(fut: Future[None]) -> None:
    exc = fut.exception()
    if exc is not None:
        _log.error("store write failed: %r", exc)
