"""harness/run/child.py: wait for a child's ready line, name why it never came, always stop it."""

from __future__ import annotations

import sys

import pytest

from harness.run.child import ready_child
from harness.wire.errors import LoopbenchError


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_yields_the_rest_of_the_ready_line_then_stops_the_child() -> None:
    code = "import sys, time; print('noise'); print('ready at 1234'); sys.stderr.write('hi\\n'); time.sleep(60)"
    with ready_child(_python(code), "ready at ", what="sleeper", timeout_s=30) as child:
        assert child.ready == "1234"
        assert child.proc.poll() is None
    assert child.proc.poll() is not None


def test_a_child_that_exits_first_is_named_with_its_code_and_stderr() -> None:
    code = "import sys; sys.stderr.write('bad flag\\n'); sys.exit(3)"
    with (
        pytest.raises(
            LoopbenchError, match="quitter exited with code 3 before it was ready: bad flag"
        ),
        ready_child(_python(code), "ready at ", what="quitter", timeout_s=30),
    ):
        pass


def test_a_silent_child_times_out_with_the_given_error() -> None:
    class Silent(LoopbenchError):
        pass

    code = "import time; time.sleep(60)"
    with (
        pytest.raises(Silent, match="mute did not report ready within 0 s"),
        ready_child(_python(code), "ready at ", what="mute", timeout_s=0.3, error=Silent),
    ):
        pass
