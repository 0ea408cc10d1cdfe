"""harness/wire/quiet_gc.py: a run raises the young-generation threshold and freezes, then undoes both."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from harness.wire import quiet_gc


@pytest.fixture(autouse=True)
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_begin_raises_gen0_threshold_and_freezes_then_end_restores() -> None:
    gc.set_threshold(700, 11, 12)
    old = quiet_gc.begin()
    try:
        assert old == (700, 11, 12)
        assert gc.get_threshold() == (quiet_gc.GEN0_THRESHOLD, 11, 12)
        assert quiet_gc.GEN0_THRESHOLD >= 20_000
        assert gc.get_freeze_count() > 0
    finally:
        quiet_gc.end(old)
    assert gc.get_threshold() == (700, 11, 12)
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize(
    "thresholds",
    [(50_000, 3, 4), (0, 10, 10)],
    ids=["a-higher-threshold-is-kept", "collection-turned-off-by-zero-stays-off"],
)
def test_a_higher_or_a_zero_threshold_is_kept(thresholds: tuple[int, int, int]) -> None:
    gc.set_threshold(*thresholds)
    old = quiet_gc.begin()
    try:
        assert gc.get_threshold() == thresholds
    finally:
        quiet_gc.end(old)
    assert old == gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == 0


def test_begin_collects_garbage_then_freezes_what_is_alive() -> None:
    garbage = _Node()
    dead = weakref.ref(garbage)
    alive = _Node()
    frozen = weakref.ref(alive)
    del garbage
    assert dead() is not None
    old = quiet_gc.begin()
    try:
        # Garbage that existed at begin() is freed, not frozen for the whole run.
        assert dead() is None
        # What was alive is out of every collection now, even once it is garbage.
        del alive
        gc.collect()
        assert frozen() is not None
    finally:
        quiet_gc.end(old)
    gc.collect()
    assert frozen() is None


def test_end_restores_thresholds_and_unfreezes_even_after_nested_changes() -> None:
    gc.set_threshold(900, 10, 10)
    old = quiet_gc.begin()
    gc.set_threshold(123, 4, 5)  # something changed it during the run
    quiet_gc.end(old)
    assert gc.get_threshold() == (900, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_measuring_pass_hides_what_is_alive_at_each_refreeze_and_frees_it_at_the_end() -> None:
    gc.set_threshold(700, 10, 10)
    old = quiet_gc.begin(quiet_gc.VALVE_THRESHOLD)
    try:
        assert gc.get_threshold()[0] == quiet_gc.VALVE_THRESHOLD
        made = _Node()
        later = weakref.ref(made)
        before = gc.get_freeze_count()
        quiet_gc.refreeze()
        # Moved out of sight without a traversal: counted as frozen, the young count reset.
        assert gc.get_freeze_count() > before
        assert gc.get_count()[0] < 10
        del made
        gc.collect()
        assert later() is not None  # a cycle made during the pass waits for its end
    finally:
        quiet_gc.end(old)
    gc.collect()
    assert later() is None


def test_a_cycle_left_during_a_pass_is_collected_between_passes() -> None:
    # An error path's cycle (an exception kept on a connection and raised from it) is frozen
    # out of sight while a pass measures; between passes it must go, or a long run of many
    # passes grows by every failed turn (docs/reliability.md, *Soak*).
    class Conn:
        gone: BaseException | None = None

        def fail(self) -> None:
            self.gone = ValueError("closed")
            try:
                raise self.gone
            except ValueError:
                pass  # self -> the exception -> its traceback -> this frame -> self

    old = quiet_gc.begin(quiet_gc.VALVE_THRESHOLD)
    try:
        conn = Conn()
        conn.fail()
        freed = []
        ref = weakref.ref(conn, freed.append)
        del conn
        quiet_gc.refreeze()
        gc.collect()
        assert ref() is not None  # frozen: no collection during the pass sees it
        before = quiet_gc.between_passes
        quiet_gc.collect_between_passes()
        assert ref() is None and freed and quiet_gc.between_passes == before + 1
    finally:
        quiet_gc.end(old)
