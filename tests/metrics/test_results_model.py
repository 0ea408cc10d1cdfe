"""The typed results model: it reads what loopbench writes, writes it back unchanged, refuses
what it cannot read by name, and is the schema docs/metrics.md publishes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.metrics.results_model import (
    FORMAT_VERSION,
    READERS,
    Manifest,
    ResultsFormatError,
    Summary,
    TransportSummary,
    schema_text,
)
from tests.runs import measured_folder

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baseline"


def _json(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def test_the_committed_baseline_reads_and_writes_back_unchanged() -> None:
    """results/baseline (what CI gates against) is the previous writer's output: version 1."""
    doc = _json(BASELINE / "summary.json")
    summary = Summary.from_json(doc)
    assert summary.to_json() == doc
    ws = summary.transports["ws"]
    assert ws.stat("ttft_ms", "p99") == doc["transports"]["ws"]["ttft_ms"]["p99"]
    assert ws.turns.count == doc["transports"]["ws"]["turns"]["count"]
    assert ws.schedule is not None and ws.schedule.intended == 6
    (pair,) = summary.comparisons
    assert (
        pair.pair == "ws vs http"
        and pair.rollout_speedup == doc["comparisons"][0]["rollout_speedup"]
    )
    assert summary.validity is not None and summary.validity.valid
    manifest = _json(BASELINE / "manifest.json")
    model = Manifest.from_json(manifest)
    assert model.to_json() == manifest
    assert (model.scenario_name, model.seed) == (manifest["scenario_name"], manifest["seed"])


def test_a_run_summary_round_trips_and_declares_every_key_it_writes(tmp_path: Path) -> None:
    """Every key the run's lifecycle writes is a declared field (so the published schema names
    it), and the document reads back to itself, ints staying ints."""
    folder = measured_folder(tmp_path, "r", failed=2, scenario={"slo": {"ttft_ms": 500}})
    doc = _json(folder / "summary.json")
    summary = Summary.from_json(doc)
    assert summary.to_json() == doc
    assert json.dumps(summary.to_json(), sort_keys=True) == json.dumps(doc, sort_keys=True)
    assert set(doc) <= set(Summary.model_fields)
    for name, t in doc["transports"].items():
        assert set(t) <= set(TransportSummary.model_fields), name
    http = summary.transports["http"]
    assert (http.turns.count, http.turns.errors, http.turns.ok) == (100, 2, 98)
    assert http.errors_by_kind == {"server_error": 2}
    assert summary.errors["http"]["server_error"].example == "HTTP 500: injected"
    manifest = _json(folder / "manifest.json")
    assert set(manifest) <= set(Manifest.model_fields)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"run_id": "r"}, "summary.json: format_version: missing (expected 1)"),
        ({"format_version": 99}, "summary.json: format_version: expected one of 1, got 99"),
        (
            {"format_version": 1, "transports": {"ws": {"turns": {"count": "many"}}}},
            "summary.json: transports.ws.turns.count: expected an integer, got 'many'",
        ),
    ],
)
def test_a_document_it_cannot_read_is_refused_by_name(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ResultsFormatError) as caught:
        Summary.from_json(doc)
    assert str(caught.value).startswith(message)


def test_every_version_read_has_a_reader_and_the_written_one_is_read() -> None:
    assert FORMAT_VERSION in READERS
    assert Summary.from_json({"format_version": 1}).format_version == FORMAT_VERSION


def test_the_published_schema_is_the_models() -> None:
    """docs/metrics.md carries the schema generated from the model; regenerate it with
    ``python -m harness.metrics.results_model`` when the model changes."""
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    found = re.search(
        r"<!-- summary.json schema: generated[^\n]*-->\n```json\n(.*?)\n```\n"
        r"<!-- end of summary.json schema -->",
        text,
        re.S,
    )
    assert found, "docs/metrics.md: the summary.json schema block is missing"
    assert found.group(1) == schema_text(), (
        "docs/metrics.md: the summary.json schema differs from harness/metrics/results_model.py; "
        "paste the output of `python -m harness.metrics.results_model` between the markers"
    )
    assert json.loads(found.group(1))["properties"]["transports"]["additionalProperties"] == {
        "$ref": "#/$defs/TransportSummary"
    }


def test_the_cache_and_subagent_blocks_read_by_attribute() -> None:
    doc = {
        "format_version": 1,
        "transports": {"ws": {"cache": {"cached_ratio": 0.5, "input_tokens": 10, "cached_tokens": 5,
                                        "by_turn": [{"turn_index": 1, "turns": 2, "input_tokens": 10,
                                                     "cached_tokens": 5, "cached_ratio": 0.5}]}}},
        "subagents": {"ws": {"rollouts": 3, "wait_share_p50": 0.25, "critical_path_common": "0>1>0"}},
    }  # fmt: skip
    summary = Summary.from_json(doc)
    cache = summary.transports["ws"].cache
    assert cache is not None and (cache.cached_tokens, cache.input_tokens) == (5, 10)
    assert [(t.turn_index, t.cached_ratio) for t in cache.by_turn] == [(1, 0.5)]
    forked = (summary.subagents or {})["ws"]
    assert (forked.rollouts, forked.wait_share_p50, forked.critical_path_common) == (
        3,
        0.25,
        "0>1>0",
    )
    assert summary.to_json() == doc


def test_scenario_facts_read_the_recorded_scenario_leniently() -> None:
    """The reports, the gate's samples and a rebuild read the scenario as run through one
    reader; a hand-made manifest that names the scenario only still reads."""
    full = Manifest.from_json(
        {
            "format_version": 1,
            "scenario": {
                "name": "tiny",
                "description": "two rollouts",
                "load": {"mode": "closed", "concurrency": 2, "warmup_rollouts": 1},
                "server": {"api_profile": "openai", "engine_profile": "h100"},
                "slo": {"ttft_ms": 500, "rollout_ms": None},
            },
            "client_options": {"hints": True},
        }
    )
    facts = full.scenario_facts
    assert (facts.name, facts.load_mode, facts.concurrency, facts.warmup_rollouts) == (
        "tiny",
        "closed",
        2,
        1,
    )
    assert (facts.api_profile, facts.engine_profile) == ("openai", "h100")
    assert facts.slo == {"ttft_ms": 500.0} and full.hints
    bare = Manifest.from_json({"format_version": 1, "scenario": "tiny", "scenario_name": "tiny"})
    assert bare.scenario_facts.name == "tiny" and bare.scenario_facts.warmup_rollouts == 0
    assert bare.scenario_facts.slo == {} and not bare.hints
