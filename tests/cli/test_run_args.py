"""``run`` and ``sweep`` refuse options that cannot work, naming the option and what it accepts.

Most cases go through the real parser and the check ``cmd_run``/``cmd_sweep`` make first;
one goes through the CLI in a subprocess to show that nothing is begun (no results folder).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli.main import build_parser
from harness.cli.run_args import check_run_args, check_sweep_args
from harness.run.embedded import embedded_server
from harness.wire.errors import UsageError
from tests.runs import TINY, in_process, loopbench

ALL = "http, chat, messages, http-chained, ws, ws-store, ws-append"


def _refusal(check: Callable[[argparse.Namespace], object], *argv: str) -> str:
    args = build_parser().parse_args(list(argv))
    with pytest.raises(UsageError) as exc:
        check(args)
    return str(exc.value)


def _run_error(*argv: str) -> str:
    return _refusal(check_run_args, "run", str(TINY), *argv)


def _sweep_error(*argv: str) -> str:
    return _refusal(check_sweep_args, "sweep", str(TINY), "--set", "load.concurrency=1,2", *argv)


def _search_error(*argv: str) -> str:
    return _refusal(check_sweep_args, "sweep", str(TINY), "--search", "goodput", *argv)


def test_the_registry_order_is_what_the_messages_list() -> None:
    from harness.wire.transports import TRANSPORT_NAMES

    assert ", ".join(TRANSPORT_NAMES) == ALL


def test_baseline_must_be_one_of_the_runs_transports() -> None:
    assert _run_error("--transports", "http,ws", "--baseline", "foo") == (
        "--baseline foo: expected one of the run's transports: http, ws"
    )
    # a transport, but not one this run measures
    assert _run_error("--transports", "http,ws", "--baseline", "ws-store") == (
        "--baseline ws-store: expected one of the run's transports: http, ws"
    )
    # without --transports, the scenario's (tiny.yaml: http, ws), after --set
    assert _run_error("--baseline", "foo") == (
        "--baseline foo: expected one of the run's transports: http, ws"
    )
    assert _run_error("--set", "transports=[ws,ws-store]", "--baseline", "http") == (
        "--baseline http: expected one of the run's transports: ws, ws-store"
    )


def test_a_baseline_among_the_transports_passes() -> None:
    for argv in (
        ["--baseline", "ws"],
        ["--transports", "ws,ws-store", "--baseline", "ws-store"],
        ["--transports", " http , ws ", "--procs", "2", "--request-timeout-s", "0.5"],
        [],
    ):
        check_run_args(build_parser().parse_args(["run", str(TINY), *argv]))


@pytest.mark.parametrize("procs", ["0", "-3"])
def test_procs_must_be_positive(procs: str) -> None:
    assert _run_error("--procs", procs) == (
        f"--procs: expected a positive number of client processes, got {procs}"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "--transports '': no transport named; "),
        (",", "--transports ',': no transport named; "),
        (" , ", "--transports ' , ': no transport named; "),
        ("http,", "--transports 'http,': an empty name between commas; "),
        ("http,foo", "--transports 'http,foo': unknown transport 'foo'; "),
    ],
)
def test_transports_must_name_known_transports(value: str, message: str) -> None:
    expected = f"{message}expected one or more of {ALL}, separated by commas"
    assert _run_error("--transports", value) == expected
    assert _sweep_error("--transports", value) == expected


def test_a_transport_named_twice_is_refused() -> None:
    assert _run_error("--transports", "ws,http,ws") == (
        "--transports 'ws,http,ws': ws named more than once"
    )


@pytest.mark.parametrize("timeout", ["0", "-1", "nan"])
def test_request_timeout_must_be_positive(timeout: str) -> None:
    expected = f"--request-timeout-s: expected a positive number of seconds, got {float(timeout)}"
    assert _run_error("--request-timeout-s", timeout) == expected
    assert _sweep_error("--request-timeout-s", timeout) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--server-metrics-interval", "0"],
            "--server-metrics-interval: expected a positive number of seconds, got 0.0",
        ),
        (
            ["--server-metrics", "127.0.0.1:8000/metrics"],
            "--server-metrics 127.0.0.1:8000/metrics: expected an http:// or https:// URL",
        ),
        (
            ["--server-metrics", "http://h/metrics", "--no-server-metrics"],
            "--no-server-metrics: cannot go with --server-metrics http://h/metrics",
        ),
    ],
)
def test_server_metrics_options_are_checked(argv: list[str], message: str) -> None:
    assert _run_error(*argv).startswith(message)
    assert _sweep_error(*argv).startswith(message)


def test_sweep_baseline_must_be_in_every_variant() -> None:
    assert _sweep_error("--transports", "http,ws", "--baseline", "foo") == (
        "--baseline foo: expected one of the run's transports: http, ws"
    )
    # sweeping the transports themselves: the second variant lacks http
    args = build_parser().parse_args(
        ["sweep", str(TINY), "--set", "transports=[http,ws],[ws]", "--baseline", "http"]
    )
    with pytest.raises(UsageError) as exc:
        check_sweep_args(args)
    assert str(exc.value) == "--baseline http: expected one of the run's transports: ws"
    check_sweep_args(
        build_parser().parse_args(
            ["sweep", str(TINY), "--set", "transports=[http,ws],[ws]", "--baseline", "ws"]
        )
    )


def test_the_cli_refuses_before_beginning_anything(tmp_path: Path) -> None:
    proc = loopbench(
        "run", TINY, "--baseline", "foo", "--transports", "http,ws", "--out", str(tmp_path), "-q"
    )
    assert proc.returncode != 0
    assert "--baseline foo: expected one of the run's transports: http, ws" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_sweep_passes_the_client_options_to_each_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with embedded_server(extra_args=["--api-key", "sk-sweep-test"]) as url:
        argv = [
            "sweep", TINY, "--target", url, "--set", "load.concurrency=1,2",
            "--set", "rollout.count=1", "--set", "transports=[http]", "--out", str(tmp_path),
            "-q", "--no-keepalive", "--no-hints", "--insecure", "--request-timeout-s", "30",
            "--recover-from", "compacted",
            "--server-metrics", url.removesuffix("/v1") + "/metrics",
            "--server-metrics-interval", "0.2", "--header", "X-Sweep: 1",
            "--extra-body", '{"temperature": 0.5}', "--rx-stamp", "user",
        ]  # fmt: skip
        # This server refuses any other key (401): every turn succeeds only if the key is sent.
        monkeypatch.setenv("LOOPBENCH_TEST_KEY", "sk-sweep-test")
        # In process and without the reports: what reaches each run is the sweep's doing,
        # not the process's (the CLI sweep as a process: test_goodput_search)
        code, out = in_process(
            *argv, "--sweep-id", "sw", "--api-key-env", "LOOPBENCH_TEST_KEY", report=False
        )
        assert code == 0, out
        for run in ("00-concurrency-1", "01-concurrency-2"):
            folder = tmp_path / "sw" / run
            manifest = json.loads((folder / "manifest.json").read_text())
            assert manifest["client_options"] == {
                "hints": False,
                "keepalive": False,
                "verify_tls": False,
                "request_timeout_s": 30.0,
                "recover_from": "compacted",
                "tokenizer": "4-chars",
                "shaping": {
                    "headers": ["X-Sweep"],
                    "session_header": None,
                    "extra_body": {
                        api: {"temperature": 0.5} for api in ("responses", "chat", "messages")
                    },
                },
                "rx_stamp": "user",
                "rx_stamp_option": "user",
            }
            turns = json.loads((folder / "summary.json").read_text())["transports"]["http"]["turns"]
            assert turns["count"] > 0 and turns["errors"] == 0
            # --server-metrics reached every run of the sweep, each with its own file
            assert (folder / "server_metrics.csv.gz").exists()
        monkeypatch.delenv("LOOPBENCH_TEST_KEY")
        code, out = in_process(*argv, "--sweep-id", "sw2", "--api-key-env", "LOOPBENCH_TEST_KEY")
    assert code != 0
    assert "--api-key-env: environment variable LOOPBENCH_TEST_KEY is not set" in out


def test_slo_flag_becomes_overrides_and_refuses_what_it_cannot_read() -> None:
    from harness.cli.run_args import scenario_sets, slo_sets

    assert slo_sets("ttft_ms=500, turn_ms=2000") == ["slo.ttft_ms=500.0", "slo.turn_ms=2000.0"]
    args = build_parser().parse_args(["run", str(TINY), "--slo", "rollout_ms=9000"])
    assert scenario_sets(args) == ["slo.rollout_ms=9000.0"]
    expected = "expected FIELD=MS pairs separated by commas, FIELD one of ttft_ms, ttfot_ms, "
    assert expected in _run_error("--slo", "ttft=500")
    assert "ttft_ms: expected FIELD=MS" in _run_error("--slo", "ttft_ms=-1")
    assert "got 'fast'" in _run_error("--slo", "ttft_ms=fast")
    assert _run_error("--slo", "ttft_ms=1,ttft_ms=2") == (
        "--slo 'ttft_ms=1,ttft_ms=2': ttft_ms given twice"
    )


def test_goodput_search_options_are_checked_before_anything_runs() -> None:
    assert "with --search the load is chosen by the search" in _search_error(
        "--set", "load.concurrency=1,2"
    )
    assert _search_error("--target-attainment", "1.5") == (
        "--target-attainment: expected a share above 0 and at most 1, e.g. 0.99, got 1.5"
    )
    assert _search_error("--start", "8", "--max-load", "4") == (
        "--max-load: expected a load at least --start (8), got 4"
    )
    assert "--max-steps: expected a positive number" in _search_error("--max-steps", "0")
    assert "--baseline: not used with --search" in _search_error("--baseline", "http")
    # a sweep without --search still needs its swept values
    args = build_parser().parse_args(["sweep", str(TINY)])
    with pytest.raises(UsageError, match="expected --set KEY=V1,V2"):
        check_sweep_args(args)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--target-attainment", "0.9"),
        ("--search-param", "load.concurrency"),
        ("--start", "1"),
        ("--max-load", "64"),
        ("--max-steps", "3"),
        ("--rollouts-per-agent", "2"),
        ("--pass-rule", "point"),
    ],
)
def test_search_options_without_search_are_refused(option: str, value: str) -> None:
    # even the default value: a sweep that silently ignored it would not be what was asked
    assert _sweep_error(option, value) == (
        f"{option}: only used by the goodput search; add --search goodput, or drop it"
    )
    if option != "--pass-rule":
        both = _sweep_error(option, value, "--pass-rule", "ci-lower")
        assert both == (
            f"{option}, --pass-rule: only used by the goodput search; add --search goodput, or "
            "drop them"
        )


def test_a_search_without_slo_or_of_a_field_that_is_not_the_load_is_refused(
    tmp_path: Path,
) -> None:
    from harness.run.goodput import check_search_scenario
    from harness.workload.scenario import load_scenario

    closed = load_scenario(str(TINY), {"slo.ttft_ms": "500"})
    check_search_scenario(closed, "load.concurrency", "tiny.yaml")
    with pytest.raises(UsageError) as exc:
        check_search_scenario(load_scenario(str(TINY)), "load.concurrency", "tiny.yaml")
    assert str(exc.value) == (
        "--search goodput: tiny.yaml sets no SLO threshold (no slo: section and no --slo), so "
        "every successful rollout would count as good at any load; give one, e.g. "
        "--slo ttft_ms=500"
    )
    with pytest.raises(UsageError) as exc:
        check_search_scenario(closed, "rollout.count", "tiny.yaml")
    assert str(exc.value) == (
        "--search-param rollout.count: expected the offered load, one of load.concurrency, "
        "load.arrival.rate, load.throughput.tps (the one for the scenario's load.mode)"
    )
    with pytest.raises(UsageError) as exc:
        check_search_scenario(closed, "load.throughput.tps", "tiny.yaml")
    assert str(exc.value) == (
        "--search-param load.throughput.tps: drives a load.mode: throughput scenario, and "
        "tiny.yaml has load.mode: closed; search load.concurrency or set load.mode=throughput"
    )
    # The command refuses with the usage exit code, before any run folder exists.
    for argv in (["--max-load", "2"], ["--slo", "ttft_ms=500", "--search-param", "seed"]):
        code, out = in_process("sweep", TINY, "--search", "goodput", *argv, "--out", tmp_path, "-q")
        assert code == 4, out
        assert "--search" in out and "Traceback" not in out
        assert list(tmp_path.iterdir()) == []
