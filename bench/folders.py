"""A bench's output folder, emptied for one run's files (never a mix of two runs)."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.wire.errors import LoopbenchError


def fresh_folder(
    folder: Path, *, marker: str, option: str, made_by: str, error: type[LoopbenchError]
) -> None:
    """Empty ``folder`` for ``made_by`` (a ``python -m`` module).

    Only a folder it made (one holding ``marker``) or an empty one is emptied: a mistyped
    ``option`` must not delete somebody's files; ``error`` says so instead.
    """
    if folder.exists():
        if any(folder.iterdir()) and not (folder / marker).exists():
            raise error(
                f"{option} {folder}: the folder exists and was not made by python -m "
                f"{made_by} (no {marker} file in it); name a new or empty folder"
            )
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / marker).write_text(f"made by python -m {made_by}; emptied on each run\n")
