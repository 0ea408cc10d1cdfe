"""SIGTERM stops a command as Ctrl-C does: the exit-code table's 130 for both."""

from __future__ import annotations

import signal


def sigterm_as_sigint() -> None:
    """From now on SIGTERM stops this process the way Ctrl-C does.

    asyncio's runner turns SIGINT into a cancellation of its main task, and a command's
    ``finally`` blocks then write what was measured and stop the processes it started; by
    default SIGTERM ends the process at once and leaves both undone (and its children
    running).  For a command's process only: it is never restored.

    A shell without job control starts a background command (``loopbench run … &`` in a
    script or a CI step) with SIGINT ignored; SIGTERM raised as an ignored SIGINT would be
    lost, so SIGINT is given back its default (KeyboardInterrupt) first.

    Only the main thread may set a signal handler: a command called from another thread (a
    test, a library caller) keeps the process's handlers.
    """
    try:
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, lambda signum, frame: signal.raise_signal(signal.SIGINT))
    except ValueError:  # not the main thread
        return
