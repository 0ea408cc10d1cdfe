"""Conversation state the server keeps between responses, and what it costs to rebuild.

A :class:`Conversation` is the full item list a response was sampled from
(input + output), with its running token count and the rolling prefix hashes the
engine's prefix cache is keyed on.  Extending a cached conversation with new
items only touches the new items: that asymmetry *is* the WebSocket-mode saving
the harness measures, so the server does the real work it models.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from harness.wire.tokens import count_tokens
from reference_server.core import reasoning

# Per-item framing tokens (role markers, separators), as chat templates add.
ITEM_OVERHEAD_TOKENS = 4
# Fields of an item the model never reads: ids and statuses differ between copies of one item.
_BOOKKEEPING = frozenset({"id", "status", "type"})


def item_text(item: dict[str, Any]) -> str:
    kind = item.get("type", "message")
    if kind == "message":
        return _parts_text(item.get("content"))
    if kind == "function_call":
        return str(item.get("name", "")) + str(item.get("arguments", ""))
    if kind == "custom_tool_call":
        return str(item.get("name", "")) + str(item.get("input", ""))
    if kind in ("function_call_output", "custom_tool_call_output"):
        return _parts_text(item.get("output"))
    if kind == "reasoning":
        return reasoning.summary_text(item)
    if kind == "compaction":
        # 4 characters a token by construction (core/compaction.py): charged as what it replaced.
        return str(item.get("encrypted_content", ""))
    if kind == "item_reference":
        return ""
    # A hosted or client-run tool's item sent back (core/validation.py CONTEXT_ITEM_TYPES):
    # the model reads what it holds, so its JSON is charged, less the bookkeeping fields.
    return orjson.dumps({k: v for k, v in item.items() if k not in _BOOKKEEPING}).decode()


def _parts_text(value: Any) -> str:
    """A string, or the text of an array of content parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            p.get("text", "")
            for p in value
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def item_tokens(item: dict[str, Any]) -> int:
    if item.get("type") == "reasoning":
        # The hidden chain of thought is context too: re-sent reasoning is charged as input.
        return reasoning.input_tokens(item) + ITEM_OVERHEAD_TOKENS
    return count_tokens(item_text(item)) + ITEM_OVERHEAD_TOKENS


def tools_tokens(tools: list[dict[str, Any]]) -> int:
    return count_tokens(orjson.dumps(tools).decode()) if tools else 0


def _item_key(item: dict[str, Any]) -> bytes:
    # Only what the model sees: ids and statuses of echoed items must not break prefix matches.
    kind = item.get("type", "message")
    if kind == "message":
        return orjson.dumps(("m", item.get("role"), item_text(item)))
    if kind in ("function_call", "custom_tool_call"):
        return orjson.dumps(("c", item.get("call_id"), item.get("name"), item_text(item)))
    if kind in ("function_call_output", "custom_tool_call_output"):
        # Codex's outputs of tools it ran by itself have a name and no call_id.
        return orjson.dumps(("o", item.get("call_id") or item.get("name"), item_text(item)))
    if kind == "reasoning":
        # The id and size, not the multi-kilobyte blob: equal for the re-sent and the kept copy.
        return orjson.dumps(("r", item.get("id"), reasoning.input_tokens(item)))
    if kind == "compaction":
        return orjson.dumps(("k", item_text(item)))
    return orjson.dumps(("x", kind, item_text(item)))


@dataclass(slots=True)
class Conversation:
    """Items of a conversation plus what the engine and the API tier need to know about them."""

    items: list[dict[str, Any]] = field(default_factory=list)
    prefix_hashes: list[tuple[int, int]] = field(default_factory=list)
    tokens: int = 0
    function_calls: int = 0
    # Leading items that render this request's ``instructions``: the model sees them,
    # but they are not part of the chain (instructions are not inherited).
    head: int = 0
    head_tokens: int = 0

    @property
    def chain_items(self) -> list[dict[str, Any]]:
        """The items a continuation inherits: everything but the instructions."""
        return self.items[self.head :]

    @property
    def chain_tokens(self) -> int:
        return self.tokens - self.head_tokens

    def extend(self, new_items: list[dict[str, Any]]) -> int:
        """Append items; returns the tokens added."""
        added = 0
        h = self.prefix_hashes[-1][0] if self.prefix_hashes else 0
        for item in new_items:
            t = item_tokens(item)
            added += t
            self.tokens += t
            h = hash((h, _item_key(item)))
            self.prefix_hashes.append((h, self.tokens))
            self.items.append(item)
            if item.get("type") == "function_call":
                self.function_calls += 1
        return added

    def fork(self) -> Conversation:
        """A copy that can be extended without changing this one (lists are copied, items shared)."""
        return replace(self, items=list(self.items), prefix_hashes=list(self.prefix_hashes))

    @classmethod
    def build(
        cls,
        instructions: str | None,
        chain_items: list[dict[str, Any]],
        new_items: list[dict[str, Any]] | None = None,
    ) -> Conversation:
        """The model's context: instructions first, then the inherited chain, then the new input."""
        conv = cls()
        if instructions:
            conv.head_tokens = conv.extend(instruction_items(instructions))
            conv.head = len(conv.items)
        conv.extend(chain_items)
        if new_items:
            conv.extend(new_items)
        return conv


def instruction_items(instructions: str | None) -> list[dict[str, Any]]:
    """How ``instructions`` enter the context: one developer message (none if empty)."""
    return (
        [{"type": "message", "role": "developer", "content": instructions}] if instructions else []
    )
