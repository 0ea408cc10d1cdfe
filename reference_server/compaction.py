"""``POST /v1/responses/compact``: one compaction, with its modelled cost (docs/model.md §14):
a response's, the summary being its output.  Nothing is streamed or stored (docs/server.md).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from harness.wire import events as ev
from reference_server.core.api_tier import RequestCost
from reference_server.core.compaction import compacted_response, compaction_item, summary_tokens
from reference_server.core.context_window import context_error
from reference_server.core.conversation import Conversation
from reference_server.core.validation import CreateRequest
from reference_server.service import Service
from reference_server.sim import decode_seed


def check_window(service: Service, conv: Conversation) -> int:
    """The summary's tokens; the input and the summary must fit the window like any request."""
    out = summary_tokens(conv.tokens)
    window = service.limits.context_window_tokens
    if conv.tokens + out > window:
        raise context_error(conv.tokens, out, window)
    return out


async def compact(
    service: Service,
    req: CreateRequest,
    conv: Conversation,
    rehydrated: int,
    summary: int,
    *,
    new_connection: bool,
    rng: random.Random,
    created_at: int,
) -> dict[str, object]:
    """Wait the modelled work of compacting ``conv``; the ``CompactedResponse`` body."""
    cost = RequestCost.http(new_connection, conv.tokens - rehydrated, rehydrated)
    sim = service.sim
    timing: dict[str, object] = dict((await sim.pre_inference(cost))[0])

    async def discard(_: Sequence[int]) -> None:
        return None

    inf = await sim.inference(
        conv.prefix_hashes, conv.tokens, summary, decode_seed(conv.items), discard
    )
    cached = int(inf.get("cached_tokens", 0))
    timing.update({k: float(inf.get(k, 0.0)) for k in ("engine_queue", "prefill", "decode")})
    timing.update(cached_input_tokens=cached, compacted_tokens=summary)
    timing["api_post"] = await sim.post_inference(cost)
    usage = ev.usage(conv.tokens, cached, summary, cache_write_tokens=conv.tokens - cached)
    return compacted_response(
        ev.new_id("resp", rng),
        created_at,
        [compaction_item(summary, rng)],
        usage,
        {"sim_timing": timing},
    )
