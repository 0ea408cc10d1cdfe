"""``--tokenizer``: a Hugging Face tokenizer from a file or the local cache, never downloaded.

Loading a tokenizer reads files, so it is this edge's business; what the run gets
is a pure :class:`~harness.wire.tokens.CountedTokens` (the text generator and the
stream's counter do not know where the tokenizer came from).

A name is looked up the way ``huggingface_hub`` lays out its cache, without it:
``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; in it
``models--ORG--NAME/snapshots/<revision>/tokenizer.json``, the revision ``refs/main``
names first.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from harness.wire.errors import UsageError
from harness.wire.tokens import CountedTokens

TOKENIZER_FILE = "tokenizer.json"


class TokenizerCounter:
    """``len(encode(text))`` without special tokens; picklable, for ``--procs`` children."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def hf_cache_dir() -> Path:
    """Where the local Hugging Face hub cache is (it may not exist)."""
    hub = os.environ.get("HF_HUB_CACHE")
    if hub:
        return Path(hub).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def cached_tokenizer_file(name: str, cache: Path) -> Path | None:
    """``tokenizer.json`` of model ``name`` (``org/model``) in the hub cache, or None."""
    folder = cache / ("models--" + name.replace("/", "--"))
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        return None
    order: list[Path] = []
    ref = folder / "refs" / "main"
    if ref.is_file():
        order.append(snapshots / ref.read_text(encoding="utf-8").strip())
    order.extend(sorted(p for p in snapshots.iterdir() if p.is_dir()))
    for snapshot in order:
        candidate = snapshot / TOKENIZER_FILE
        if candidate.is_file():
            return candidate
    return None


def resolve_tokenizer_file(
    spec: str, relative_to: Path | None = None, what: str = "--tokenizer"
) -> Path:
    """The ``tokenizer.json`` that ``spec`` names: a file, a folder holding one, or a cached
    model name; a :class:`UsageError` saying where it looked otherwise."""
    path = Path(spec).expanduser()
    if not path.is_absolute() and relative_to is not None and (relative_to / path).exists():
        path = relative_to / path
    if path.is_file():
        return path
    if path.is_dir():
        inside = path / TOKENIZER_FILE
        if inside.is_file():
            return inside
        raise UsageError(f"{what} {spec}: the folder {path} holds no {TOKENIZER_FILE}")
    cache = hf_cache_dir()
    found = cached_tokenizer_file(spec, cache)
    if found is not None:
        return found
    raise UsageError(
        f"{what} {spec}: not a {TOKENIZER_FILE} file or folder, and no {TOKENIZER_FILE} of a "
        f"model named {spec} in the local Hugging Face cache ({cache / ('models--' + spec.replace('/', '--'))}); "
        "loopbench never downloads: give the path of a tokenizer.json, or fetch the model "
        "into the cache first (set HF_HUB_CACHE or HF_HOME if your cache is elsewhere)"
    )


@lru_cache(maxsize=8)
def _load(path: str) -> Tokenizer:
    return Tokenizer.from_file(path)


def load_tokens(
    spec: str, relative_to: Path | None = None, what: str = "--tokenizer", name: str | None = None
) -> CountedTokens:
    """The token convention of the tokenizer ``spec`` names (see :func:`resolve_tokenizer_file`);
    ``name`` is what the manifest calls it (default: ``spec``)."""
    path = resolve_tokenizer_file(spec, relative_to, what)
    try:
        tokenizer = _load(str(path))
    except Exception as exc:  # the tokenizers library raises a bare Exception on a bad file
        raise UsageError(
            f"{what} {spec}: {path} is not a Hugging Face tokenizer file ({exc})"
        ) from None
    return CountedTokens(name or spec, TokenizerCounter(tokenizer))
