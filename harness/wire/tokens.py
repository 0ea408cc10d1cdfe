"""The token convention shared by the harness and the reference server.

Real tokenizers are not needed to measure transport costs, but both sides must
agree on how many tokens a piece of text is.  loopbench uses a fixed-width
convention: one token is :data:`CHARS_PER_TOKEN` characters.  The reference
server emits output made of exactly such tokens, so the harness can spread
``usage.output_tokens`` over deltas by text length without error.  Against a
real endpoint the same rule is only an estimate, which is why token counts the
harness reports come from ``usage`` whenever the endpoint sends it.

The convention is an object (:class:`TokenConvention`) so a run can use the
endpoint's own tokenizer instead (``--tokenizer``): :data:`FIXED_WIDTH` is the
4-characters rule (the module functions), :class:`CountedTokens` wraps any
``encode``-like counter (a HuggingFace tokenizer loaded by the edge,
harness/run/tokenizer.py) and makes text of exactly the planned size under it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

CHARS_PER_TOKEN = 4
TEXT_CHUNK_TOKENS = 4096

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


def chunked_text(n_tokens: int, rng: random.Random) -> str:
    """:func:`make_text` of ``n_tokens`` (the same text, same draws) without per-token strings.

    Made in chunks of :data:`TEXT_CHUNK_TOKENS`: a million-token text never exists as a
    million one-token strings (~55 bytes each) on the way to its ~4 bytes per token.
    """
    if n_tokens <= TEXT_CHUNK_TOKENS:
        return make_text(n_tokens, rng)
    return "".join(
        make_text(min(TEXT_CHUNK_TOKENS, n_tokens - start), rng)
        for start in range(0, n_tokens, TEXT_CHUNK_TOKENS)
    )


class TokenConvention(Protocol):
    """How many tokens a text is, and text of a given number of tokens."""

    #: shown in the manifest and the summary (``4-chars`` or the tokenizer's name)
    name: str

    def count(self, text: str) -> int: ...

    def make_text(self, n_tokens: int, rng: random.Random) -> str: ...


class FixedWidth:
    """The 4-characters-per-token rule: :func:`count_tokens` and :func:`make_text` themselves."""

    name = "4-chars"

    @staticmethod
    def count(text: str) -> int:
        return count_tokens(text)

    @staticmethod
    def make_text(n_tokens: int, rng: random.Random) -> str:
        return make_text(n_tokens, rng)


#: the default convention (the reference server's): the embedded path is byte-for-byte unchanged
FIXED_WIDTH: TokenConvention = FixedWidth()

#: rounds of adding or removing words before the closest text found is taken
_FIT_ROUNDS = 64


class CountedTokens:
    """A convention from a token counter (``len(tokenizer.encode(text).ids)``).

    :meth:`make_text` draws words as :func:`make_text` does, from those the tokenizer
    makes one token of with a leading space, then adds or removes words until the
    counter agrees with the plan; for the rare tokenizer where that never lands exactly,
    the closest text found is kept.
    """

    def __init__(self, name: str, counter: Callable[[str], int]) -> None:
        self.name = name
        self._counter = counter
        single = [w for w in _WORDS if counter(" " + w) == 1]
        # A tokenizer that splits every word (a character-level one) still gets words.
        self._words = single or list(_WORDS)

    def count(self, text: str) -> int:
        return self._counter(text) if text else 0

    def make_text(self, n_tokens: int, rng: random.Random) -> str:
        if n_tokens <= 0:
            return ""
        words = rng.choices(self._words, k=n_tokens)
        best = text = "".join(" " + w for w in words)
        best_gap = abs(self._counter(text) - n_tokens)
        for _ in range(_FIT_ROUNDS):
            got = self._counter(text)
            if got == n_tokens:
                return text
            if abs(got - n_tokens) < best_gap:
                best, best_gap = text, abs(got - n_tokens)
            if got < n_tokens:
                words.extend(rng.choices(self._words, k=n_tokens - got))
            else:
                # Removing as many words as surplus tokens overshoots when words are several
                # tokens: halve the cut, at least one word.
                cut = max(1, (got - n_tokens) // 2 if len(words) > 1 else 0)
                del words[max(1, len(words) - cut) :]
            text = "".join(" " + w for w in words)
        return text if self._counter(text) == n_tokens else best
