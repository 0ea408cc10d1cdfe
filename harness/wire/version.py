"""This loopbench's version: what ``--version`` prints and what a Locust master and its workers
compare before they trust each other's messages."""

from __future__ import annotations

import sys
from importlib import metadata


def loopbench_version() -> str:
    """The installed distribution's version; the source tree's when run from a checkout only."""
    try:
        return metadata.version("loopbench")
    except metadata.PackageNotFoundError:
        # A checkout on sys.path without `pip install -e .`; harness is imported (we are in it).
        return str(getattr(sys.modules.get("harness"), "__version__", "unknown"))
