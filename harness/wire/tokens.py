"""The token convention shared by the harness and the reference server.

Real tokenizers are not needed to measure transport costs, but both sides must
agree on how many tokens a piece of text is.  loopbench uses a fixed-width
convention: one token is :data:`CHARS_PER_TOKEN` characters.  The reference
server emits output made of exactly such tokens, so the harness can spread
``usage.output_tokens`` over deltas by text length without error.  Against a
real endpoint the same rule is only an estimate, which is why token counts the
harness reports come from ``usage`` whenever the endpoint sends it.
"""

from __future__ import annotations

import random

CHARS_PER_TOKEN = 4

# Three-letter words: with a leading space every word is exactly one token.
_WORDS = [
    "the",
    "and",
    "for",
    "are",
    "but",
    "not",
    "you",
    "all",
    "any",
    "can",
    "had",
    "her",
    "was",
    "one",
    "our",
    "out",
    "day",
    "get",
    "has",
    "him",
    "his",
    "how",
    "man",
    "new",
    "now",
    "old",
    "see",
    "two",
    "way",
    "who",
    "boy",
    "did",
    "its",
    "let",
    "put",
    "say",
    "she",
    "too",
    "use",
    "ask",
    "big",
    "end",
    "far",
    "few",
    "got",
    "low",
    "may",
    "own",
    "red",
    "run",
    "set",
    "sit",
    "top",
    "try",
    "why",
    "yes",
    "yet",
    "arg",
    "def",
    "fix",
    "git",
    "log",
    "map",
    "nil",
    "obj",
    "ref",
    "row",
    "src",
    "sum",
    "tmp",
    "val",
    "var",
]


def count_tokens(text: str) -> int:
    """Tokens in ``text`` under the fixed-width convention (ceil(len/4), at least 1 if non-empty)."""
    n = len(text)
    return (n + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def make_text(n_tokens: int, rng: random.Random) -> str:
    """Deterministic pseudo-text of exactly ``n_tokens`` tokens (``4 * n_tokens`` characters)."""
    if n_tokens <= 0:
        return ""
    words = rng.choices(_WORDS, k=n_tokens)
    return "".join(" " + w for w in words)


def token_pieces(n_tokens: int, rng: random.Random) -> list[str]:
    """The same text as :func:`make_text`, split into one string per token."""
    return [" " + w for w in rng.choices(_WORDS, k=max(0, n_tokens))]
