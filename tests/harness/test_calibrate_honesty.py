"""calibrate against what a run can and cannot show (docs/model.md §10): the connection term
from the pool's truth with and without keep-alive, parameters it could not identify marked,
turns whose usage fails the output-token check kept out of the decode fit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.client.options import ClientSettings
from harness.run.runner import RunOptions, run_scenario
from harness.workload.scenario import load_scenario
from tests.foreign_sse import foreign_sse_server
from tests.runs import ROOT, TINY, in_process, run_tiny

CODEX = ROOT / "scenarios" / "reproduce" / "codex-cerebras.yaml"
#: not the base profile's 25 ms: a copied value cannot pass for a fitted one
CONNECT_MS = 60.0
SETS = {
    "rollout.count": "4",
    "rollout.tool_calls": "6",
    "load.concurrency": "2",
    "rollout.tool_latency_ms": "5",
    "rollout.tool_output_tokens": "{dist: uniform, min: 3000, max: 6000}",
    "server.set.api.connect_ms": str(CONNECT_MS),
    # Short answers: what is compared here is fitted from TTFTs (the connection term, the
    # fixed path, the per-token and prefill slopes), and decoding the base file's 150- and
    # 400-token answers was ~1 s of each rollout's ~3.4 s, the same on both runs.
    "rollout.step_output_tokens": "30",
    "rollout.final_answer_tokens": "30",
}


def _fit(run_dir: Path, out: Path) -> str:
    """``loopbench calibrate RUN --out OUT`` through ``main`` in this process: its console (the
    command as a process is test_calibrate.py::test_recovers_the_reference_servers_own_parameters')."""
    code, console = in_process("calibrate", run_dir, "--out", out)
    assert code == 0, console
    return console


def _calibrate(tmp: Path, name: str, keepalive: bool) -> tuple[str, dict, dict]:
    opts = RunOptions(
        transports=["http", "ws"],
        results_root=tmp / name,
        run_id="r",
        client=ClientSettings(keepalive=keepalive),
        progress=False,
        render=False,
    )
    run_dir = run_scenario(load_scenario(str(CODEX), SETS), str(CODEX), opts).run_dir
    out = tmp / f"fit-{name}"
    console = _fit(run_dir, out)
    api_text = (out / "api-fitted.yaml").read_text()
    engine = yaml.safe_load((out / "engine-fitted.yaml").read_text())
    return console + api_text, yaml.safe_load(api_text), engine


# serial: the verdict reads the machine's timing (`make test` runs it alone)
@pytest.mark.serial
def test_keepalive_and_no_keepalive_fit_the_same_connection_cost(tmp_path: Path) -> None:
    text_on, on, engine_on = _calibrate(tmp_path, "keepalive", True)
    text_off, off, engine_off = _calibrate(tmp_path, "no-keepalive", False)
    print("\n" + text_on + "\n" + text_off)
    # With keep-alive, the first request of each pooled connection fits the connection term.
    assert on["connect_ms"] == pytest.approx(CONNECT_MS, rel=0.10)
    assert "connect_ms" not in re.findall(r"unidentified.*", text_on)[0]
    # Without, every request opens one: the cost cannot be told from the fixed work, so it is
    # marked and copied, and the fixed path that holds it is the same as with keep-alive.
    assert "connect_ms: 25.0  # unidentified: copied from 'optimized'" in text_off
    assert re.search(
        r"unidentified, copied from the base profile 'optimized': .*connect_ms", text_off
    )
    path_on = on["fixed_ms"] + on["connect_ms"]
    path_off = off["fixed_ms"] + off["connect_ms"]
    assert path_off == pytest.approx(path_on, rel=0.10)
    # ... and the rank check no longer drops prefill for it
    assert "prefill rate not identifiable" not in text_off
    assert engine_off["prefill_tps"] == pytest.approx(engine_on["prefill_tps"], rel=0.10)
    assert off["per_token_us"] == pytest.approx(on["per_token_us"], rel=0.10)


def _significant_digits(value: float) -> int:
    digits = f"{value:.15g}".replace("-", "").replace(".", "").lstrip("0").rstrip("0")
    return len(digits)


def test_an_http_only_fit_marks_what_it_could_not_identify(tmp_path: Path) -> None:
    # Not serial: what is unidentified follows from the run's shape (http only, no keep-alive,
    # no chain), not from its timing, and the rest is the writer's formatting.
    opts = RunOptions(
        transports=["http"],
        results_root=tmp_path,
        run_id="r",
        client=ClientSettings(keepalive=False),
        progress=False,
        render=False,
    )
    run_dir = run_scenario(
        load_scenario(str(TINY), {"rollout.count": "3"}), str(TINY), opts
    ).run_dir
    out = tmp_path / "fit"
    console = _fit(run_dir, out)
    api_text = (out / "api-fitted.yaml").read_text()
    engine_text = (out / "engine-fitted.yaml").read_text()
    marked = set(re.findall(r"^(\w+): .*# unidentified", api_text + engine_text, re.M))
    said = set()
    for line in re.findall(
        r"^unidentified, copied from the base profile '[\w-]+': (.*)$", console, re.M
    ):
        said |= {k.strip() for k in line.split(",")}
    # no ws turns to subtract from, no chain to re-hydrate, every request a new connection
    assert {"connect_ms", "rehydrate_us"} <= marked
    assert marked == said
    assert "# not observable below saturation" in api_text
    for doc in (yaml.safe_load(api_text), yaml.safe_load(engine_text)):
        for key, value in doc.items():
            if isinstance(value, float):
                assert _significant_digits(value) <= 4, (key, value)


# serial: the decode rate bound reads the honest turns' timing (`make test` runs it alone)
@pytest.mark.serial
def test_a_server_lying_about_output_tokens_does_not_set_the_decode_rate(tmp_path: Path) -> None:
    # in this process, without a report (calibrate reads the rows): `loopbench run tiny
    # --target URL --no-probe --transports http --set rollout.count=4`
    with foreign_sse_server("lie_output") as url:
        run = run_tiny(tmp_path / "runs", ["http"], {"rollout.count": "4"}, target=url)
    run_dir = run.path
    turns = run.turns
    assert turns["decode_implausible"].sum() == 12  # 3 function calls per rollout
    out = tmp_path / "fit"
    console = _fit(run_dir, out)
    engine = yaml.safe_load((out / "engine-fitted.yaml").read_text())
    # The honest answers stream 24 tokens 2 ms apart or slower; the lied calls would say
    # 299 tokens in ~2 ms (~150,000 tok/s).
    assert 100 < engine["sustained_tps"] < 600
    assert "12 of 16 turns left out of the decode fit" in console
