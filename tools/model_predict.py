"""Closed-form latency predictions of the simulation model (pure).

The same arithmetic ``docs/model.md`` writes down, as code, so the documented
numbers and the tests cannot drift from the model: per-turn latency for each
transport, and whole-rollout predictions for the codex-style workload used to
calibrate the shipped profiles (docs/model.md §9).  Predictions assume an idle
server (no API or engine queueing) and use the *expected* decode time over the
burst distribution.  A development check, not part of the installed packages: only the
tests that hold docs/model.md's figures to the model import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

from harness.wire.transports import transport_spec
from reference_server.core.api_tier import (
    RequestCost,
    api_post_ms,
    api_pre_ms,
    post_blocks_completion,
)
from reference_server.core.engine import expected_decode_ms, first_token_ns
from reference_server.core.profiles import ApiProfile, EngineProfile


def request_cost(
    transport: str,
    history_tokens: int,
    new_tokens: int,
    *,
    new_connection: bool = False,
    resent_tokens: int = 0,
) -> RequestCost | None:
    """The API work a transport causes for one turn; ``None`` when no request is made.

    ``resent_tokens`` are what every request carries again besides its new
    items — instructions and tool schemas, which a stored chain does not
    inherit: ``http-chained`` processes them on every turn, a WebSocket keeps
    them with the connection's cache (they are part of ``history_tokens``).
    ``ws-store`` means its cache-miss path (store fallback); on a hit it costs
    what ``ws`` costs.  ``ws-append`` makes a request only for the first turn
    (``history_tokens == 0``); later turns are appends to the live response.
    """
    spec = transport_spec(transport)
    if spec.append and history_tokens > 0:
        return None
    if spec.websocket:
        # A stored chain is what a cache miss re-loads; without a store there is none.
        chain = history_tokens if spec.store else 0
        return RequestCost(new_connection, True, not new_connection, new_tokens, chain)
    if not spec.chained:
        return RequestCost.http(new_connection, history_tokens + new_tokens)
    if history_tokens == 0:
        return RequestCost.http(new_connection, new_tokens)
    chain = max(0, history_tokens - resent_tokens)
    return RequestCost.http(new_connection, new_tokens + resent_tokens, chain)


def predict_turn_ms(
    api: ApiProfile,
    engine: EngineProfile,
    transport: str,
    history_tokens: int,
    new_tokens: int,
    output_tokens: int,
    *,
    new_connection: bool = False,
    cached_tokens: int | None = None,
    resent_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, float]:
    """Predicted milliseconds of one turn, from send to the terminal event.

    ``history_tokens`` is everything in the conversation before this turn
    (previous inputs and outputs, reasoning included), ``new_tokens`` what this
    turn adds, ``output_tokens`` the visible output, decoded after
    ``reasoning_tokens`` of hidden reasoning (docs/model.md §12).  The
    prefix cache is assumed to hold the whole history unless ``cached_tokens``
    says otherwise.  Keys: ``api_pre``, ``prefill``
    (uncached prefill + base TTFT), ``ttft``, ``reasoning`` (first token to the
    first visible one, approximately: bursts are placed over the whole decode),
    ``ttfot`` (``ttft + reasoning``), ``decode``, ``api_post`` (the part on the
    critical path), ``turn``.
    """
    cost = request_cost(
        transport,
        history_tokens,
        new_tokens,
        new_connection=new_connection,
        resent_tokens=resent_tokens,
    )
    pre = api_pre_ms(api, cost).total_ms if cost is not None else 0.0
    post = 0.0
    if cost is not None and post_blocks_completion(cost):
        post = api_post_ms(api, cost)
    cached = history_tokens if cached_tokens is None else cached_tokens
    uncached = max(0, history_tokens + new_tokens - cached)
    prefill = first_token_ns(uncached, engine) / 1e6
    decode = expected_decode_ms(output_tokens + reasoning_tokens, engine)
    reasoning = 0.0
    if reasoning_tokens > 0:
        # N gaps to the first visible token; N - 1 when nothing visible follows.
        reasoning = expected_decode_ms(reasoning_tokens + (1 if output_tokens else 0), engine)
    ttft = pre + prefill
    return {
        "api_pre": pre,
        "prefill": prefill,
        "ttft": ttft,
        "reasoning": reasoning,
        "ttfot": ttft + reasoning,
        "decode": decode,
        "api_post": post,
        "turn": ttft + decode + post,
    }


@dataclass(frozen=True, slots=True)
class CodexRollout:
    """The calibration workload: a coding agent's rollout (docs/model.md §4).

    ``tool_calls`` tool-call turns then one final answer; turn 0 sends the
    system prompt, tool schemas and user prompt (``prompt_tokens``); every later
    turn sends one tool output.  History reaches
    ``prompt + tool_calls * (step_output + tool_output)`` ≈ 56.8k tokens.
    With ``reasoning_tokens`` every turn first reasons that many tokens, which
    stay in the history (re-sent by ``http``, kept by the server otherwise).
    """

    tool_calls: int = 25
    prompt_tokens: int = 3000
    #: of the prompt, what every request re-sends: instructions (1,800) + tool schemas (400)
    resent_tokens: int = 2200
    tool_output_tokens: int = 2000
    step_output_tokens: int = 150
    final_output_tokens: int = 400
    tool_ms: float = 200.0
    reasoning_tokens: int = 0

    def turns(self) -> list[tuple[int, int, int]]:
        """``(history_tokens, new_tokens, output_tokens)`` per turn (output: the visible part)."""
        out: list[tuple[int, int, int]] = []
        history = 0
        new = self.prompt_tokens
        for i in range(self.tool_calls + 1):
            final = i == self.tool_calls
            output = self.final_output_tokens if final else self.step_output_tokens
            out.append((history, new, output))
            history += new + self.reasoning_tokens + output
            new = self.tool_output_tokens
        return out


@dataclass(frozen=True, slots=True)
class RolloutPrediction:
    """:func:`predict_rollout`'s answer (ms): the rollout, its model and tool time, and per turn."""

    transport: str
    total_ms: float
    model_ms: float
    tool_ms: float
    ttft_ms: list[float] = field(default_factory=list)
    turn_ms: list[float] = field(default_factory=list)

    @property
    def ttft_p50_ms(self) -> float:
        return median(self.ttft_ms)


def predict_rollout(
    api: ApiProfile,
    engine: EngineProfile,
    transport: str,
    workload: CodexRollout | None = None,
    *,
    keepalive: bool = True,
) -> RolloutPrediction:
    """Predicted rollout latency: model time of every turn plus the client's tool time.

    Every transport opens one connection at the start; without HTTP keep-alive
    every HTTP turn opens a new one.
    """
    w = workload or CodexRollout()
    turns = w.turns()
    ttfts: list[float] = []
    turn_ms: list[float] = []
    for i, (history, new, output) in enumerate(turns):
        new_conn = i == 0 or (not transport_spec(transport).websocket and not keepalive)
        p = predict_turn_ms(
            api,
            engine,
            transport,
            history,
            new,
            output,
            new_connection=new_conn,
            resent_tokens=w.resent_tokens,
            reasoning_tokens=w.reasoning_tokens,
        )
        ttfts.append(p["ttft"])
        turn_ms.append(p["turn"])
    model = sum(turn_ms)
    tool = w.tool_calls * w.tool_ms
    return RolloutPrediction(transport, model + tool, model, tool, ttfts, turn_ms)


def predicted_reduction_pct(baseline: RolloutPrediction, candidate: RolloutPrediction) -> float:
    """Rollout latency reduction of ``candidate`` over ``baseline``, as docs/metrics.md §1 defines it."""
    return 100.0 * (1.0 - candidate.total_ms / baseline.total_ms)


def predicted_ttft_reduction_pct(
    baseline: RolloutPrediction, candidate: RolloutPrediction
) -> float:
    return 100.0 * (1.0 - candidate.ttft_p50_ms / baseline.ttft_p50_ms)
