"""The event loop the measuring side runs on: uvloop where available, as ``loopbench run`` does."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a Linux dependency
        return asyncio.run(coro)
    result: T = uvloop.run(coro)
    return result
