"""The scenarios shipped inside the package, found by name.

They live in the checkout's top-level ``scenarios/`` folder, which the wheel installs as
``harness/scenarios/`` (pyproject.toml's package-dir), so an installed loopbench has them
wherever it runs: ``loopbench run quickstart`` needs no checkout.  Names are the file stems
(``tiny``), and ``reproduce/NAME`` for the reproduction set.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]
# Installed from the wheel: inside the package.  A checkout (an editable install, or the
# sources on the path): the top-level folder itself, beside the package.
BUILTIN_DIR = next(
    (d for d in (_PACKAGE / "scenarios", _PACKAGE.parent / "scenarios") if d.is_dir()),
    _PACKAGE / "scenarios",
)
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
    # Docs and issues write the path in the checkout (scenarios/quickstart.yaml, or the older
    # harness/scenarios/quickstart.yaml); asked from any folder where no such file exists, it
    # means the built-in.
    for prefix in ("harness/scenarios/", "scenarios/"):
        key = key.removeprefix(prefix)
    return builtin_scenarios().get(key)


def looks_like_path(name: str | os.PathLike[str]) -> bool:
    """Whether ``name`` is written as a file: with a folder (``./tiny``, ``a/b``), absolute,
    or with a YAML suffix.  A bare word (``tiny``) is a scenario's name: it means the built-in
    even when the working folder has an entry of that name (issue 38)."""
    text = os.fspath(name)
    return (
        "/" in text
        or os.sep in text
        or text.startswith(".")
        or os.path.isabs(text)
        or text.endswith((".yaml", ".yml"))
    )


def builtin_hint(name: str) -> str:
    """`` (did you mean 'quickstart'?)`` for a name a built-in is close to, else ``""``."""
    found = builtin_scenarios()
    # A path from older docs (scenarios/tiny.yaml) or another checkout names the built-in
    # by its stem; otherwise a typo (quikstart) is most often a letter or two off.
    stem = os.path.splitext(os.path.basename(name))[0]
    if stem in found and stem != name:
        return f" (did you mean {stem!r}?)"
    close = difflib.get_close_matches(name.removesuffix(".yaml"), list(found), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def shadowed_entries(path: str | os.PathLike[str]) -> list[str]:
    """The entries of the working folder a bare built-in name did not run: ``tiny`` or
    ``tiny.yaml`` beside ``loopbench run tiny`` (the caller tells the user, who may have meant
    them)."""
    source = os.fspath(path)
    if looks_like_path(source) or builtin_path(source) is None:
        return []
    return [name for name in (source, f"{source}.yaml", f"{source}.yml") if os.path.exists(name)]


def shadowed_note(path: str | os.PathLike[str]) -> str | None:
    """One line for the console when :func:`shadowed_entries` found any, else None."""
    found = shadowed_entries(path)
    if not found:
        return None
    local = " and ".join(
        f"the {'folder' if os.path.isdir(name) else 'file'} ./{name}" for name in found
    )
    return (
        f"{os.fspath(path)!r} is the built-in scenario; {local} here "
        f"{'was' if len(found) == 1 else 'were'} not used (write ./{found[-1]} to run a local file)"
    )
