"""Where ``store: true`` responses live between requests.

:class:`MemoryStore` keeps them in process; the SQLite store (same interface)
persists them.  The interface is async so a store that does I/O never blocks the
event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(slots=True)
class StoredResponse:
    response_id: str
    items: list[dict[str, Any]]  # full context: input items of the chain + this response's output
    function_calls: int = 0


class ResponseStore(Protocol):
    async def get(self, response_id: str) -> StoredResponse | None: ...

    async def put(self, stored: StoredResponse) -> None: ...

    async def close(self) -> None: ...


class MemoryStore:
    """An LRU-bounded in-process store (tests and the default when no path is given)."""

    def __init__(self, max_responses: int = 10_000) -> None:
        self._data: OrderedDict[str, StoredResponse] = OrderedDict()
        self._max = max_responses

    async def get(self, response_id: str) -> StoredResponse | None:
        found = self._data.get(response_id)
        if found is not None:
            self._data.move_to_end(response_id)
        return found

    async def put(self, stored: StoredResponse) -> None:
        self._data[stored.response_id] = stored
        self._data.move_to_end(stored.response_id)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    async def close(self) -> None:
        self._data.clear()
