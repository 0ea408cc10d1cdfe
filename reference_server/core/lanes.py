"""WebSocket-mode connection state that needs no sockets (docs/protocol.md §2.4).

:class:`LaneCache` is the per-connection, in-memory cache: each lane (a
``stream_id``, or ``None`` for the default lane) keeps only its latest
response.  It is bounded in bytes; past the bound the least recently used lanes
are dropped, and a later ``store: false`` continuation from them gets
``previous_response_not_found``, exactly like a real cache miss.  Sizes are
estimated as tokens × characters per token, so no item is ever re-serialized
to be measured.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from harness.wire.tokens import CHARS_PER_TOKEN
from reference_server.core.conversation import Conversation

STREAM_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,256}")
INVALID_STREAM_ID_MESSAGE = (
    "The 'stream_id' field must be a non-empty string with at most 256 characters and may only "
    "contain letters, numbers, underscores, hyphens, and periods."
)


def valid_stream_id(value: object) -> bool:
    return isinstance(value, str) and STREAM_ID_RE.fullmatch(value) is not None


@dataclass(slots=True)
class CachedResponse:
    """The state a continuation on the same connection needs, without the store."""

    response_id: str
    conversation: Conversation  # instructions + chain + this response's output
    instructions: str | None
    tools: list[dict[str, Any]]  # the tools the connection already validated and tokenized
    tools_tokens: int
    stored: bool  # also in the store, so a stored continuation may point at it

    @property
    def nbytes(self) -> int:
        return self.conversation.tokens * CHARS_PER_TOKEN


class LaneCache:
    """Latest response per lane, bounded to ``max_bytes`` in total (LRU by lane)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes: expected an integer >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._lanes: OrderedDict[str | None, CachedResponse] = OrderedDict()
        self.total_bytes = 0

    def __len__(self) -> int:
        return len(self._lanes)

    def lane(self, lane: str | None) -> CachedResponse | None:
        return self._lanes.get(lane)

    def find(self, response_id: str) -> tuple[str | None, CachedResponse] | None:
        """The lane holding ``response_id`` (a cross-lane fork's parent), if cached."""
        for name, entry in self._lanes.items():
            if entry.response_id == response_id:
                return name, entry
        return None

    def put(self, lane: str | None, entry: CachedResponse) -> list[str | None]:
        """Make ``entry`` the lane's latest; returns the lanes evicted to stay within bounds."""
        old = self._lanes.pop(lane, None)
        if old is not None:
            self.total_bytes -= old.nbytes
        self._lanes[lane] = entry
        self.total_bytes += entry.nbytes
        evicted: list[str | None] = []
        while self.total_bytes > self.max_bytes and self._lanes:
            name, gone = self._lanes.popitem(last=False)
            self.total_bytes -= gone.nbytes
            evicted.append(name)
        return evicted

    def touch(self, lane: str | None) -> None:
        if lane in self._lanes:
            self._lanes.move_to_end(lane)

    def evict_response(self, response_id: str) -> bool:
        """Drop ``response_id`` wherever it is cached (after a failed same-lane continuation)."""
        found = self.find(response_id)
        if found is None:
            return False
        gone = self._lanes.pop(found[0])
        self.total_bytes -= gone.nbytes
        return True

    def clear(self) -> None:
        self._lanes.clear()
        self.total_bytes = 0
