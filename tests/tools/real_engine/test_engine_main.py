"""`python -m tools.real_engine.engine` when vLLM does not come up: one line naming the
cause, the server stopped, exit 4 (a target unreachable before any measurement).  A shell
script stands in for the engine virtualenv's python."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from harness.wire.exit_codes import ExitCode
from tools.real_engine import engine
from tools.real_engine.engine import main


def _venv(tmp_path: Path, body: str) -> Path:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n" + body)
    python.chmod(0o755)
    return python.parent.parent


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _argv(tmp_path: Path, venv: Path) -> list[str]:
    return [str(tmp_path / "model"), "--engine-venv", str(venv), "--port", _port()]


def test_an_engine_that_exits_while_starting_is_named_without_a_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = _venv(tmp_path, "exit 7\n")
    assert main(_argv(tmp_path, venv)) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert err == "error: vLLM exited with code 7 while starting (its output is above)"


def test_an_engine_that_does_not_answer_in_time_is_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "pid"
    venv = _venv(tmp_path, f"echo $$ > {pid_file}\nexec sleep 60\n")
    monkeypatch.setattr(engine, "START_TIMEOUT_S", 1.0)
    argv = _argv(tmp_path, venv)
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: vLLM did not answer http://127.0.0.1:{argv[-1]}/health within 1 s of "
        "starting (its output is above)"
    ]
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_a_missing_engine_virtualenv_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_argv(tmp_path, tmp_path / "none")) == ExitCode.USAGE
    assert capsys.readouterr().err.startswith("error: no engine virtualenv at ")
