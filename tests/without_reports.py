"""``loopbench`` without rendering run and sweep reports, for tests that read only a run's files.

The plots are most of a small run's CPU.  :func:`no_reports` stubs the renderer where the
runner, the sweep and ``--procs`` call it; ``python -m tests.without_reports ARGS`` is
``loopbench ARGS`` in a process of its own under it (for tests whose claim needs the
process: its exit code, its stderr, several runs side by side).  Nothing heavy is imported
here, so that process is a ``loopbench`` process and nothing more.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

#: the modules that render a report after a run (the name each imported it under)
RENDERING = ("harness.run.runner", "harness.run.sweep", "harness.run.procs")


@contextlib.contextmanager
def no_reports() -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for module in RENDERING:
            stack.enter_context(mock.patch(f"{module}.render_run_safely", return_value=None))
        yield


if __name__ == "__main__":
    from harness.cli.main import main

    with no_reports():
        main()
