"""The API-tier cost model and the closed-form predictions that calibrate the profiles."""

from __future__ import annotations

from dataclasses import astuple

import pytest

from harness.wire.errors import UsageError
from harness.wire.transports import TRANSPORT_NAMES
from reference_server.core.api_tier import (
    RequestCost,
    api_post_ms,
    api_pre_ms,
    post_blocks_completion,
)
from reference_server.core.profiles import ApiProfile, EngineProfile, load_profiles
from tools.model_predict import (
    CodexRollout,
    predict_rollout,
    predict_turn_ms,
    predicted_reduction_pct,
    predicted_ttft_reduction_pct,
    request_cost,
)

OPT, CEREBRAS = load_profiles("optimized", "cerebras-spark")
LEGACY, GPU = load_profiles("legacy", "gpu-legacy")


def test_pre_cost_components() -> None:
    cost = RequestCost(
        new_connection=True,
        websocket=False,
        connection_resolved=False,
        processed_tokens=10_000,
        rehydrated_tokens=2_000,
    )
    pre = api_pre_ms(OPT, cost)
    assert pre.connection_ms == OPT.connect_ms
    assert pre.fixed_ms == OPT.fixed_ms
    assert pre.tokens_ms == pytest.approx(10_000 * OPT.per_token_us / 1000)
    assert pre.rehydrate_ms == pytest.approx(2_000 * OPT.rehydrate_us / 1000)
    assert pre.network_ms == OPT.hops * OPT.hop_ms
    assert pre.total_ms == pytest.approx(sum(astuple(pre)))


def test_only_a_resolved_websocket_gets_the_cheap_fixed_cost() -> None:
    ws = RequestCost(
        new_connection=False, websocket=True, connection_resolved=True, processed_tokens=0
    )
    http = RequestCost(
        new_connection=False, websocket=False, connection_resolved=True, processed_tokens=0
    )
    first_ws = RequestCost(
        new_connection=True, websocket=True, connection_resolved=False, processed_tokens=0
    )
    assert api_pre_ms(OPT, ws).fixed_ms == OPT.fixed_resolved_ms
    assert api_pre_ms(OPT, http).fixed_ms == OPT.fixed_ms
    assert api_pre_ms(OPT, first_ws).fixed_ms == OPT.fixed_ms
    assert api_pre_ms(OPT, first_ws).connection_ms == OPT.connect_ms
    assert api_pre_ms(OPT, ws).connection_ms == 0


def test_post_blocks_only_on_http() -> None:
    http = RequestCost(False, False, False, 100)
    ws = RequestCost(False, True, True, 100)
    assert post_blocks_completion(http) and not post_blocks_completion(ws)
    assert api_post_ms(OPT, http) == api_post_ms(OPT, ws) == OPT.post_ms


@pytest.mark.parametrize("api", [OPT, LEGACY], ids=["optimized", "legacy"])
@pytest.mark.parametrize("history", [0, 3_150, 30_000, 56_000])
def test_per_turn_cost_ordering(api: ApiProfile, history: int) -> None:
    turn = {
        t: predict_turn_ms(api, CEREBRAS, t, history, 2_000, 150)["turn"] for t in TRANSPORT_NAMES
    }
    assert turn["ws-append"] <= turn["ws"] <= turn["http-chained"] <= turn["http"]
    assert turn["ws"] <= turn["ws-store"] <= turn["http-chained"]
    if history:
        assert turn["ws-append"] < turn["ws"] < turn["http-chained"] < turn["http"]


def test_legacy_costs_more_than_optimized_everywhere() -> None:
    for transport in TRANSPORT_NAMES:
        for history in (0, 20_000):
            for new_conn in (False, True):
                o = predict_turn_ms(
                    OPT, CEREBRAS, transport, history, 2_000, 150, new_connection=new_conn
                )
                leg = predict_turn_ms(
                    LEGACY, CEREBRAS, transport, history, 2_000, 150, new_connection=new_conn
                )
                assert leg["turn"] >= o["turn"]


def test_request_cost_per_transport() -> None:
    assert request_cost("http", 1000, 200) == RequestCost(False, False, False, 1200, 0)
    assert request_cost("http-chained", 1000, 200) == RequestCost(False, False, False, 200, 1000)
    assert request_cost("ws", 1000, 200) == RequestCost(False, True, True, 200, 0)
    assert request_cost("ws-store", 1000, 200) == RequestCost(False, True, True, 200, 1000)
    assert request_cost("ws-append", 0, 200, new_connection=True) == RequestCost(
        True, True, False, 200, 0
    )
    assert request_cost("ws-append", 1000, 200) is None
    with pytest.raises(UsageError, match="transport"):
        request_cost("grpc", 0, 0)


def test_prefix_cache_makes_prefill_transport_independent() -> None:
    expected = 2_000 / CEREBRAS.prefill_tps * 1000 + CEREBRAS.base_ttft_ms
    for t in TRANSPORT_NAMES:
        assert predict_turn_ms(OPT, CEREBRAS, t, 30_000, 2_000, 150)["prefill"] == pytest.approx(
            expected
        )


# -- calibration (docs/model.md §9) -----------------------------------------------------------------


def test_codex_rollout_shape() -> None:
    turns = CodexRollout().turns()
    assert len(turns) == 26
    assert turns[0] == (0, 3000, 150)
    history, new, output = turns[-1]
    assert output == 400
    assert 55_000 <= history + new <= 60_000


def test_ws_vs_http_on_cerebras_lands_in_the_band() -> None:
    http = predict_rollout(OPT, CEREBRAS, "http")
    ws = predict_rollout(OPT, CEREBRAS, "ws")
    assert 35.0 <= predicted_reduction_pct(http, ws) <= 45.0


@pytest.mark.parametrize("tool_ms", [150.0, 200.0, 250.0])
def test_ws_band_holds_across_typical_tool_latencies(tool_ms: float) -> None:
    w = CodexRollout(tool_ms=tool_ms)
    reduction = predicted_reduction_pct(
        predict_rollout(OPT, CEREBRAS, "http", w), predict_rollout(OPT, CEREBRAS, "ws", w)
    )
    assert 35.0 <= reduction <= 45.0


def test_optimized_vs_legacy_ttft_over_http() -> None:
    legacy = predict_rollout(LEGACY, CEREBRAS, "http")
    optimized = predict_rollout(OPT, CEREBRAS, "http")
    assert 40.0 <= predicted_ttft_reduction_pct(legacy, optimized) <= 50.0


def test_gpu_legacy_hides_the_api_overhead() -> None:
    http = predict_rollout(OPT, GPU, "http")
    ws = predict_rollout(OPT, GPU, "ws")
    assert 0.0 < predicted_reduction_pct(http, ws) < 10.0


@pytest.mark.parametrize("engine", [CEREBRAS, GPU], ids=["cerebras-spark", "gpu-legacy"])
def test_rollout_ordering(engine: EngineProfile) -> None:
    totals = {t: predict_rollout(OPT, engine, t).total_ms for t in TRANSPORT_NAMES}
    assert totals["ws-append"] <= totals["ws"] <= totals["http-chained"] <= totals["http"]


def test_rollout_prediction_adds_up() -> None:
    p = predict_rollout(OPT, CEREBRAS, "ws")
    assert p.tool_ms == 25 * 200.0
    assert p.total_ms == pytest.approx(p.model_ms + p.tool_ms)
    assert p.model_ms == pytest.approx(sum(p.turn_ms))
    assert len(p.ttft_ms) == 26
    no_keepalive = predict_rollout(OPT, CEREBRAS, "http", keepalive=False)
    assert no_keepalive.total_ms == pytest.approx(
        predict_rollout(OPT, CEREBRAS, "http").total_ms + 25 * OPT.connect_ms
    )


def test_reasoning_delays_the_first_visible_token_and_widens_the_http_gap() -> None:
    plain = predict_turn_ms(OPT, CEREBRAS, "ws", 10_000, 2_000, 150)
    thinking = predict_turn_ms(OPT, CEREBRAS, "ws", 10_000, 2_000, 150, reasoning_tokens=500)
    assert plain["reasoning"] == 0.0 and plain["ttfot"] == plain["ttft"]
    assert thinking["ttft"] == plain["ttft"]
    assert thinking["ttfot"] > thinking["ttft"]
    assert thinking["decode"] > plain["decode"] > 0
    # Re-sent reasoning grows what stateless HTTP processes every turn; WebSocket keeps it.
    w = CodexRollout(reasoning_tokens=1_000)
    gap = (
        predict_rollout(OPT, CEREBRAS, "http").total_ms
        - predict_rollout(OPT, CEREBRAS, "ws").total_ms
    )
    gap_reasoning = (
        predict_rollout(OPT, CEREBRAS, "http", w).total_ms
        - predict_rollout(OPT, CEREBRAS, "ws", w).total_ms
    )
    assert gap_reasoning > gap
