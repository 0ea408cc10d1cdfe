"""The request shaping and token convention of a run: the scenario's ``target:`` and the flags.

The flags (``--header``, ``--session-header``, ``--extra-body``, ``--tokenizer``) go on top
of the section: a flag's header replaces the section's of the same name, its extra body
fields are merged over the section's, its session header and tokenizer replace the
section's.  Loading the tokenizer reads files, which is why this is here and not in the
pure layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.client.shaping import RequestShaping, merge_extra_body, split_extra_body
from harness.run.tokenizer import load_tokens
from harness.wire.tokens import FIXED_WIDTH, TokenConvention
from harness.workload.scenario import Scenario


@dataclass(frozen=True, slots=True)
class TargetFlags:
    """What the command line adds to a scenario's ``target:`` section (checked already)."""

    headers: tuple[tuple[str, str], ...] = ()
    session_header: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict, hash=False)
    tokenizer: str | None = None


def resolve_target(
    scenario: Scenario, flags: TargetFlags = TargetFlags()
) -> tuple[RequestShaping, TokenConvention]:
    """The run's :class:`RequestShaping` and token convention (the tokenizer loaded)."""
    section = scenario.target
    headers: dict[str, tuple[str, str]] = {k.lower(): (k, v) for k, v in section.headers.items()}
    for name, value in flags.headers:
        headers[name.lower()] = (name, value)
    shaping = RequestShaping(
        headers=tuple(headers.values()),
        session_header=flags.session_header or section.session_header,
        extra_body=merge_extra_body(
            split_extra_body(section.extra_body), split_extra_body(flags.extra_body)
        ),
    )
    if flags.tokenizer:
        tokens: TokenConvention = load_tokens(flags.tokenizer)
    elif section.tokenizer:
        # A path in the file is relative to the file, as rollout.trace is.
        tokens = load_tokens(section.tokenizer, Path(scenario.source).parent, "target.tokenizer")
    else:
        tokens = FIXED_WIDTH
    return shaping, tokens
