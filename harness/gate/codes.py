"""Exit codes of ``loopbench gate``: the gate's contract with CI (docs/ci.md)."""

from __future__ import annotations

EXIT_PASS = 0
EXIT_REGRESSION = 1
EXIT_SLO = 2
EXIT_INVALID = 3
EXIT_USAGE = 4

VERDICTS = {
    EXIT_PASS: "pass",
    EXIT_REGRESSION: "regression",
    EXIT_SLO: "SLO breach",
    EXIT_INVALID: "invalid or not comparable",
}
