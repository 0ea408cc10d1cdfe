"""Every row of the exit-code table, reached from a real ``loopbench`` process.

The table (harness/wire/exit_codes.py) is the contract with CI scripts: 3 makes
``examples/ci/gate.sh`` re-measure, so a typo must never exit 3, and argparse's own 2
must never appear (it reads as an SLO breach). 130 (interrupted) is covered by the
run's interruption tests.  The fifteen usage errors are judged on ``main`` in this process
(their messages and codes are ``main``'s); every row and every entry point is still reached
from a real process at least once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.wire.exit_codes import EXIT_CODE_TABLE, ExitCode
from tests.runs import ROOT, in_process, loopbench

BASELINE = ROOT / "results" / "baseline"


def _code(*args: str | Path) -> tuple[int, str]:
    proc = loopbench(*args)
    return proc.returncode, proc.stdout + proc.stderr


def test_0_ok_validate() -> None:
    code, out = _code("validate", "tiny")
    assert code == ExitCode.OK, out


def test_1_regression_gate_self_check(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("self_check:\n  - {transport: ws, statistic: p50, max_ms: 0.001}\n")
    code, out = _code("gate", BASELINE, "--baseline", BASELINE, "--rules", rules)
    assert code == ExitCode.REGRESSION, out
    assert "gate: REGRESSION (exit 1)" in out


def test_2_slo_breach_gate(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("slo:\n  - ws.ttft_ms.p50 < 1\n")
    code, out = _code("gate", BASELINE, "--baseline", BASELINE, "--rules", rules)
    assert code == ExitCode.SLO_BREACH, out


def test_3_not_comparable_gate(tmp_path: Path) -> None:
    cand = tmp_path / "cand"
    shutil.copytree(BASELINE, cand)
    manifest = json.loads((cand / "manifest.json").read_text())
    manifest["seed"] = 6
    (cand / "manifest.json").write_text(json.dumps(manifest))
    code, out = _code("gate", cand, "--baseline", BASELINE)
    assert code == ExitCode.INVALID, out
    assert "seed: baseline 5, candidate 6" in out


#: argv -> what its message must contain
USAGE_ERRORS: list[tuple[tuple[str, ...], str]] = [
    ((), "usage: loopbench"),
    (("--bogus",), "unrecognized arguments: --bogus"),
    (("run", "--bogus", "tiny"), "unrecognized arguments: --bogus"),
    (("run",), "the following arguments are required: scenario"),
    (("validate",), "the following arguments are required: FILE"),
    (("run", "tiny", "--transports", "nope"), "unknown transport 'nope'"),
    (("run", "nope.yaml"), "no scenario file or built-in named 'nope.yaml'"),
    (("validate", "nope.yaml"), "no scenario file or built-in named 'nope.yaml'"),
    (("gate", "results/nope", "--baseline", "results/baseline"), "results/nope: expected"),
    (("compare", "results/nope", "results/baseline"), "results/nope: no such folder"),
    (("report", "results/nope"), "results/nope: expected"),
    (("calibrate", "results/nope"), "results/nope: expected"),
    (("serve", "--port", "99999"), "--port: expected a port from 0 to 65535, got 99999"),
    (("reproduce", "--parts", "nope"), "--parts: unknown part 'nope'"),
    (("schema", "extra"), "unrecognized arguments: extra"),
]


@pytest.mark.parametrize(
    ("argv", "message"),
    USAGE_ERRORS,
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else None,
)
def test_4_usage_or_input_error(argv: tuple[str, ...], message: str) -> None:
    """In-process: the code and message come from ``main``; that a real process exits with
    what ``main`` returns is the subprocess tests' claim (test_0_ok_validate,
    test_validate_of_a_broken_file_exits_4, test_every_entry_point_exits_4_on_a_usage_error_not_2)."""
    code, out = in_process(*argv)
    assert code == ExitCode.USAGE, out
    assert message in out
    assert "Traceback" not in out


def test_validate_of_a_broken_file_exits_4(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nload: {concurrency: -1}\n")
    code, out = _code("validate", "tiny", bad)
    assert code == ExitCode.USAGE, out
    assert "tiny: ok" in out and str(bad) in out


def test_help_lists_the_table_and_version() -> None:
    proc = loopbench("--help")
    assert proc.returncode == 0
    for code, meaning in EXIT_CODE_TABLE:
        assert f"{int(code):<3}  {meaning.split()[0]}" in proc.stdout
    proc = loopbench("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("loopbench ") and proc.stdout.split()[1][0].isdigit()


def test_a_reader_that_leaves_early_is_not_a_failure() -> None:
    # `loopbench scenarios | head -1`: the pipe closes before the listing is written
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "scenarios"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == ExitCode.OK, err
    assert "Traceback" not in err, err


#: every other program the project runs with arguments: the servers, the tools `make` runs
ENTRY_POINTS = [
    ["-m", "reference_server"],
    ["-m", "bench.proxy.bare_relay", "--upstream", "http://127.0.0.1:9/v1"],
    ["-m", "bench.peers"],
    ["-m", "bench.selfbench"],
    ["-m", "bench.proxy"],
    ["-m", "tools.soak"],
    ["-m", "tools.fuzz"],
    ["-m", "bench.selfbench.raw_server"],
    ["-m", "bench.selfbench.lib_server"],
    [str(ROOT / "notebooks" / "execute.py"), "nb.ipynb", "run"],
]


@pytest.mark.parametrize("argv", ENTRY_POINTS, ids=lambda a: a[1] if a[0] == "-m" else "execute")
def test_every_entry_point_exits_4_on_a_usage_error_not_2(argv: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, *argv, "--no-such-flag"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert "error: unrecognized arguments: --no-such-flag" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [["run", "tiny", "--bogus"], ["gate", "--bogus", "x"]])
def test_an_unknown_flag_shows_the_usage_of_its_subcommand(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process: argparse handed a subcommand's unknown flags up to the top-level parser,
    whose usage (``usage: loopbench [-h] [--version] COMMAND``) says nothing of the flag."""
    from harness.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"usage: loopbench {argv[0]} "), err
    assert f"loopbench {argv[0]}: error: unrecognized arguments: --bogus" in err
