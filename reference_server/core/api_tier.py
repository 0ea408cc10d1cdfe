"""The API-tier cost model: what one request costs before and after inference (pure).

The server computes a :class:`RequestCost` from what the transport made it do
(open a connection, process the whole history or only the new items, re-hydrate
a chain from the store) and asks this module how long the API tier works on it.
No clocks, no I/O: :mod:`reference_server.sim` turns the milliseconds into
waits.  ``docs/model.md`` derives the profile defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_server.core.profiles import ApiProfile


@dataclass(frozen=True, slots=True)
class RequestCost:
    """What the API tier has to do for one request.

    ``processed_tokens`` are validated, safety-classified and tokenized: the
    whole history on stateless HTTP, only the new items on a WebSocket cache
    hit.  ``rehydrated_tokens`` are loaded from the store and re-rendered
    (``http-chained``, and ``ws-store`` on a cache miss); they were checked when
    first stored, so they cost :attr:`ApiProfile.rehydrate_us`, not the full
    per-token price.
    """

    new_connection: bool
    websocket: bool
    connection_resolved: bool
    processed_tokens: int
    rehydrated_tokens: int = 0

    @classmethod
    def http(cls, new_connection: bool, processed: int, rehydrated: int = 0) -> RequestCost:
        """An HTTP request's: no connection state survives between HTTP requests."""
        return cls(new_connection, False, False, processed, rehydrated)


@dataclass(frozen=True, slots=True)
class PreCost:
    """Pre-inference API work in milliseconds, by component (sums to :attr:`total_ms`)."""

    connection_ms: float
    fixed_ms: float
    tokens_ms: float
    rehydrate_ms: float
    network_ms: float

    @property
    def total_ms(self) -> float:
        return (
            self.connection_ms
            + self.fixed_ms
            + self.tokens_ms
            + self.rehydrate_ms
            + self.network_ms
        )


def api_pre_ms(profile: ApiProfile, cost: RequestCost) -> PreCost:
    """Pre-inference work on the request's critical path (before the engine sees it)."""
    # Only a WebSocket keeps auth/rate-limit/routing state between requests; an HTTP
    # keep-alive connection still resolves every request from scratch.
    resolved = cost.websocket and cost.connection_resolved
    return PreCost(
        connection_ms=profile.connect_ms if cost.new_connection else 0.0,
        fixed_ms=profile.fixed_resolved_ms if resolved else profile.fixed_ms,
        tokens_ms=max(0, cost.processed_tokens) * profile.per_token_us / 1000.0,
        rehydrate_ms=max(0, cost.rehydrated_tokens) * profile.rehydrate_us / 1000.0,
        network_ms=profile.hops * profile.hop_ms,
    )


def api_post_ms(profile: ApiProfile, cost: RequestCost) -> float:
    """Post-inference bookkeeping (billing, usage logging); the same work on every transport."""
    return profile.post_ms


def post_blocks_completion(cost: RequestCost) -> bool:
    """Whether ``response.completed`` waits for the post-inference work.

    HTTP finishes the request only when bookkeeping is done; the WebSocket mode
    sends ``response.completed`` first and does the bookkeeping in the
    background, off the agent's critical path.
    """
    return not cost.websocket
