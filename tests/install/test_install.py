"""loopbench installed as users install tools: the built wheel in a fresh virtualenv, run from
an empty folder, so nothing can come from the checkout.

The wheel is built offline from a copy of the sources (the checkout gets no build/ folder).
The virtualenv gets loopbench from the wheel only; its dependencies are borrowed from the
test interpreter's site-packages through a path file rather than downloaded, which keeps
the test offline and fast without letting `harness` itself come from anywhere but the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _sh(
    args: list[str | Path], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ folder of a fresh virtualenv with the built wheel installed."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    # the development folders too: the wheel must leave them out by its own configuration
    for folder in ("harness", "reference_server", "scenarios", "docs", "bench", "tools"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp / "dist"
    build = _sh(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            dist,
            src,
        ],
        cwd=tmp,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("loopbench-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    # the checkout's scenarios/ folder, installed inside the package
    shipped = {
        f"harness/{p.relative_to(ROOT)}" for p in (ROOT / "scenarios").rglob("*") if p.is_file()
    }
    assert shipped and shipped <= names, sorted(shipped - names)
    # what only the project's own checks run stays out of the wheel
    tops = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert tops == {"harness", "reference_server"}, tops
    # (code: the docs are prose, and docs/peers.md says how the project measures itself)
    code = [n for n in names if not n.startswith("harness/docs/")]
    dev = [n for n in code if any(w in n for w in ("selfbench", "peers", "fuzz", "soak"))]
    assert not dev, dev
    # the docs the --help texts name, inside the package (pyproject.toml's package-dir)
    docs = {f"harness/docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert docs and docs <= names, sorted(docs - names)

    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False, clear=True)
    bin_dir = env_dir / "bin"
    new_python = bin_dir / "python"
    site = Path(
        _sh(
            [new_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp
        ).stdout.strip()
    )
    install = _sh(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            new_python,
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            wheel,
        ],
        cwd=tmp,
    )
    assert install.returncode == 0, install.stderr
    # Dependencies only: a path entry adds the directory, its own .pth files (the editable
    # install of this checkout among them) are not processed.
    (site / "zz-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return bin_dir


@pytest.fixture()
def empty(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


def test_every_package_of_the_checkout_is_listed() -> None:
    """pyproject.toml lists the packages (the scenarios' package-dir needs a list, not a
    search): a new package left off the list would be missing from the wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("harness", "reference_server")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found <= set(config["packages"]), sorted(found - set(config["packages"]))
    # and each listed one is a folder of the checkout (the scenarios and the docs where
    # package-dir says)
    dirs = config["package-dir"]
    assert set(dirs) == {"harness.scenarios", "harness.docs"}, dirs

    def folder(name: str) -> Path:
        for mapped, where in dirs.items():
            if name == mapped or name.startswith(f"{mapped}."):
                return ROOT / where / Path(*name.split(".")[len(mapped.split(".")) :])
        return ROOT.joinpath(*name.split("."))

    missing = [name for name in config["packages"] if not folder(name).is_dir()]
    assert not missing, missing


def _installed_python(installed: Path, cwd: Path, code: str) -> str:
    """What ``python -c CODE`` of the installation prints in ``cwd`` (failing the test on an
    error)."""
    proc = _sh([installed / "python", "-c", code], cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_harness_comes_from_the_wheel(installed: Path, empty: Path) -> None:
    printed = _installed_python(
        installed,
        empty,
        "import harness, reference_server; "
        "print(harness.__file__); print(reference_server.__file__)",
    )
    venv_root = installed.parent.resolve()
    for line in printed.splitlines():
        assert Path(line).resolve().is_relative_to(venv_root), line
        assert not Path(line).resolve().is_relative_to(ROOT), line


def test_run_tiny_by_name_from_an_empty_folder(
    installed: Path, empty: Path, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    proc = _sh(
        [installed / "loopbench", "run", "tiny", "--out", out, "--run-id", "t", "-q"], cwd=empty
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "t" / "summary.json").read_text())
    assert summary["scenario"] == "tiny"
    assert set(summary["transports"]) == {"http", "ws"}
    for t in summary["transports"].values():
        assert t["turns"]["errors"] == 0
    assert list(empty.iterdir()) == []


def test_builtins_listed_validated_and_initialised(installed: Path, empty: Path) -> None:
    listed = _sh([installed / "loopbench", "scenarios"], cwd=empty)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert {"tiny", "quickstart", "codex-replay", "reproduce/codex-cerebras"} <= set(names)
    # Every built-in, by name; codex-replay's trace resolves inside the installed package.
    valid = _sh([installed / "loopbench", "validate", *names], cwd=empty)
    assert valid.returncode == 0, valid.stderr
    assert valid.stdout.count(": ok") == len(names)
    init = _sh([installed / "loopbench", "init", "mine"], cwd=empty)
    assert init.returncode == 0, init.stderr
    assert _sh([installed / "loopbench", "validate", "mine.yaml"], cwd=empty).returncode == 0


def test_reproduce_finds_its_scenarios_from_anywhere(
    installed: Path, empty: Path, tmp_path: Path
) -> None:
    assert _sh([installed / "loopbench", "reproduce", "--help"], cwd=empty).returncode == 0
    folder, every = _installed_python(
        installed,
        empty,
        "from harness.model.reproduce import PARTS, REPRODUCE_DIR; "
        "print(REPRODUCE_DIR); print(all((REPRODUCE_DIR / f'{p}.yaml').is_file() for p in PARTS))",
    ).split()
    assert Path(folder).resolve().is_relative_to(installed.parent.resolve())
    assert every == "True"


def test_help_points_at_docs_that_the_installation_has(installed: Path, empty: Path) -> None:
    """The help texts named docs/ci.md and friends, which a pip install did not have."""
    proc = _sh([installed / "loopbench", "gate", "--help"], cwd=empty)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("docs/NAME.md, named above: "), last
    folder = Path(last.split(": ", 1)[1]).parent
    assert folder.resolve().is_relative_to(installed.parent.resolve()), folder
    assert (folder / "ci.md").is_file() and "See docs/ci.md" in " ".join(proc.stdout.split())
