"""The relay's short scheduler slice: set on the calling thread only, read back from the kernel."""

from __future__ import annotations

import os
import threading

import pytest

from harness.run import short_slice
from harness.run.short_slice import SLICE_NS, request_short_slice, thread_slice_ns


def _in_a_thread() -> tuple[int | None, bool, int | None, int]:
    """(slice before, the request's answer, slice after, nice after) on a fresh thread."""
    got: list[tuple[int | None, bool, int | None, int]] = []

    def work() -> None:
        os.nice(3)  # per thread on Linux: a nice value of its own must survive the call
        before = thread_slice_ns()
        ok = request_short_slice()
        got.append((before, ok, thread_slice_ns(), os.nice(0)))

    t = threading.Thread(target=work)
    t.start()
    t.join(10)
    return got[0]


def test_the_slice_is_the_calling_threads_and_the_nice_value_stays() -> None:
    main_before = thread_slice_ns()
    before, ok, after, nice = _in_a_thread()
    if not ok:
        # not Linux 6.12+ (or refused): nothing may have changed
        assert after == before
        pytest.skip(f"this kernel keeps its own slice ({os.uname().release})")
    assert after == SLICE_NS and before != SLICE_NS
    assert nice == os.nice(0) + 3
    assert thread_slice_ns() == main_before  # this thread is untouched


def test_where_the_kernel_cannot_say_nothing_is_claimed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(short_slice, "_syscalls", lambda: None)
    assert request_short_slice() is False
    assert thread_slice_ns() is None
