"""The request shaping and token convention of a run: the scenario's ``target:`` and the flags.

The flags go on top of the section (docs/targets.md, "The `target:` section and its flags").
Loading the tokenizer reads files, which is why this is here and not in the pure layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from harness.client.shaping import RequestShaping, merge_extra_body, split_extra_body
from harness.run.tokenizer import load_tokens, resolve_tokenizer_file
from harness.wire.tokens import FIXED_WIDTH, TokenConvention
from harness.workload.scenario import Scenario

#: the environment variable ``loopbench locust`` hands the flags to its master in (not its
#: command line: a header value may be a credential, and a command line is public)
SHAPING_ENV = "LOOPBENCH_SHAPING_FLAGS"


@dataclass(frozen=True, slots=True)
class TargetFlags:
    """What the command line adds to a scenario's ``target:`` section (checked already)."""

    headers: tuple[tuple[str, str], ...] = ()
    session_header: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict, hash=False)
    tokenizer: str | None = None


_FLAGS = TypeAdapter(TargetFlags)


def target_flags_to_json(flags: TargetFlags) -> str:
    """The flags as JSON, for a process that resolves them itself (the Locust master)."""
    return _FLAGS.dump_json(flags).decode()


def target_flags_from_json(text: str) -> TargetFlags:
    """:func:`target_flags_to_json` read back ("" gives no flags)."""
    return _FLAGS.validate_json(text) if text else TargetFlags()


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
    found = tokenizer_file(scenario, flags)
    tokens: TokenConvention = FIXED_WIDTH
    if found is not None:
        spec, path, what = found
        tokens = load_tokens(str(path), what=what, name=spec)
    return shaping, tokens


def tokenizer_file(scenario: Scenario, flags: TargetFlags) -> tuple[str, Path, str] | None:
    """(as given, the tokenizer.json it names, where it was given) or None for the default."""
    if flags.tokenizer:
        return flags.tokenizer, resolve_tokenizer_file(flags.tokenizer), "--tokenizer"
    spec = scenario.target.tokenizer
    if spec:
        # A path in the file is relative to the file, as rollout.trace is.
        where = Path(scenario.source).parent
        return spec, resolve_tokenizer_file(spec, where, "target.tokenizer"), "target.tokenizer"
    return None
