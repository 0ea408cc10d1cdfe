"""The model's context window: refuse what does not fit, or drop the oldest items (pure).

What must fit and the two ``truncation`` modes: docs/model.md §13 and docs/server.md,
"Context window and truncation".  Both run before the API tier's wait, so a refused 5 MB
body costs its parsing, not its modelled prefill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference_server.core.conversation import Conversation, item_tokens
from reference_server.core.output import HINT_OUTPUT_TOKENS, int_hint
from reference_server.core.validation import CreateRequest, RequestError, invalid

TRUNCATION_MODES = ("auto", "disabled")
# The public API's wording; what follows it is loopbench's, with the numbers a client can act on.
CONTEXT_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


@dataclass(frozen=True, slots=True)
class Limits:
    """The model's limits, from the engine profile."""

    context_window_tokens: int
    max_output_tokens: int


@dataclass(slots=True)
class Fitted:
    """A conversation that fits the window, and what ``truncation: auto`` dropped to get there."""

    conv: Conversation
    dropped_items: int = 0
    dropped_tokens: int = 0
    auto: bool = False  # the request asked for truncation: auto

    @property
    def truncated(self) -> bool:
        return self.dropped_items > 0

    def record(self, timing: dict[str, Any]) -> None:
        """What truncation dropped, in the response's ``sim_timing`` (only when it was asked for)."""
        if self.auto:
            timing["truncated_items"] = self.dropped_items
            timing["truncated_tokens"] = self.dropped_tokens


def truncation_mode(req: CreateRequest) -> str:
    """``truncation`` of a create body: ``auto`` or ``disabled`` (absent or null: disabled)."""
    value = req.raw.get("truncation")
    if value is None:
        return "disabled"
    if value not in TRUNCATION_MODES:
        shown = value if isinstance(value, str) else type(value).__name__
        raise invalid(
            f"Invalid value: '{shown}'. Supported values are: 'auto' and 'disabled'.", "truncation"
        )
    return str(value)


def check_max_output(req: CreateRequest, limits: Limits) -> None:
    """``max_output_tokens`` above the model's cap is refused, as the API refuses it."""
    mot = req.max_output_tokens
    if mot is not None and mot > limits.max_output_tokens:
        raise invalid(
            f"Invalid 'max_output_tokens': integer above maximum value. Expected a value "
            f"<= {limits.max_output_tokens}, but got {mot} instead.",
            "max_output_tokens",
            "integer_above_max_value",
        )


def requested_output(req: CreateRequest, unhinted: int, limits: Limits) -> int:
    """Output tokens the window must leave room for: ``max_output_tokens`` when set, else the
    most the output policy may plan (the hint, else ``unhinted``), at most the model's output
    cap (docs/model.md §13)."""
    if req.max_output_tokens is not None:
        return min(req.max_output_tokens, limits.max_output_tokens)
    hint = int_hint(req.metadata, HINT_OUTPUT_TOKENS)
    return min(unhinted if hint is None else max(1, hint), limits.max_output_tokens)


def context_error(input_tokens: int, output_tokens: int, window: int) -> RequestError:
    return invalid(
        f"{CONTEXT_MESSAGE} (loopbench: {input_tokens} input tokens + {output_tokens} "
        f"requested output tokens exceed the context window of {window} tokens.)",
        "input",
        "context_length_exceeded",
    )


def fit(
    conv: Conversation,
    instructions: str | None,
    *,
    extra_tokens: int,
    output_tokens: int,
    window: int,
    truncation: str,
) -> Fitted:
    """``conv`` if it fits, else (``auto``) a copy without its oldest items, else the 400.

    ``extra_tokens`` is what the context holds besides the items (tool definitions).
    The instructions are never dropped; items go whole, oldest first, and a function
    call takes its output with it (an output without its call is meaningless to the
    model).  The newest item is never dropped: if it alone does not fit, the request
    is refused whatever the mode.
    """
    total = conv.tokens + extra_tokens
    if total + output_tokens <= window:
        return Fitted(conv)
    if truncation != "auto":
        raise context_error(total, output_tokens, window)
    chain = conv.chain_items
    sizes = [item_tokens(it) for it in chain]
    budget = window - output_tokens - extra_tokens - conv.head_tokens
    kept_tokens = sum(sizes)
    dropped: set[int] = set()
    orphaned: set[str] = set()
    for i in range(len(chain) - 1):
        if kept_tokens <= budget:
            break
        if i in dropped:
            continue
        dropped.add(i)
        kept_tokens -= sizes[i]
        call_id = _call_id(chain[i])
        if chain[i].get("type") == "function_call" and call_id is not None:
            orphaned.add(call_id)
            for j in range(i + 1, len(chain) - 1):
                if j not in dropped and _is_output_of(chain[j], orphaned):
                    dropped.add(j)
                    kept_tokens -= sizes[j]
    if kept_tokens > budget:
        raise context_error(total, output_tokens, window)
    kept = [it for i, it in enumerate(chain) if i not in dropped]
    fitted = Conversation.build(instructions, kept)
    return Fitted(fitted, len(dropped), sum(sizes[i] for i in dropped))


def _call_id(item: dict[str, Any]) -> str | None:
    value = item.get("call_id")
    return value if isinstance(value, str) else None


def _is_output_of(item: dict[str, Any], call_ids: set[str]) -> bool:
    return item.get("type") == "function_call_output" and _call_id(item) in call_ids
