"""Ctrl-C during a run: the first stops the measuring, and every record measured is written.

asyncio's runner cancels the main task on the first SIGINT and raises ``KeyboardInterrupt``
wherever the loop happens to be on the second.  That second one cut the writing of
``summary.json`` and the report off halfway, and it is easy to send: an impatient second
Ctrl-C during the seconds the report takes, or ``timeout -s INT``, which signals the process
and then its whole process group, so the run gets SIGINT twice within milliseconds.

So while a run measures and writes, SIGINT is the run's: the first one cancels the measuring
task and says where what was measured goes; later ones only say it is still being written.
One that arrives only once the writing has begun cancels nothing (the results are whole)
and is raised as ``KeyboardInterrupt`` after the writing, so a command that runs several runs
stops there.

The handler is a plain ``signal.signal`` one, restored to exactly what was there before:
a process that ignores SIGINT (a ``--procs`` child, which its parent stops with SIGTERM)
keeps ignoring it, and a run off the main thread leaves signals to its caller.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO


class RunInterrupts:
    """SIGINT while one run measures (``task``) and writes its results (``run_dir``)."""

    def __init__(self, task: asyncio.Task[Any] | None, run_dir: Path, out: TextIO | None = None):
        self.task = task
        self.run_dir = run_dir
        self.out = out
        self.count = 0
        #: set by the run once it has stopped measuring and writes: a cancel now would cut
        #: the writing's own awaits (closing clients, the last scrape)
        self.writing = False
        self.cancelled = False
        self._installed = False
        self._previous: Any = None

    def __call__(self, signum: int = signal.SIGINT, frame: FrameType | None = None) -> None:
        self.count += 1
        out = self.out or sys.stderr
        if self.count == 1 and not self.writing and self.task is not None:
            print(
                f"interrupted: stopping; what was measured is being written to {self.run_dir}",
                file=out,
                flush=True,
            )
            self.cancelled = True
            self.task.cancel()
            # The loop may sleep in its selector: wake it so the cancel is seen now.
            self.task.get_loop().call_soon_threadsafe(lambda: None)
        else:
            print(
                f"interrupted: still writing {self.run_dir} (the turns measured are on disk)",
                file=out,
                flush=True,
            )

    @property
    def late(self) -> bool:
        """A SIGINT came, but only once the results were being written (nothing was cut)."""
        return self.count > 0 and not self.cancelled

    def __enter__(self) -> RunInterrupts:
        if threading.current_thread() is not threading.main_thread():
            return self
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.SIG_IGN or previous is None:
            # Ignored on purpose (a --procs child), or set from C where it cannot be restored.
            return self
        signal.signal(signal.SIGINT, self)
        self._installed, self._previous = True, previous
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._installed:
            self._installed = False
            signal.signal(signal.SIGINT, self._previous)
