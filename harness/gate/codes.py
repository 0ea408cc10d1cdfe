"""Exit codes of ``loopbench gate``: the shared table (harness/wire/exit_codes.py) by the gate's names."""

from __future__ import annotations

from harness.wire.exit_codes import ExitCode

EXIT_PASS = ExitCode.OK
EXIT_REGRESSION = ExitCode.REGRESSION
EXIT_SLO = ExitCode.SLO_BREACH
EXIT_INVALID = ExitCode.INVALID
EXIT_USAGE = ExitCode.USAGE

VERDICTS: dict[int, str] = {
    EXIT_PASS: "pass",
    EXIT_REGRESSION: "regression",
    EXIT_SLO: "SLO breach",
    EXIT_INVALID: "invalid or not comparable",
}
