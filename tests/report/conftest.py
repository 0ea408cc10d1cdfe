"""A small real run (tiny scenario, embedded server) shared by the report tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``loopbench ARGS`` in a subprocess of this interpreter; fails the test on a non-zero exit."""
    proc = subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"loopbench {' '.join(args)}: {proc.stderr}\n{proc.stdout}"
    return proc


@pytest.fixture(scope="package")
def tiny_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run over http and ws; the runner rendered its report itself."""
    out = tmp_path_factory.mktemp("results")
    run_cli(
        "run", str(ROOT / "scenarios" / "tiny.yaml"), "--out", str(out), "--run-id", "tiny", "-q"
    )
    return out / "tiny"


def _load_helper(name: str) -> ModuleType:
    # --import-mode=importlib puts no test folder on sys.path: load helpers by file.
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"loopbench_tests_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def synthetic() -> ModuleType:
    """``helper_synthetic``: ``make_run(path, rollout_ms=...)`` writes a run without a server."""
    return _load_helper("helper_synthetic")


@pytest.fixture(scope="session")
def browser() -> ModuleType:
    """``helper_browser``: ``find_chromium()`` and ``inspect_page(html, screenshot, chromium=)``."""
    return _load_helper("helper_browser")


@pytest.fixture(scope="session")
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``cli("report", path)`` runs ``loopbench report PATH`` and asserts exit 0."""
    return run_cli
