"""Every transport end to end through ``loopbench run`` against the embedded server."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.client.options import ClientSettings
from harness.report.results import Run, load_run
from harness.run.runner import RunOptions, run_scenario
from harness.wire.transports import TRANSPORT_NAMES
from harness.workload.scenario import load_scenario
from tests.transports.conftest import TINY, loopbench_run

ALL = ("http", "http-chained", "ws", "ws-store", "ws-append")


@pytest.fixture(scope="module")
def all_five(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, str]:
    out = tmp_path_factory.mktemp("results")
    return loopbench_run(out, "all", "--transports", ",".join(ALL))


def test_all_five_complete_without_errors(all_five: tuple[Run, str]) -> None:
    run, stdout = all_five
    assert set(ALL) <= set(TRANSPORT_NAMES)
    assert run.summary is not None
    counts = set()
    for name in ALL:
        t = run.summary["transports"][name]
        assert t["turns"]["errors"] == 0 and t["rollouts"]["errors"] == 0, name
        counts.add(t["turns"]["count"])
        assert name in stdout
    assert len(counts) == 1  # the same seeded rollouts, turn for turn
    assert (run.rollouts["status"] == "completed").all()
    assert (run.turns["recoveries"] == 0).all()


def test_each_transport_uses_its_server_state(all_five: tuple[Run, str]) -> None:
    turns = all_five[0].turns
    later = turns[turns["turn_index"] > 0]
    by = {name: set(later[later["transport"] == name]["sim_cache"]) for name in ALL}
    assert by["http"] == {"none"}  # the whole history every time
    assert by["http-chained"] == {"store"}  # re-hydrated from SQLite
    assert by["ws"] == {"hit"} and by["ws-store"] == {"hit"}  # the connection cache
    assert by["ws-append"] == {"hit"}  # the same live response
    append = later[later["transport"] == "ws-append"]
    assert (append["sim_api_pre_ms"] == 0).all()  # pre-inference charged once, at the start
    ws_later = later[later["transport"] == "ws"]
    assert (ws_later["sim_api_post_ms"] == 0).all()  # post-inference overlapped on WebSocket
    http_later = later[later["transport"] == "http"]
    assert (http_later["sim_api_post_ms"] > 0).all()  # and blocking over HTTP
    one_rollout = turns[(turns["transport"] == "ws-append") & (turns["rollout_id"] == 0)]
    assert one_rollout["response_id"].nunique() == 1  # one response spans the rollout


def test_http_keepalive_off_pays_a_connection_every_turn(
    all_five: tuple[Run, str], tmp_path: Path
) -> None:
    opts = RunOptions(
        transports=["http"],
        results_root=tmp_path,
        run_id="nokeep",
        client=ClientSettings(keepalive=False),  # what --no-keepalive sets
        progress=False,
        render=False,
        server_args=["--store", ":memory:"],
    )
    run = load_run(run_scenario(load_scenario(TINY), TINY, opts).run_dir)
    connect_fixed_hops_ms = 25 + 12 + 3  # api profile "optimized"
    off = run.turns
    assert off["new_connection"].all()
    assert (off["sim_api_pre_ms"] >= connect_fixed_hops_ms).all()
    on = all_five[0].turns
    on = on[on["transport"] == "http"]
    # with keep-alive the server saw reused connections: most turns paid no connect
    assert (on["sim_api_pre_ms"] < connect_fixed_hops_ms).sum() >= len(on) // 2
