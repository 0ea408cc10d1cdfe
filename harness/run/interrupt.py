"""Ctrl-C during a run: the first stops the measuring, and every record measured is written.

asyncio's runner cancels the main task on the first SIGINT and raises ``KeyboardInterrupt``
wherever the loop happens to be on the second.  That second one cut off the writing of
``summary.json`` and the report halfway, and it is easy to send: an impatient second Ctrl-C
during the seconds the report takes, or ``timeout -s INT``, which signals the process and
then its whole process group, so the run gets SIGINT twice within milliseconds.

So while a run measures and writes its results, SIGINT belongs to the run: the first one
cancels the measuring task and says where what was measured goes; later ones only say that
it is still being written.  Outside a run (set-up, the printed verdict) Ctrl-C is the
interpreter's as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any, TextIO


class RunInterrupts:
    """The SIGINT handler of one run (``loop.add_signal_handler``)."""

    def __init__(self, task: asyncio.Task[Any], run_dir: Path, out: TextIO | None = None) -> None:
        self.task = task
        self.run_dir = run_dir
        self.out = out
        self.count = 0
        self._installed = False
        self._previous: Any = None

    def __call__(self) -> None:
        self.count += 1
        out = self.out or sys.stderr
        if self.count == 1:
            print(
                f"interrupted: stopping; what was measured is being written to {self.run_dir}",
                file=out,
                flush=True,
            )
            self.task.cancel()
        else:
            print(
                f"still writing {self.run_dir} (the turns measured are on disk already)",
                file=out,
                flush=True,
            )

    def install(self) -> RunInterrupts:
        """Take SIGINT for this run, where the loop can (the main thread, a Unix loop)."""
        loop = asyncio.get_running_loop()
        previous = signal.getsignal(signal.SIGINT)
        try:
            loop.add_signal_handler(signal.SIGINT, self)
        except (NotImplementedError, RuntimeError, ValueError):
            return self  # not the main thread, or no signals here: the caller's handling stays
        self._installed, self._previous = True, previous
        return self

    def remove(self) -> None:
        """Give SIGINT back to whoever had it before :meth:`install`."""
        if not self._installed:
            return
        self._installed = False
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
            if self._previous is not None:
                signal.signal(signal.SIGINT, self._previous)
