"""Helpers of the report tests: synthetic runs, a headless browser, the CLI."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from tests.runs import run_cli


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


@pytest.fixture(scope="session")
def rerendered_tiny(
    tiny_run_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str], Path]:
    """A copy of the tiny run without its report, plots and slices, then ``loopbench report``.

    One rendering read by every test that checks what ``report`` rebuilds from the rows
    of a run made without ``--slice-s``: the copy, the command and the original.
    """
    copy = tmp_path_factory.mktemp("rerendered") / "tiny"
    shutil.copytree(tiny_run_dir, copy)
    for name in ("report.md", "report.html", "slices.csv.gz"):
        (copy / name).unlink()
    shutil.rmtree(copy / "plots")
    return copy, run_cli("report", copy), tiny_run_dir
