"""A short string that a JSON Schema ``pattern`` matches (pure, seeded).

Walks the regular expression's parse tree (the standard library's own parser):
literals, classes, ranges, categories, repeats (kept short), groups and
alternations.  Look-arounds and back-references are beyond it: the caller checks the
result with :func:`re.search` and falls back to its own candidates.
"""

from __future__ import annotations

import random
import re
import string
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser as P  # type: ignore[attr-defined]
from typing import Any

# P and C: the standard library's own regular-expression parser and its opcodes (private
# modules without type stubs, present in every Python the project supports, 3.11+); a second
# regex parser of our own would be worse.

# A repeat with no upper bound is drawn up to this many above its minimum.
MAX_EXTRA_REPEATS = 3
_CATEGORIES = {
    C.CATEGORY_DIGIT: string.digits,
    C.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    C.CATEGORY_SPACE: " ",
    C.CATEGORY_NOT_DIGIT: string.ascii_letters,
    C.CATEGORY_NOT_WORD: "-. ",
    C.CATEGORY_NOT_SPACE: string.ascii_letters + string.digits,
}
_PLAIN = string.ascii_lowercase + string.digits


class _Unsupported(Exception):
    pass


def _class(items: list[tuple[Any, Any]], rng: random.Random) -> str:
    if items and items[0][0] is C.NEGATE:
        banned = set()
        for op, arg in items[1:]:
            if op is C.LITERAL:
                banned.add(chr(arg))
            elif op is C.RANGE:
                banned.update(chr(c) for c in range(arg[0], arg[1] + 1))
            elif op is C.CATEGORY:
                banned.update(_CATEGORIES.get(arg, ""))
        allowed = [c for c in _PLAIN + "-_." if c not in banned]
        if not allowed:
            raise _Unsupported
        return rng.choice(allowed)
    op, arg = rng.choice(items)
    if op is C.LITERAL:
        return chr(arg)
    if op is C.RANGE:
        lo, hi = arg
        return chr(rng.randint(lo, min(hi, lo + 94)))
    if op is C.CATEGORY and arg in _CATEGORIES:
        return rng.choice(_CATEGORIES[arg])
    raise _Unsupported


def _emit(tokens: Any, rng: random.Random, out: list[str], depth: int) -> None:
    if depth > 20:
        raise _Unsupported
    for op, arg in tokens:
        if op is C.LITERAL:
            out.append(chr(arg))
        elif op is C.NOT_LITERAL:
            out.append("a" if chr(arg) != "a" else "b")
        elif op is C.ANY:
            out.append(rng.choice(_PLAIN))
        elif op is C.IN:
            out.append(_class(arg, rng))
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = arg
            hi = lo + MAX_EXTRA_REPEATS if hi is C.MAXREPEAT else min(hi, lo + MAX_EXTRA_REPEATS)
            for _ in range(rng.randint(lo, max(lo, hi))):
                _emit(sub, rng, out, depth + 1)
        elif op is C.SUBPATTERN:
            _emit(arg[-1], rng, out, depth + 1)
        elif op is C.ATOMIC_GROUP:
            _emit(arg, rng, out, depth + 1)
        elif op is C.BRANCH:
            _emit(rng.choice(arg[1]), rng, out, depth + 1)
        elif op is C.AT:
            continue
        else:  # look-arounds, back-references, conditionals
            raise _Unsupported


def matching_string(pattern: str, rng: random.Random) -> str | None:
    """A string ``re.search(pattern, ...)`` accepts, or None when this walker cannot make one."""
    try:
        tree = P.parse(pattern)
        out: list[str] = []
        _emit(tree, rng, out, 0)
    except (_Unsupported, re.error, OverflowError, RecursionError):
        return None
    text = "".join(out)
    return text if re.search(pattern, text) else None
