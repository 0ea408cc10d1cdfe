"""``loopbench`` without rendering run and sweep reports, for tests that read only a run's files.

The plots are most of a small run's CPU.  ``run`` and ``locust`` leave them out by their own
``--no-report`` (:func:`own_flag`); for the commands without it (``sweep``), :func:`no_reports`
stubs the renderer where the runner, the sweep and ``--procs`` call it, and
``python -m tests.without_reports ARGS`` is ``loopbench ARGS`` in a process of its own under it
(for tests whose claim needs the process: its exit code, its stderr, several runs side by
side).  Nothing heavy is imported here, so that process is a ``loopbench`` process and nothing
more.

``python -m tests.without_reports --commands-to-fd FD`` runs many commands in that one process,
one after another (:func:`serve_commands`; the parent's side is ``tests.runs.loopbench_process``).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from unittest import mock

#: the modules that render a report after a run (the name each imported it under)
RENDERING = ("harness.run.runner", "harness.run.sweep", "harness.run.procs")
#: the commands that leave their reports out by a ``--no-report`` of their own
WITH_FLAG = frozenset({"run", "locust"})


def own_flag(argv: list[str]) -> list[str] | None:
    """``argv`` with its command's own ``--no-report``; None for a command without one."""
    return [*argv, "--no-report"] if argv[:1] and argv[0] in WITH_FLAG else None


@contextlib.contextmanager
def no_reports(argv: list[str] | None = None) -> Iterator[list[str] | None]:
    """``argv`` as the command runs it without reports: with its own ``--no-report``, or
    unchanged under a stub of the renderer (a command without the flag; also ``argv=None``,
    the command line of this process)."""
    if argv is not None and (flagged := own_flag(argv)) is not None:
        yield flagged
        return
    with contextlib.ExitStack() as stack:
        for module in RENDERING:
            stack.enter_context(mock.patch(f"{module}.render_run_safely", return_value=None))
        yield argv


def _exit_code(exc: SystemExit, stderr: io.StringIO) -> int:
    # what the interpreter makes of a SystemExit that ends a process
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=stderr)
    return 1


def serve_commands(results_fd: int) -> None:
    """``loopbench`` commands one after another in this process, each without reports: one
    JSON list of arguments a line on stdin, each answered on ``results_fd`` by one JSON line,
    ``[exit code, stdout, stderr]``, as a process of its own would have ended (an uncaught
    exception: its traceback on stderr, exit code 1).  Saves the interpreter start and the
    imports of a process per command (~0.6 s of CPU each)."""
    from harness.cli.main import main

    with os.fdopen(results_fd, "w") as results:
        for line in sys.stdin:
            out, err = io.StringIO(), io.StringIO()
            with no_reports(json.loads(line)) as argv, contextlib.redirect_stdout(out), \
                    contextlib.redirect_stderr(err):  # fmt: skip
                try:
                    main(argv)
                    code = 0
                except SystemExit as exc:
                    code = _exit_code(exc, err)
                except BaseException:
                    traceback.print_exc()
                    code = 1
                code = _as_at_exit(code, err)
            results.write(json.dumps([code, out.getvalue(), err.getvalue()]) + "\n")
            results.flush()


#: the exit code of a command that left what would have kept its own process from ending
LEFT_RUNNING = 70


def _as_at_exit(code: int, err: io.StringIO) -> int:
    """What a process of its own would have shown as it ended: an object whose finaliser
    raises (``Exception ignored in …`` on stderr, through :func:`sys.unraisablehook`, which
    Python calls with the redirected stderr), and a non-daemon thread still running (the
    process would not have exited: :data:`LEFT_RUNNING`)."""
    hook, sys.unraisablehook = sys.unraisablehook, sys.__unraisablehook__
    try:
        gc.collect()
    finally:
        sys.unraisablehook = hook
    alive = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    stuck = [t.name for t in threading.enumerate()
             if t is not threading.main_thread() and not t.daemon]  # fmt: skip
    if stuck:
        print(f"threads left running, the process would not exit: {stuck} (all: {alive})",
              file=err)  # fmt: skip
        return LEFT_RUNNING
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["--commands-to-fd"]:
        serve_commands(int(sys.argv[2]))
    else:
        from harness.cli.main import main

        with no_reports(sys.argv[1:]) as argv:
            main(argv)
