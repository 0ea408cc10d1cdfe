"""core/regex_sample.py: strings a schema's ``pattern`` accepts (pure)."""

from __future__ import annotations

import random
import re

import pytest

from reference_server.core.regex_sample import matching_string


@pytest.mark.parametrize(
    "pattern",
    [
        r"^wf_[a-z0-9-]{6,}$",  # Claude Code's Workflow ids
        r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",  # an HTTP token (Monitor's WebSocket protocols)
        r"^v[0-9]+\.[0-9]+\.[0-9]+$",
        r"^[A-Z]{2}-\d{3}$",
        r"^(foo|bar)+/(?:x|y)?\w*$",
        r"^[^\n\r]*$",
        r"\S+@\S+\.com",
    ],
)
def test_every_draw_matches(pattern: str) -> None:
    draws = {matching_string(pattern, random.Random(seed)) for seed in range(200)}
    assert None not in draws
    assert all(re.search(pattern, d) for d in draws if d is not None)


@pytest.mark.parametrize("pattern", [r"(?=x)a", r"(a)\1", r"(", r"[^\s\S]"])
def test_what_it_cannot_make_is_none(pattern: str) -> None:
    assert matching_string(pattern, random.Random(1)) is None
