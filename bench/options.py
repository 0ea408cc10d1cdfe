"""A bench's options dataclass filled from its parsed command line (or from another one's)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def options_from(cls: type[T], source: object, **overrides: Any) -> T:
    """``cls`` with each field that ``source`` has an attribute of the same name for
    (``--output-tokens`` parses to ``output_tokens``) taken from it, ``overrides`` on top,
    and the rest left at their defaults."""
    given = {
        f.name: getattr(source, f.name)
        for f in fields(cls)  # type: ignore[arg-type]
        if f.init and hasattr(source, f.name)
    }
    return cls(**{**given, **overrides})
