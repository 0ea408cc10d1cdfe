"""notebooks/transport_comparison.ipynb executes top to bottom on a small real run."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "transport_comparison.ipynb"


def test_notebook_executes_on_a_run(tiny_run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # jupyter_core warns about its path migration unless told which scheme to use
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    from nbclient import NotebookClient

    monkeypatch.setenv("LOOPBENCH_RUN", str(tiny_run_dir))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # "python3" is ipykernel's own spec: jupyter_client starts it with sys.executable,
    # i.e. this virtualenv's interpreter, where harness is importable.
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        startup_timeout=60,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    stderr = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert stderr == [], stderr
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"run {tiny_run_dir.name}: " in text and "transports ['http', 'ws']" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 7  # six report plots + the hand-made one


def test_committed_notebook_reads_without_running() -> None:
    # `make notebook` executes it on results/baseline; GitHub shows these outputs as they are.
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run `make notebook`"
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "run baseline: " in text
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= 7
    raw = NOTEBOOK.read_text(encoding="utf-8")
    assert str(ROOT) not in raw, "a path of this machine in the outputs"
