"""The scenarios shipped inside the package, found by name.

They live in ``harness/scenarios/`` as package data, so an installed loopbench has
them wherever it runs: ``loopbench run quickstart`` needs no checkout.  Names are the
file stems (``tiny``), and ``reproduce/NAME`` for the reproduction set.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["BUILTIN_DIR", "REPRODUCE_DIR", "builtin_path", "builtin_scenarios"]

BUILTIN_DIR = Path(__file__).resolve().parents[1] / "scenarios"
REPRODUCE_DIR = BUILTIN_DIR / "reproduce"


def builtin_scenarios() -> dict[str, Path]:
    """Every built-in scenario by name: the top-level ones first, then ``reproduce/*``."""
    found = {p.stem: p for p in sorted(BUILTIN_DIR.glob("*.yaml"))}
    found.update({f"reproduce/{p.stem}": p for p in sorted(REPRODUCE_DIR.glob("*.yaml"))})
    return found


def builtin_path(name: str | os.PathLike[str]) -> Path | None:
    """The built-in scenario ``name`` (``tiny``, ``tiny.yaml`` or, as the package lays them
    out, ``scenarios/tiny.yaml``) names, or None."""
    key = os.fspath(name).replace(os.sep, "/")
    for suffix in (".yaml", ".yml"):
        key = key.removesuffix(suffix)
    # Docs and issues write the path inside the package (harness/scenarios/quickstart.yaml);
    # asked from any folder where no such file exists, it means the built-in.
    for prefix in ("harness/scenarios/", "scenarios/"):
        key = key.removeprefix(prefix)
    return builtin_scenarios().get(key)
