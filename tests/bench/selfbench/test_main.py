"""``python -m bench.selfbench``'s arguments: a bad one is a usage error (exit 4) naming it."""

from __future__ import annotations

import pytest

from bench.selfbench.__main__ import main
from harness.wire.exit_codes import ExitCode


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--steps", "nope"], "--steps: expected one or more of throughput, timing"),
        (["--steps", ","], "--steps: expected one or more of"),
        (["--rx-stamp", "nope"], "argument --rx-stamp: invalid choice: 'nope'"),
    ],
)
def test_a_bad_argument_is_a_usage_error_naming_it(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("python -m bench.selfbench: error: "), err
    assert says in err
