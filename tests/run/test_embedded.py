"""The embedded reference server: the installed one, with the window its scenario declares."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from harness.run.embedded import scenario_server
from harness.workload.scenario import validate_scenario


def _health(url: str) -> dict:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=10) as resp:
        return json.loads(resp.read())


def test_a_reference_server_folder_in_the_working_directory_is_not_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An older checkout (or any folder of that name) where loopbench runs must not silently
    # answer in place of the installed server: it would print the ready line and serve nothing.
    fake = tmp_path / "reference_server"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(
        "print('loopbench reference server listening on http://127.0.0.1:9/v1', flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    monkeypatch.chdir(tmp_path)
    scenario = validate_scenario({"name": "w", "context_window_tokens": 50_000})
    with scenario_server(scenario) as url:
        assert not url.startswith("http://127.0.0.1:9/")
        engine = _health(url)["model"]["engine"]
    # ... and it enforces the window the scenario was validated against
    assert engine["context_window_tokens"] == 50_000
    assert engine["max_output_tokens"] == 50_000
