"""Lint runs in CI before the tests: `.ci/run` calls `make lint`, which runs ruff check, ruff
format --check and mypy over every Python folder.

The suite used to run the three tools itself (~1 min of a `make test` on 2 cores, twice in
CI). It now checks only that the CI entry point still runs them, so a lint failure still
fails CI while `make test` stays about tests.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _make_target(name: str) -> list[str]:
    """The recipe lines of Makefile target ``name``."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{name}:"))
    recipe = []
    for ln in lines[start + 1 :]:
        if not ln.startswith("\t"):
            break
        recipe.append(ln.strip())
    return recipe


def test_ci_runs_make_lint_before_make_test() -> None:
    steps = [
        ln.strip()
        for ln in (ROOT / ".ci" / "run").read_text().splitlines()
        if ln.strip().startswith("make ")
    ]
    assert "make lint" in steps and "make test" in steps, steps
    assert steps.index("make lint") < steps.index("make test"), steps


def test_make_lint_runs_ruff_check_ruff_format_and_mypy_over_every_python_folder() -> None:
    [line] = [
        ln for ln in (ROOT / "Makefile").read_text().splitlines() if ln.startswith("LINT_DIRS")
    ]
    dirs = line.split("=", 1)[1].split()
    assert {"harness", "reference_server", "bench", "tools", "tests"} <= set(dirs), dirs
    recipe = _make_target("lint")
    assert "$(BIN)/ruff check $(LINT_DIRS)" in recipe, recipe
    assert "$(BIN)/ruff format --check $(LINT_DIRS)" in recipe, recipe
    assert "$(BIN)/mypy" in recipe, recipe
