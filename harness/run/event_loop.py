"""The event loop a measuring process runs on: uvloop where available, else asyncio's."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop  # uvloop: optional (Linux only); asyncio's loop where it is missing
    except ImportError:  # pragma: no cover - uvloop is a Linux dependency
        return asyncio.run(coro)
    result: T = uvloop.run(coro)
    return result
