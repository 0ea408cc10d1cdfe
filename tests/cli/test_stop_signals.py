"""Ctrl-C and SIGTERM end every long-running subcommand with 130, the exit-code table's row.

``serve`` exited 0 on Ctrl-C and died by SIGTERM (143); ``record`` exited 0 on both. Each is a
real process (only a process receives signals), told to stop once it says it is listening,
in the foreground and as a script's background job (SIGINT ignored, as ``sh`` starts
``COMMAND &``). ``run`` has the same checks in tests/report/test_interrupt.py (SIGINT) and
tests/reliability/test_harness_keeps_measurements.py (SIGTERM in the background);
``locust`` in tests/locust/test_locust_web_stop.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from harness.wire.exit_codes import ExitCode
from tests.runs import started

#: (command, the start of the line it prints once it listens)
COMMANDS = {
    "serve": (("serve", "--port", "0"), "loopbench reference server listening on "),
    "record": (
        ("record", "--upstream", "http://127.0.0.1:9/v1", "--port", "0"),
        "loopbench record listening on ",
    ),
}


@pytest.mark.parametrize(
    ("sig", "background"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)],
    ids=["SIGINT", "SIGTERM", "SIGTERM-background"],
)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_stop_signal_exits_130(
    command: str, sig: signal.Signals, background: bool, tmp_path: Path
) -> None:
    args, ready = COMMANDS[command]
    if command == "record":
        args = (*args, "--out", str(tmp_path / "trace.jsonl"))
    with started(*args, background=background) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(ready), line + proc.communicate(timeout=30)[1]
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, (proc.returncode, err)
    assert "Traceback" not in err, err
