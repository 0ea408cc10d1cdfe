"""A reduced ``python -m bench.selfbench`` end to end: every figure, well-formed JSON.

Whether the targets pass is ``make bench``'s business (a timing verdict on a
shared machine does not belong in a unit test); here the run must complete and
report a finite value for every figure it promises.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.runs import bench_doc

EXPECTED = {
    # Against the library server (the target's) and the flood server (client-bound, info).
    *(
        f"{server}{figure}"
        for server in ("", "flood_")
        for figure in (
            "ceiling.ws",
            "ceiling.sse",
            "pipeline.ws",
            "pipeline.http",
            "ratio.ws",
            "ratio.http",
            "cpu_us.ceiling.ws",
            "cpu_us.ceiling.sse",
            "cpu_us.pipeline.ws",
            "cpu_us.pipeline.http",
            "server_cpu_us.ceiling.ws",
            "server_cpu_us.ceiling.sse",
            "server_cpu_us.pipeline.ws",
            "server_cpu_us.pipeline.http",
        )
    ),
    "locust.sse",
    "ratio.http_vs_locust",
    *(
        f"{name}.{t}.{n}.{q}"
        for name in ("ttft_overhead", "ttft_client_error")
        for t in ("ws", "http")
        for n in (1, 16, 64)
        for q in ("p50", "p99")
    ),
    "decode_tps_error.ws",
    "decode_tps_error.http",
    "burst_peak.ws",
    "burst_peak.http",
    "overload.control_valid",
    "overload.detected",
    *(
        f"client_error.{t}.64.{q}.{mode}"
        for t in ("ws", "http")
        for q in ("p50", "p99")
        for mode in ("kernel", "user")
    ),
    *(f"decode_tps_error.{t}.64.{mode}" for t in ("ws", "http") for mode in ("kernel", "user")),
    *(f"rx_user_minus_kernel_us.{t}.{q}" for t in ("ws", "http") for q in ("p50", "p99", "max")),
    "memory.mb_per_million_turns",
    "memory.us_per_turn",
    *(
        f"agents.{t}{k}"
        for t in ("ws", "http")
        for k in ("", ".turns_per_s", ".client_cpu_share", ".cpu_us_per_turn", ".cpu_us_per_event")
    ),
    *(
        f"locust_agents.ws{k}"
        for k in ("", ".turns_per_s", ".client_cpu_share", ".cpu_us_per_turn", ".cpu_us_per_event")
    ),
}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quick_selfbench_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "selfbench.json"
    doc, printed = bench_doc("bench.selfbench", out, "--quick", timeout=170)
    figures = {f["key"]: f for f in doc["figures"]}
    assert set(figures) == EXPECTED
    for key, f in figures.items():
        assert isinstance(f["value"], int | float) and math.isfinite(f["value"]), key
        assert f["passed"] in (True, False, None), key
        # a targeted figure has a verdict unless the machine was too busy to judge it
        assert (f["target"] is None) == (f["passed"] is None and not f["not_judged"]), key
    # Targets sit where the issue puts them: 16 streams for the TTFT overhead, 70 % of the
    # ceiling for both pipelines against the library server (the flood server's ratios: info).
    targeted = {k for k, f in figures.items() if f["target"]}
    assert {k for k in targeted if "ratio." in k} == {"ratio.ws", "ratio.http"}
    assert figures["ratio.ws"]["target"] == figures["ratio.http"]["target"] == ">= 0.7"
    assert {k for k in targeted if k.startswith("agents")} == {"agents.ws", "agents.http"}
    assert {k for k in targeted if k.startswith("locust_agents")} == {"locust_agents.ws"}
    assert {k for k in targeted if k.startswith("ttft_overhead")} == {
        f"ttft_overhead.{t}.16.{q}" for t in ("ws", "http") for q in ("p50", "p99")
    }
    judged = [f for f in figures.values() if f["target"] and not f["not_judged"]]
    assert doc["passed"] == all(f["passed"] for f in judged)
    assert doc["not_judged"] == sum(1 for f in figures.values() if f["not_judged"])
    # The overload step checks the generator, so its verdicts are not timing luck.
    for key in ("overload.detected", "overload.control_valid"):
        assert figures[key]["passed"] is True or figures[key]["not_judged"], figures[key]
    # The printed table names every figure.
    for f in figures.values():
        assert f["label"] in printed
