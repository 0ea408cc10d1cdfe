"""How a bench's ``python -m`` entry point ends, the way ``loopbench`` does
(harness/cli/main.py): an error a user can act on in one line and exit 4, Ctrl-C or SIGTERM
130, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

from harness.wire.errors import LoopbenchError
from harness.wire.exit_codes import ExitCode


def exit_code(body: Callable[[], int], *, interrupted: str = "interrupted") -> int:
    """``body()``'s exit code, or the table's for what it raised (``interrupted``: the line
    a Ctrl-C prints)."""
    try:
        return body()
    except LoopbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
