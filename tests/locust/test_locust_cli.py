"""``loopbench locust``: argument checks and the command lines it builds (no processes started)."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.cli.locust import LOCUSTFILE, _report, master_command, worker_command
from harness.cli.main import build_parser, main
from harness.run.locust_options import LOCUST_OPTIONS, locust_transports
from harness.wire.errors import UsageError
from harness.wire.exit_codes import ExitCode
from harness.wire.transports import parse_transports
from harness.workload.scenario import load_scenario
from tests.foreign_http import closed_port
from tests.runs import ROOT, loopbench

TINY = str(ROOT / "scenarios" / "tiny.yaml")


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["locust", *argv])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "a scenario (a YAML file or a built-in name) is required"),
        (["--worker", TINY], "the scenario is read by the master"),
        ([TINY, "--transports", "ws-append"], "'ws-append' is not available under Locust"),
        ([TINY, "--remote-workers", "2"], "give --target"),
        ([TINY, "--workers", "0"], "at least one worker"),
        ([TINY, "--set", "load.concurrency"], "expected KEY=VALUE"),
        ([TINY, "--set", "load.concurrency=-1"], "load.concurrency"),
    ],
)
def test_bad_invocations_fail_with_one_line_before_starting_anything(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["locust", *argv])
    assert exc.value.code == 4
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def _master(args: argparse.Namespace, run_dir: Path, **where: Any) -> list[str]:
    at = {"target": "http://127.0.0.1:1/v1", "embedded": False, "bind_host": "127.0.0.1"}
    return master_command(
        args, run_dir=run_dir, **(at | {"port": 5557, "expect_workers": 1} | where)
    )


def test_the_master_command_carries_the_loopbench_options(tmp_path: Path) -> None:
    args = _args(
        TINY,
        "--workers",
        "3",
        "--run-time",
        "30",
        "--set",
        "load.concurrency=8",
        "--transports",
        "http,ws",
        "--no-keepalive",
        "--api-key-env",
        "KEY",
        "--locust-arg=--stop-timeout=5",
    )
    cmd = _master(args, tmp_path / "r1", embedded=True, port=5999, expect_workers=3)
    assert cmd[1:5] == ["-m", "locust", "-f", str(LOCUSTFILE)]
    pairs = dict(itertools.pairwise(cmd))
    assert pairs["--expect-workers"] == "3" and pairs["--master-bind-port"] == "5999"
    assert (
        pairs["--loopbench-run-time"] == "30.0" and pairs["--loopbench-set"] == "load.concurrency=8"
    )
    assert pairs["--loopbench-out"] == str(tmp_path) and pairs["--loopbench-run-id"] == "r1"
    assert pairs["--csv"] == str(tmp_path / "r1" / "locust")
    assert {"--headless", "--loopbench-no-keepalive", "--loopbench-embedded"} <= set(cmd)
    assert cmd[-1] == "--stop-timeout=5"
    web = _master(_args(TINY, "--web", "--web-port", "8099"), tmp_path / "r2", bind_host="*")
    assert "--headless" not in web and dict(itertools.pairwise(web))["--web-port"] == "8099"
    assert worker_command("10.0.0.5", 5557)[-4:] == [
        "--master-host",
        "10.0.0.5",
        "--master-port",
        "5557",
    ]
    assert LOCUSTFILE.is_file()


def test_every_option_of_the_table_reaches_the_locustfile_as_given(tmp_path: Path) -> None:
    """harness/run/locust_options.py declares both parsers: each public option given to
    `loopbench locust` arrives, typed as given, where the locustfile's parser reads it."""
    argv, expected = [TINY], {}
    for opt in (o for o in LOCUST_OPTIONS if o.public):
        given = {"flag": [], "list": ["a.b=1"]}.get(opt.kind, ["7"])
        argv += [f"--{opt.name}", *given]
        value = {"flag": True, "list": given}.get(opt.kind, opt.type("7"))
        expected[opt.flag.removeprefix("--").replace("-", "_")] = value
    args = _args(*argv)
    cmd = _master(args, Path(args.out) / args.run_id)
    locustfile = argparse.ArgumentParser()
    for opt in LOCUST_OPTIONS:
        # Locust's own keywords (configargparse) aside, the locustfile adds what this adds
        kwargs = opt.locust_kwargs().items()
        locustfile.add_argument(
            opt.flag, **{k: v for k, v in kwargs if k not in ("include_in_web_ui", "env_var")}
        )
    parsed = vars(locustfile.parse_known_args(cmd)[0])
    assert {dest: parsed[dest] for dest in expected} == expected


def test_locusts_own_cli_on_the_locustfile_exits_4_on_a_missing_scenario(tmp_path: Path) -> None:
    # users may drive the locustfile with Locust's own CLI; a usage error there must not exit 2
    # (an SLO breach to a CI script)
    env = {k: v for k, v in os.environ.items() if k != "LOOPBENCH_SCENARIO"}
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
         "--host", f"http://127.0.0.1:{closed_port()}/v1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == ExitCode.USAGE, proc.stderr[-2000:]
    assert "error: --scenario (or LOOPBENCH_SCENARIO): a scenario file is required" in proc.stderr


def test_a_finished_locust_run_is_judged_as_loopbench_run_judges_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Locust's own code 1 ("a request failed") must not hide an invalid run, nor fail a valid one
    assert _report(ROOT / "results" / "baseline", 1) == ExitCode.OK
    dead = loopbench(
        "run", "tiny", "--target", f"http://127.0.0.1:{closed_port()}/v1", "--no-probe", "--out", tmp_path,
        "--run-id", "dead", "-q", report=False,
    )  # fmt: skip
    assert dead.returncode == ExitCode.INVALID, dead.stderr
    capsys.readouterr()
    assert _report(tmp_path / "dead", 1) == ExitCode.INVALID
    # as `loopbench run` says it: the reasons once, in the first line
    out = capsys.readouterr().out
    reasons = json.loads((tmp_path / "dead" / "summary.json").read_text())["invalid_reasons"]
    assert out.splitlines()[0] == "run INVALID: " + "; ".join(reasons)
    printed = " ".join(out.split())
    assert all(printed.count(" ".join(r.split())) == 1 for r in reasons), out
    assert _report(tmp_path / "dead", 130) == ExitCode.INTERRUPTED


@pytest.mark.parametrize("listed", ["ws,,http", "http,nope", "http,http"])
def test_the_locustfile_reads_transports_by_the_one_rule_of_run(listed: str) -> None:
    """`locust -f` (through ``locust_transports``) and `loopbench run` refuse the same
    ``--transports`` with the same words: one reader of the flag."""
    scenario = load_scenario("quickstart")
    with pytest.raises(UsageError) as run_side:
        parse_transports(listed)
    with pytest.raises(UsageError) as locust_side:
        locust_transports(listed, scenario)
    assert str(locust_side.value) == str(run_side.value)
    assert locust_transports("", scenario) == list(scenario.transports)
