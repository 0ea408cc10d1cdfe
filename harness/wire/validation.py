"""One wording for every invalid configuration value: ``expected X, got Y``.

Scenario, trace, gate-rules and fault files, simulation profiles, server options and
results documents are all declared as pydantic models; :func:`describe_error` turns
one pydantic error into the (dotted field, message) pair every one of them prints,
so the same bad bound reads the same wherever it was written ("expected an integer
≥ 1, got 0").  :func:`set_override` is the one ``--set key.path=value`` merge.

Pure: no I/O; YAML is only parsed from the override's text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from typing import Any

import yaml
from pydantic import BaseModel, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

#: a name a user picks for a scenario (file names, result folders)
NAME_PATTERN = r"^[a-z0-9-]+$"
_PATTERN_WORDS = {NAME_PATTERN: "lowercase letters, digits and '-'"}


def describe_value(value: Any) -> str:
    """How a received value is shown in an error: as the user wrote it in YAML, short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = _flow(value) if isinstance(value, list | tuple | dict) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _flow(value: Any) -> str:
    # YAML flow style reads closer to the user's file than Python's repr.
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, str) and _PLAIN.match(value) and value.lower() not in _YAML_WORDS:
        return value
    return describe_value(value)


_PLAIN = re.compile(r"^[A-Za-z_][\w.-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def shown(x: Any) -> str:
    """A validated value in an error: floats the user wrote as `3` are shown as 3."""
    if x is None:
        return "nothing"
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return describe_value(int(x))
    if isinstance(x, list | tuple):
        return "[" + ", ".join(shown(v) for v in x) + "]"
    return describe_value(x)


def invalid(field: str | None, expected: str, got: Any) -> PydanticCustomError:
    """An error for ``field`` (relative to the model being validated) in the project's wording.

    ``got`` is a validated value; ``None`` reads as "nothing" (the field is absent).
    """
    return PydanticCustomError(
        "loopbench",
        "expected {expected}, got {got}",
        {"expected": expected, "got": shown(got), "field": field or ""},
    )


def unknown_field(key: str, allowed: list[str]) -> PydanticCustomError:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = (
        f" (did you mean {close[0]!r}?)" if close else f" (expected one of: {', '.join(allowed)})"
    )
    return PydanticCustomError("unknown_field", "unknown field{hint}", {"field": key, "hint": hint})


class KnownFields(BaseModel):
    """A model whose unknown keys are reported with the closest known name.

    ``extra="forbid"`` alone reports an unknown key without saying what was
    meant; this before-validator catches it first and suggests the closest name.
    """

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = [f.alias or name for name, f in cls.model_fields.items()]
            for key in data:
                if key not in allowed:
                    raise unknown_field(str(key), allowed)
        return data


_SIGNS = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤"}


def bound(kind: str, limit: Any, noun: str | None = None) -> str:
    """``an integer ≥ 1``: what a value beyond ``kind`` (gt, ge, lt, le) ``limit`` should be."""
    if noun is None:
        noun = "an integer" if isinstance(limit, int) else "a number"
    return f"{noun} {_SIGNS[kind]} {shown(limit)}"


_TYPE_WORDS = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dataclass_type": "a mapping",
}


def _dotted(loc: tuple[int | str, ...], tags: Collection[str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in tags or part == "[key]":
            # pydantic inserts the discriminated union's tag (and marks a bad mapping key);
            # the user never wrote either.
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def join_field(base: str, field: str) -> str:
    """``base`` and a path relative to it: ``load`` + ``arrival.rate``, ``x`` + ``[2]``."""
    if not field:
        return base
    if not base or field.startswith("["):
        return base + field
    return f"{base}.{field}"


def _choices(ctx_expected: str) -> list[str]:
    return re.findall(r"'([^']*)'", ctx_expected)


def _one_of(choices: list[str], got: Any) -> str:
    close = difflib.get_close_matches(got, choices, n=1, cutoff=0.6) if isinstance(got, str) else []
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"expected one of {', '.join(choices)}, got {describe_value(got)}{hint}"


def describe_error(
    err: ErrorDetails, *, tags: Collection[str] = (), words: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """(dotted field, message) for one pydantic error, in the project's wording.

    ``tags`` are the discriminators of tagged unions, left out of the field's path;
    ``words`` replace the type words of :data:`_TYPE_WORDS` where the input is not YAML.
    """
    kind = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    field = _dotted(err["loc"], tags)
    got = err.get("input")
    if kind == "loopbench":
        where = join_field(field, ctx.get("field", ""))
        return where, f"expected {ctx['expected']}, got {ctx['got']}"
    if kind == "unknown_field":
        return join_field(field, ctx["field"]), "unknown field" + ctx["hint"]
    if kind == "missing":
        return field, "required field missing"
    if kind in _TYPE_WORDS:
        expected = (words or {}).get(kind, _TYPE_WORDS[kind])
    elif kind == "is_instance_of":
        expected = f"a {ctx.get('class')}"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        key = next(k for k in ("gt", "ge", "lt", "le") if k in ctx)
        expected = bound(key, ctx[key])
    elif kind == "literal_error":
        raw = str(ctx.get("expected", ""))
        choices = _choices(raw) or [c.strip() for c in re.split(r",| or ", raw) if c.strip()]
        return field, _one_of(choices, got)
    elif kind == "union_tag_invalid":
        where = join_field(field, str(ctx.get("discriminator", "")).strip("'"))
        return where, _one_of(_choices(str(ctx.get("expected_tags", ""))), ctx.get("tag"))
    elif kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern")
        expected = _PATTERN_WORDS.get(str(pattern), f"a string matching {pattern}")
    elif kind == "string_too_short":
        need = ctx.get("min_length", 1)
        expected = "a non-empty string" if need == 1 else f"a string of at least {need} characters"
    elif kind == "too_short":
        need = ctx.get("min_length", 1)
        expected = "a non-empty list" if need == 1 else f"a list of at least {need} items"
    elif kind == "too_long":
        expected = f"a list of at most {ctx.get('max_length')} items"
    else:
        return field, f"{err['msg']}, got {describe_value(got)}"
    return field, f"expected {expected}, got {describe_value(got)}"


def parse_scalar(raw: str) -> Any:
    """An override's value as YAML reads it (``500`` a number, ``[http]`` a list); text else."""
    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


def kind_of(value: Any) -> str:
    """A received value that may be a list: ``a list [1, 2]`` (``nothing`` for null)."""
    if value is None:
        return "nothing"
    if isinstance(value, list):
        return f"a list {describe_value(value)}"
    return describe_value(value)


def set_override(data: dict[str, Any], parts: list[str], raw: str) -> None:
    """Set ``data`` at the path ``parts`` to the YAML value ``raw`` (one ``--set``).

    Missing mappings on the way are created; a list is entered by index.  Raises
    :class:`ValueError` with the message in the project's wording.
    """
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        here = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ValueError(
                    f"expected an index below {len(node)} into {'.'.join(parts[:depth])}, "
                    f"got {part!r}"
                )
            child = node[int(part)]
        elif isinstance(node, dict):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
        else:
            break
        if not isinstance(child, dict | list):
            raise ValueError(
                f"expected a mapping at {here} to set a field in, got {kind_of(child)}"
            )
        node = child
    last = parts[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ValueError(f"expected an index below {len(node)}, got {last!r}")
        node[int(last)] = parse_scalar(raw)
    else:
        node[last] = parse_scalar(raw)
