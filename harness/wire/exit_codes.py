"""The exit codes of every ``loopbench`` subcommand: one table, the contract with CI scripts.

A CI job reads the code, not the text: 3 means "re-measure", so nothing that a re-run
cannot fix (a typo, a dead target) may exit 3.
"""

from __future__ import annotations

import argparse
import sys
from enum import IntEnum
from typing import NoReturn


class ExitCode(IntEnum):
    OK = 0
    REGRESSION = 1
    SLO_BREACH = 2
    INVALID = 3
    USAGE = 4
    INTERRUPTED = 130


#: (code, meaning) in the order ``loopbench --help`` and README list them
EXIT_CODE_TABLE: tuple[tuple[ExitCode, str], ...] = (
    (ExitCode.OK, "ok"),
    (ExitCode.REGRESSION, "regression against the baseline"),
    (ExitCode.SLO_BREACH, "SLO breach (or a minimum speedup not met)"),
    (
        ExitCode.INVALID,
        "invalid run or not comparable: re-measure (error rate, overloaded client, too few "
        "samples; a recording whose trace misses exchanges)",
    ),
    (
        ExitCode.USAGE,
        "usage or input error: bad file, bad flag, unknown transport, target unreachable "
        "before any measurement; a results file that cannot be written (disk full)",
    ),
    (
        ExitCode.INTERRUPTED,
        "interrupted (Ctrl-C / SIGTERM), by every subcommand: a run writes its partial "
        "results, record its trace; serve drains first",
    ),
)


def exit_code_help() -> str:
    """The table as ``--help`` rows: ``  CODE  meaning``."""
    return "\n".join(f"  {int(code):<3}  {meaning}" for code, meaning in EXIT_CODE_TABLE)


class UsageParser(argparse.ArgumentParser):
    """argparse, except that an argument error exits :attr:`ExitCode.USAGE` (4), not 2.

    To a CI script 2 is an SLO breach: every entry point that parses arguments (``loopbench``,
    ``python -m reference_server``, the tools ``make`` runs) uses this one.
    """

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message}\n")
