"""Options declared on dataclass fields: flag, help and check in the field's metadata.

``reference_server/core/config.py`` declares each server option once with
:func:`setting`; :func:`validate` (its ``__post_init__``) checks every field
against its declared type, choices and check, and ``reference_server/cli.py``
reads the same declarations (:func:`declared`) to build the command line.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from harness.wire.errors import LoopbenchError

# What a value must be, as a phrase ("an integer >= 1"), or None when it is fine.
Check = Callable[[Any], str | None]


class ServerConfigError(LoopbenchError):
    """A server option has a bad value.

    ``str(err)``: ``max_body_bytes (--max-body-bytes): expected an integer >= 1, got 0``;
    ``detail`` is the part after the option's names.
    """

    def __init__(self, name: str, flag: str | None, expected: str, got: Any) -> None:
        self.name = name
        self.flag = flag
        self.expected = expected
        self.got = got
        self.detail = f"expected {expected}, got {_shown(got)}"
        super().__init__(f"{name} ({flag}): {self.detail}" if flag else f"{name}: {self.detail}")


@dataclass(frozen=True, slots=True)
class Option:
    """How one field appears on the command line, and what its value must be."""

    flag: str | None  # None: set by the program, not by the user
    help: str
    group: str = ""  # the section of --help ("": the general options)
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    check: Check | None = None


def setting(
    default: Any = MISSING,
    flag: str | None = None,
    *,
    help: str,
    factory: Callable[[], Any] | None = None,
    group: str = "",
    metavar: str | None = None,
    choices: tuple[str, ...] = (),
    check: Check | None = None,
) -> Any:
    """A dataclass field declaring one option: its default (or ``factory``) and its :class:`Option`."""
    meta = {"option": Option(flag, help, group, metavar, choices, check)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def at_least(n: int) -> Check:
    return lambda v: None if v >= n else f"an integer >= {n}"


def positive(v: float) -> str | None:
    return None if v > 0 else "a positive number"


def non_negative(v: float) -> str | None:
    return None if v >= 0 else "a number >= 0"


def non_empty(v: str) -> str | None:
    return None if v.strip() else "a non-empty string"


def port_number(v: int) -> str | None:
    return None if 0 <= v <= 65535 else "a port from 0 to 65535"


def close_code(v: int) -> str | None:
    # 1004-1006 are reserved: never sent in a close frame.
    valid = v == 1000 or 1001 <= v <= 1014 or 3000 <= v <= 4999
    return None if valid and v not in (1004, 1005, 1006) else "a WebSocket close code"


Declared = list[tuple[str, Any, Option]]
_DECLARED: dict[type, Declared] = {}  # resolving type hints takes longer than a check


def declared(cls: type) -> Declared:
    """(field name, resolved type, declaration) of every field of ``cls``, in order."""
    if cls not in _DECLARED:
        hints = typing.get_type_hints(cls)
        _DECLARED[cls] = [(f.name, hints[f.name], f.metadata["option"]) for f in fields(cls)]
    return _DECLARED[cls]


def default_value(cls: type, name: str) -> Any:
    f = cls.__dataclass_fields__[name]  # type: ignore[attr-defined]
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def validate(instance: Any) -> None:
    """Raise :class:`ServerConfigError` for the first field that is not what it declares."""
    for name, hint, opt in declared(type(instance)):
        value = getattr(instance, name)
        expected = _type_problem(hint, value)
        if expected is None and value is not None:
            if opt.choices and value not in opt.choices:
                expected = "one of " + ", ".join(opt.choices)
            elif opt.check is not None:
                expected = opt.check(value)
        if expected is not None:
            raise ServerConfigError(name, opt.flag, expected, value)


def _type_problem(hint: Any, value: Any) -> str | None:
    """What ``value`` should have been if it is not of the declared type, else None."""
    args = typing.get_args(hint)
    if type(None) in args:
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint) or hint
    if hint is bool:
        return None if isinstance(value, bool) else "true or false"
    if isinstance(value, bool):  # bool is an int subclass: never a number here
        return _type_name(origin)
    if hint is float:
        return None if isinstance(value, int | float) and value == value else "a number"
    if origin is tuple:
        ok = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
        return None if ok else "a tuple of strings"
    if origin is dict:
        ok = isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
        return None if ok else "a mapping of strings to strings"
    return None if isinstance(value, origin) else _type_name(origin)


def _type_name(cls: type) -> str:
    return {int: "an integer", str: "a string"}.get(cls, f"a {cls.__name__}")


def _shown(value: Any) -> str:
    if value is None:
        return "nothing"
    return repr(value) if isinstance(value, str) else str(value)
