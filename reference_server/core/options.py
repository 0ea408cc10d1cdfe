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
from typing import Annotated, Any, Literal

import annotated_types as at
from pydantic import BaseModel, InstanceOf, Strict, TypeAdapter, ValidationError

from harness.wire.errors import LoopbenchError
from harness.wire.validation import describe_error, join_field, shown

#: What a value must be: a bound pydantic checks (``at_least(1)``), or a function giving the
#: phrase for what it should have been ("a WebSocket close code"), or None when it is fine.
Check = at.BaseMetadata | Callable[[Any], str | None]


class ServerConfigError(LoopbenchError):
    """A server option has a bad value.

    ``str(err)``: ``max_body_bytes (--max-body-bytes): expected an integer ≥ 1, got 0``;
    ``detail`` is the part after the option's names.
    """

    def __init__(self, name: str, flag: str | None, detail: str) -> None:
        self.name = name
        self.flag = flag
        self.detail = detail
        super().__init__(f"{name} ({flag}): {detail}" if flag else f"{name}: {detail}")


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
    return at.Ge(n)


positive: Check = at.Gt(0)
non_negative: Check = at.Ge(0)


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
_ADAPTERS: dict[type, list[TypeAdapter[Any]]] = {}


def declared(cls: type) -> Declared:
    """(field name, resolved type, declaration) of every field of ``cls``, in order."""
    if cls not in _DECLARED:
        hints = typing.get_type_hints(cls)
        _DECLARED[cls] = [(f.name, hints[f.name], f.metadata["option"]) for f in fields(cls)]
    return _DECLARED[cls]


def _adapter(hint: Any, opt: Option) -> TypeAdapter[Any]:
    """The declared type, choices and bound as pydantic checks them: strictly, so a config
    built in code is refused what the command line could never have given."""
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    if opt.choices:
        hint = Literal[opt.choices]
    elif isinstance(hint, type) and issubclass(hint, BaseModel):
        hint = InstanceOf[hint]  # type: ignore[misc]  # (an Annotated alias to mypy)
    else:
        hint = Annotated[hint, Strict()]
    if isinstance(opt.check, at.BaseMetadata):
        hint = Annotated[hint, opt.check]
    return TypeAdapter(hint | None if optional else hint)


def default_value(cls: type, name: str) -> Any:
    f = cls.__dataclass_fields__[name]  # type: ignore[attr-defined]
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def validate(instance: Any) -> None:
    """Raise :class:`ServerConfigError` for the first field that is not what it declares."""
    cls = type(instance)
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = [_adapter(hint, opt) for _, hint, opt in declared(cls)]
    for (name, _, opt), adapter in zip(declared(cls), _ADAPTERS[cls], strict=True):
        value = getattr(instance, name)
        try:
            adapter.validate_python(value)
        except ValidationError as exc:
            # a Python tuple is what the command line builds; YAML's word for it is "a list"
            field, message = describe_error(exc.errors()[0], words={"tuple_type": "a tuple"})
            raise ServerConfigError(join_field(name, field), opt.flag, message) from None
        expected = opt.check(value) if callable(opt.check) and value is not None else None
        if expected is not None:
            raise ServerConfigError(name, opt.flag, f"expected {expected}, got {shown(value)}")
