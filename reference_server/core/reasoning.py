"""The simulated model's reasoning: its token budget and the opaque ``encrypted_content`` (pure).

A reasoning model decodes a hidden chain of thought before the visible output
(docs/model.md "Reasoning").  Clients never see those tokens, only a reasoning
output item; a stateless client that wants the next turn to keep them sends the
item back with its ``encrypted_content`` (``include:
["reasoning.encrypted_content"]``).  The server must then charge that re-sent
reasoning as the input it is, so the blob encodes its own token count:
base64url (no padding) of ``lbr1.<N>.`` followed by seeded filler, about
:data:`CHARS_PER_TOKEN` characters per reasoning token, so bodies grow as the
real ones do (docs/protocol.md "Reasoning").
"""

from __future__ import annotations

import base64
import binascii
import random
import re
from typing import Any, Protocol

from harness.wire.tokens import CHARS_PER_TOKEN, count_tokens
from reference_server.core.lengths import effort_tokens, standard_normal

HINT_REASONING_TOKENS = "loopbench.reasoning_tokens"
INCLUDE_ENCRYPTED = "reasoning.encrypted_content"
MAX_REASONING_TOKENS = 1_000_000

_MAGIC = b"lbr1."
_HEADER = re.compile(rb"lbr1\.(\d{1,7})\.")
# Enough base64 characters to hold the longest header (lbr1.1000000. is 13 bytes).
_HEADER_CHARS = 24
# A forged header may not claim more tokens than its length carries (plus rounding):
# otherwise a few bytes could charge a million tokens of input.
_LENGTH_SLACK_TOKENS = 8


class EffortTable(Protocol):
    """Median reasoning tokens per effort and the spread of the draw (profiles.EffortTokens)."""

    sigma: float

    def median(self, effort: str) -> int | None: ...


def reasoning_budget(
    metadata: dict[str, str],
    effort: str | None,
    default: int,
    *,
    efforts: EffortTable | None = None,
    rng: random.Random | None = None,
    ceiling: int | None = None,
) -> int:
    """Reasoning tokens of one response (docs/model.md "Reasoning").

    The metadata hint is an exact plan (a decimal string clamped to 0..1,000,000; a
    malformed one is ignored).  Without it, a named effort draws from the profile's
    per-effort distribution with ``rng``; no effort gives the profile's fixed
    ``default``.  ``ceiling`` (a Messages ``thinking.budget_tokens``) bounds the draw,
    never the hint.  ``effort: "none"`` turns reasoning off whatever the hint says.
    """
    if effort == "none":
        return 0
    raw = metadata.get(HINT_REASONING_TOKENS)
    if raw is not None and len(raw) <= 20:
        try:
            return max(0, min(int(raw), MAX_REASONING_TOKENS))
        except ValueError:
            pass
    planned = default
    if efforts is not None and effort is not None and rng is not None:
        median = efforts.median(effort)
        if median is not None:
            z = standard_normal(rng)
            planned = effort_tokens(z, median, efforts.sigma, MAX_REASONING_TOKENS)
    if ceiling is not None:
        planned = min(planned, ceiling)
    return max(0, min(planned, MAX_REASONING_TOKENS))


def summary_tokens(reasoning_tokens: int) -> int:
    """Length of an asked-for summary: a tenth of the reasoning, at least one token."""
    return max(1, reasoning_tokens // 10)


def encrypted_content(tokens: int, item_id: str) -> str:
    """The opaque blob of a reasoning item of ``tokens`` tokens; seeded by the item id."""
    header = _MAGIC + str(tokens).encode() + b"."
    # base64 turns 3 bytes into 4 characters: 3 raw bytes per token give CHARS_PER_TOKEN characters.
    raw_len = max(len(header), tokens * CHARS_PER_TOKEN * 3 // 4)
    filler = random.Random(item_id).randbytes(raw_len - len(header))
    return base64.urlsafe_b64encode(header + filler).rstrip(b"=").decode("ascii")


def _encoded_tokens(blob: str) -> int | None:
    head = blob[:_HEADER_CHARS]
    if len(head) % 4 == 1:  # a dangling character carries no whole byte
        head = head[:-1]
    head += "=" * (-len(head) % 4)
    try:
        raw = base64.urlsafe_b64decode(head)
    except (binascii.Error, ValueError):
        return None
    match = _HEADER.match(raw)
    return int(match.group(1)) if match else None


def input_tokens(item: dict[str, Any]) -> int:
    """What a reasoning input item costs: its encoded tokens, else its blob's length, plus its summary."""
    blob = item.get("encrypted_content")
    hidden = 0
    if isinstance(blob, str) and blob:
        encoded = _encoded_tokens(blob)
        if encoded is not None and encoded <= len(blob) // CHARS_PER_TOKEN + _LENGTH_SLACK_TOKENS:
            hidden = encoded
        else:
            hidden = count_tokens(blob)
    return hidden + count_tokens(summary_text(item))


def summary_text(item: dict[str, Any]) -> str:
    parts = item.get("summary")
    if not isinstance(parts, list):
        return ""
    return "".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )
