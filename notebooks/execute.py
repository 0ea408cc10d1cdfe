"""Execute a notebook in place on a results folder, so it is committed with its outputs.

``make notebook`` runs this on the committed baseline: GitHub then shows every table
and plot without anyone running it. Timing metadata is not recorded, so re-executing
on the same run changes only what the run's numbers change.

    python notebooks/execute.py notebooks/transport_comparison.ipynb results/baseline
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.wire.exit_codes import UsageParser


def main(argv: list[str] | None = None) -> int:
    p = UsageParser(description=__doc__.split("\n\n")[0])
    p.add_argument("notebook", type=Path)
    p.add_argument("run", type=Path, help="results folder the notebook reads (LOOPBENCH_RUN)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per cell (default 300)")
    args = p.parse_args(argv)
    if not (args.run / "summary.json").is_file():
        print(
            f"error: {args.run}: expected a finished results folder (summary.json)", file=sys.stderr
        )
        return 4
    # jupyter_core warns about its path migration unless told which scheme to use
    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    import nbformat
    from nbclient import NotebookClient

    here = args.notebook.resolve().parent
    # Relative to the notebook, so no path of this machine ends up in the outputs.
    os.environ["LOOPBENCH_RUN"] = os.path.relpath(args.run.resolve(), here)
    nb = nbformat.read(args.notebook, as_version=4)
    NotebookClient(
        nb,
        kernel_name="python3",
        timeout=args.timeout,
        startup_timeout=60,
        record_timing=False,
        resources={"metadata": {"path": str(here)}},
    ).execute()
    nbformat.write(nb, args.notebook)
    print(f"executed {args.notebook} on {args.run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
