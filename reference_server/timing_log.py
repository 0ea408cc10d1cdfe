"""``--timing-log PATH``: one JSON line per finished response, for matching a client's requests.

A peer tool (or loopbench itself) sends requests; the lines say, per response,
what the server modelled (``sim_timing``) and when the request arrived and its
first token was written, keyed by the id the client saw, the ``X-Request-ID``
it sent and a tag (``lbq-…``) found in its prompt.  ``make bench-peers`` joins a
tool's own per-request output to these lines (docs/server.md "Timing log").

Cost on the event loop: one ``deque.append`` of a tuple of references per response
(nothing in it changes once the response has finished); a writer thread does the rest,
handing the GIL back every ``YIELD_EVERY`` lines so a woken event loop waits for a few
dozen lines' encoding at most.  Each batch is one ``O_APPEND`` write of whole lines, so
the workers of ``--workers`` can share one file.
"""

from __future__ import annotations

import atexit
import collections
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from reference_server.core.conversation import item_text

FLUSH_S = 0.25
YIELD_EVERY = 32
TAG = re.compile(r"lbq-[0-9a-z]+")


def client_id(api: str, response_id: str) -> str:
    """The id a client of ``api`` sees for the response the pipeline calls ``response_id``."""
    if api == "chat":
        return "chatcmpl-" + response_id.split("_", 1)[-1]
    if api == "messages":
        return "msg_" + response_id.split("_", 1)[-1]
    return response_id


def find_tag(items: Sequence[Mapping[str, Any]]) -> str | None:
    """The first ``lbq-…`` in the last user message; else the first anywhere in the input."""
    for item in reversed(items):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            found = TAG.search(item_text(dict(item)))
            if found:
                return found.group(0)
            break
    for item in items:
        found = TAG.search(item_text(dict(item)))
        if found:
            return found.group(0)
    return None


def unix_offset_ns(samples: int = 5) -> int:
    """``time.time_ns() - perf_counter_ns()``, from the tightest of a few paired readings."""
    best: tuple[int, int] | None = None
    for _ in range(samples):
        a = time.perf_counter_ns()
        wall = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    assert best is not None
    return best[1]


# (api, response id, X-Request-ID, input items, arrived perf ns, first token perf ns, status, sim_timing)
Entry = tuple[
    str, str, str | None, Sequence[Mapping[str, Any]], int, int | None, str, Mapping[str, Any]
]


class TimingLog:
    """Lines queued by the event loop, encoded and appended to ``path`` by a writer thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset_ns = unix_offset_ns()
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise SystemExit(
                f"error: --timing-log {path}: cannot open the file for writing "
                f"({exc.strerror or exc})"
            ) from None
        self._pending: collections.deque[Entry] = collections.deque()
        self._stop = threading.Event()
        self._closed = False
        self._lock = threading.Lock()  # one writer at a time: the thread, or close()
        self._thread = threading.Thread(target=self._run, name="timing-log", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def add(
        self,
        api: str,
        response_id: str,
        request_id: str | None,
        items: Sequence[Mapping[str, Any]],
        arrived_ns: int,
        first_token_ns: int | None,
        status: str,
        sim_timing: Mapping[str, Any],
    ) -> None:
        """Queue one response's line (on the event loop: no encoding, no I/O)."""
        self._pending.append(
            (api, response_id, request_id, items, arrived_ns, first_token_ns, status, sim_timing)
        )

    def _line(self, entry: Entry) -> bytes:
        api, response_id, request_id, items, arrived, first, status, timing = entry
        off = self.offset_ns
        return orjson.dumps(
            {
                "api": api,
                "id": client_id(api, response_id),
                "request_id": request_id,
                "tag": find_tag(items),
                "arrived_unix_ns": arrived + off,
                "first_token_unix_ns": None if first is None else first + off,
                "status": status,
                "sim_timing": timing,
            },
            option=orjson.OPT_APPEND_NEWLINE,
        )

    def _write_pending(self) -> None:
        with self._lock:
            if self._fd < 0:
                return
            lines: list[bytes] = []
            pending = self._pending
            while pending:
                lines.append(self._line(pending.popleft()))
                if len(lines) % YIELD_EVERY == 0:
                    time.sleep(0)  # let a woken event loop have the GIL
            if lines:
                data = b"".join(lines)
                while data:
                    written = os.write(self._fd, data)
                    data = data[written:]

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self._write_pending()

    def close(self) -> None:
        """Write every queued line and close the file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._write_pending()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
