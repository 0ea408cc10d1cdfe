"""A Locust master and worker of different loopbench versions refuse each other in one line.

Before, a worker read the master's run settings straight into ``RunConfig``: another
version's fields came out as a raw pydantic ``ValidationError`` naming a field.  Now both
sides say their loopbench version and wire format first (the run settings, the hello) and a
mismatch is one line naming both and what to do, with the usage exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.cli.locust import _free_port, worker_command
from harness.client.options import ClientSettings
from harness.locust_driver.master import MasterOptions, MasterSide
from harness.locust_driver.protocol import (
    MSG_HELLO,
    WIRE_FORMAT,
    RunConfig,
    VersionMismatch,
    hello_message,
)
from harness.locust_driver.worker import WorkerSide, edge_begin
from harness.wire.credentials import PLACEHOLDER_API_KEY
from harness.wire.exit_codes import ExitCode
from harness.wire.version import loopbench_version
from harness.workload.scenario import load_scenario
from tests.foreign_http import closed_port
from tests.runs import locust_master_argv

MINE = loopbench_version()


def _worker() -> tuple[WorkerSide, list[tuple[str, dict[str, Any]]]]:
    sent: list[tuple[str, dict[str, Any]]] = []
    return WorkerSide(lambda kind, data: sent.append((kind, data)), lambda **kw: None), sent


def _settings(**change: Any) -> dict[str, Any]:
    wire = RunConfig("r1", "http://127.0.0.1:9/v1", "m", 0, loopbench=MINE).to_wire()
    wire.update(change)
    return wire


def test_a_worker_reads_settings_of_its_own_version() -> None:
    side, sent = _worker()
    assert side.read_config(_settings()).run_id == "r1"
    assert sent == []


def test_a_worker_reads_the_api_key_from_its_own_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The settings reach the workers whole, but the key is not among them: each worker reads
    the variable ``--loopbench-api-key-env`` names."""
    config = RunConfig("r", "http://x/v1", "m", 0, client=ClientSettings(keepalive=False))
    assert config.to_wire()["client"]["api_key"] == PLACEHOLDER_API_KEY
    monkeypatch.setenv("LB_TEST_KEY", "sk-worker")
    begin = edge_begin(replace(config, api_key_env="LB_TEST_KEY"))
    assert (begin.options.api_key, begin.options.keepalive) == ("sk-worker", False)
    assert edge_begin(config).options.api_key == PLACEHOLDER_API_KEY


def test_a_worker_refuses_an_older_masters_settings_in_one_line_naming_both() -> None:
    side, sent = _worker()
    # an older master: no versions, and a field of another shape (the raw ValidationError before)
    old = _settings(shaping="none")
    del old["loopbench"], old["wire_format"]
    with pytest.raises(VersionMismatch) as err:
        side.read_config(old)
    line = str(err.value)
    assert "\n" not in line
    assert line == (
        "the master has a loopbench older than this one (its messages carry no version), "
        f"this worker loopbench {MINE} (wire format {WIRE_FORMAT}): install the same loopbench "
        "version on the master and every worker"
    )
    # the master hears why: a hello with this worker's versions
    assert sent == [(MSG_HELLO, hello_message("r1", os.getpid(), MINE))]
    assert sent[0][1]["loopbench"] == MINE and sent[0][1]["wire_format"] == WIRE_FORMAT


def test_a_worker_refuses_a_newer_master_even_when_its_fields_would_read() -> None:
    side, _ = _worker()
    with pytest.raises(
        VersionMismatch, match=r"the master has loopbench 9\.9\.9 \(wire format 9\)"
    ):
        side.read_config(_settings(loopbench="9.9.9", wire_format=9))
    with pytest.raises(VersionMismatch, match=rf"this worker loopbench {MINE} "):
        side.read_config(_settings(loopbench="9.9.9"))


def test_a_master_refuses_a_worker_of_another_version_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenario = load_scenario("quickstart")
    options = MasterOptions(scenario, "quickstart", ["http"], "http://127.0.0.1:9/v1", False,
                            Path("unused"), None, None)  # fmt: skip
    master = MasterSide(options, lambda *a: None)
    master.on_hello("w0", hello_message("r1", 11, MINE))
    assert master.refused == ""
    master.on_hello("w1", hello_message("r1", 12, "0.0.1"))
    master.on_hello("w2", {"run_id": "r1", "pid": 13})  # an older worker: no versions
    assert master.refused == (
        f"the worker w1 has loopbench 0.0.1 (wire format {WIRE_FORMAT}), this master "
        f"loopbench {MINE} (wire format {WIRE_FORMAT}): install the same loopbench version on "
        "the master and every worker"
    )
    assert capsys.readouterr().err == f"error: {master.refused}\n"


def test_a_refused_master_begins_no_second_run(tmp_path: Path) -> None:
    """The shape ticks once a second: a tick after the refusal must not start a run that
    never runs (a new results folder, then a summary of nothing at quit)."""
    scenario = load_scenario("quickstart")
    options = MasterOptions(scenario, "quickstart", ["http"], "http://127.0.0.1:9/v1", False,
                            tmp_path / "out", None, None)  # fmt: skip
    master = MasterSide(options, lambda *a: None)
    first = master.begin()
    assert first is not None and master.run is not None
    # the manifest says each worker resolves the read stamps on its own machine
    manifest = json.loads((tmp_path / "out" / first.run_id / "manifest.json").read_text())
    client = manifest["client_options"]
    assert (client["rx_stamp"], client["rx_stamp_option"]) == ("per-worker", "auto")
    master.on_hello("w1", hello_message(first.run_id, 12, "0.0.1"))
    assert master.refused and master.run is None
    assert master.begin() is None and master.run is None
    assert [p.name for p in (tmp_path / "out").iterdir()] == [first.run_id]


def _other_version(folder: Path, version: str) -> dict[str, str]:
    """An environment in which ``loopbench`` reads as ``version`` installed: a dist-info
    ahead of site-packages on the path, as a second installation would be."""
    info = folder / f"loopbench-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: loopbench\nVersion: {version}\n")
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.mark.slow
def test_real_processes_of_two_versions_end_with_the_usage_code_and_one_line_each(
    tmp_path: Path,
) -> None:
    """End to end: only real processes show what Locust makes of the refusal (exit codes, and
    that neither side hangs)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: v\ntransports: [http]\nrollout: {count: 4}\n")
    port = _free_port("127.0.0.1")
    url = f"http://127.0.0.1:{closed_port()}/v1"
    master = subprocess.Popen(
        locust_master_argv(port, url, scenario, tmp_path / "out", "run", 1),
        stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    worker = subprocess.Popen(
        worker_command("127.0.0.1", port), stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=_other_version(tmp_path / "other", "9.9.9"),
    )  # fmt: skip
    try:
        _, master_err = master.communicate(timeout=90)
        _, worker_err = worker.communicate(timeout=30)
    finally:
        for proc in (master, worker):
            if proc.poll() is None:
                proc.kill()
    said = "install the same loopbench version on the master and every worker"
    assert master.returncode == ExitCode.USAGE, master_err[-3000:]
    assert f"has loopbench 9.9.9 (wire format {WIRE_FORMAT}), this master loopbench {MINE}" in (
        master_err
    )
    assert worker.returncode == ExitCode.USAGE, worker_err[-3000:]
    assert f"error: the master has loopbench {MINE} (wire format {WIRE_FORMAT}), this worker " \
        f"loopbench 9.9.9 (wire format {WIRE_FORMAT}): {said}" in worker_err  # fmt: skip
    assert "ValidationError" not in master_err + worker_err
