"""Each WebSocket recovery path, forced by a server option, through the ``loopbench run`` runner.

The runner is called in process (``run_scenario``, what ``loopbench run`` calls)
with the embedded server's extra options and without report rendering, which
keeps these runs to a few seconds each.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.report.results import Run, load_run
from harness.run.runner import RunOptions, run_scenario
from harness.workload.scenario import load_scenario
from tests.runs import NO_MODELLED_WAITS
from tests.transports.conftest import TINY


def forced_run(
    tmp: Path, server_args: list[str], transports: str, *, modelled_waits: bool = False
) -> Run:
    """tiny.yaml against a server started with ``server_args``; without its modelled waits
    unless ``modelled_waits`` (a test whose claim needs time to pass)."""
    waits = () if modelled_waits else NO_MODELLED_WAITS
    opts = RunOptions(
        transports=transports.split(","),
        results_root=tmp,
        run_id="r",
        progress=False,
        render=False,
        server_args=["--store", ":memory:", *waits, *server_args],
    )
    result = run_scenario(load_scenario(TINY), TINY, opts)
    return load_run(result.run_dir)


def _by(run: Run, name: str) -> tuple[object, object]:
    turns = run.turns[run.turns["transport"] == name]
    rollouts = run.rollouts[run.rollouts["transport"] == name]
    return turns, rollouts


def _no_errors(run: Run) -> None:
    assert run.summary is not None
    for name, t in run.summary["transports"].items():
        assert t["turns"]["errors"] == 0 and t["rollouts"]["errors"] == 0, name
    assert (run.rollouts["status"] == "completed").all()
    # every recovery is counted on its turn and on its rollout
    for name in run.rollouts["transport"].unique():
        turns, rollouts = _by(run, name)
        assert turns["recoveries"].sum() == rollouts["recoveries"].sum()  # type: ignore[index]


@pytest.fixture(scope="module")
def cache_miss_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    # A 1-byte lane cache keeps nothing: every store:false continuation misses.
    yield forced_run(tmp_path_factory.mktemp("miss"), ["--ws-max-cached-bytes", "1"], "ws,ws-store")


def test_previous_response_not_found_resends_the_full_context(cache_miss_run: Run) -> None:
    _no_errors(cache_miss_run)
    turns, rollouts = _by(cache_miss_run, "ws")
    later = turns[turns["turn_index"] > 0]  # type: ignore[index]
    assert (later["recoveries"] == 1).all()
    assert (later["recovery_ns"] > 0).all()
    assert set(later["sim_cache"]) == {"none"}  # resent as a new chain
    assert (rollouts["recovery_ns"] > 0).all()  # type: ignore[index]
    assert (rollouts["connections"] == 1).all()  # type: ignore[index]  # same socket
    # ws-store never needs to recover: a miss falls back to the store
    store_turns, _ = _by(cache_miss_run, "ws-store")
    store_later = store_turns[store_turns["turn_index"] > 0]  # type: ignore[index]
    assert (store_later["recoveries"] == 0).all()
    assert set(store_later["sim_cache"]) == {"store"}


def test_lifetime_limit_reconnects_and_continues(tmp_path: Path) -> None:
    # the connections must outlive 0.15 s: the modelled times make a rollout last that long
    run = forced_run(tmp_path, ["--ws-max-lifetime-s", "0.15"], "ws,ws-store", modelled_waits=True)
    _no_errors(run)
    for name, resumed_cache in (("ws", "none"), ("ws-store", "store")):
        turns, rollouts = _by(run, name)
        recovered = turns[turns["recoveries"] > 0]  # type: ignore[index]
        assert len(recovered) >= 1, name
        assert (recovered["new_connection"]).all()
        assert (recovered["recovery_ns"] > 0).all()
        assert set(recovered["sim_cache"]) == {resumed_cache}, name
        assert rollouts["connections"].sum() > len(rollouts)  # type: ignore[index]


def test_recoverable_close_mid_stream_reconnects_and_continues(tmp_path: Path) -> None:
    # The second response (or append segment) of every connection is cut by a 1011 close.
    run = forced_run(tmp_path, ["--ws-fault-close-after", "2"], "ws,ws-store,ws-append")
    _no_errors(run)
    for name in ("ws", "ws-store", "ws-append"):
        turns, _ = _by(run, name)
        later = turns[turns["turn_index"] > 0]  # type: ignore[index]
        assert (later["recoveries"] == 1).all(), name
        assert (later["new_connection"]).all(), name
        first = turns[turns["turn_index"] == 0]  # type: ignore[index]
        assert (first["recoveries"] == 0).all(), name


def test_the_cut_fires_on_as_many_connections_as_asked(tmp_path: Path) -> None:
    # Every connection's second response would be cut; only the first connection is.
    args = ["--ws-fault-close-after", "2", "--ws-fault-close-connections", "1"]
    run = forced_run(tmp_path, args, "ws")
    _no_errors(run)
    turns, _ = _by(run, "ws")
    assert turns["recoveries"].sum() == 1  # type: ignore[index]
