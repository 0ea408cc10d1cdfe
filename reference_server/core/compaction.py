"""The compaction endpoint's model (``POST /v1/responses/compact``), pure.

Compaction replaces a long conversation by one opaque ``compaction`` item standing for it
(docs/model.md §14).  Why the output is the item alone, and what its ``encrypted_content``
holds: docs/server.md, "Compaction".
"""

from __future__ import annotations

import random
from typing import Any

from harness.wire import events as ev
from harness.wire.tokens import CHARS_PER_TOKEN

# Compacted summary: 10% of the input it replaces, at least 512 tokens (docs/model.md §14).
SUMMARY_SHARE = 0.10
MIN_SUMMARY_TOKENS = 512
_HEADER = "lbcmp1."
_FILL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def summary_tokens(input_tokens: int) -> int:
    """Tokens of the compaction item that replaces ``input_tokens`` of conversation."""
    return max(MIN_SUMMARY_TOKENS, round(input_tokens * SUMMARY_SHARE))


def encrypted_content(tokens: int, rng: random.Random) -> str:
    """Opaque content that counts as ``tokens`` tokens (4 characters each, header included)."""
    head = f"{_HEADER}{tokens}."
    size = max(len(head), tokens * CHARS_PER_TOKEN)
    return head + "".join(rng.choices(_FILL, k=size - len(head)))


def compaction_item(tokens: int, rng: random.Random) -> dict[str, Any]:
    return {
        "id": ev.new_id("cmp", rng),
        "type": "compaction",
        "encrypted_content": encrypted_content(tokens, rng),
    }


def compacted_response(
    response_id: str,
    created_at: int,
    output: list[dict[str, Any]],
    usage: dict[str, Any],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The ``CompactedResponse`` body (``object: response.compaction``)."""
    return {
        "id": response_id,
        "object": "response.compaction",
        "created_at": created_at,
        "output": output,
        "usage": usage,
        **extra,
    }
