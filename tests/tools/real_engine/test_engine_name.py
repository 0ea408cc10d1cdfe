"""`python -m tools.real_engine --engine-url` names what answered, not "vLLM" whatever it is."""

from __future__ import annotations

from tools.real_engine.compare import Row, render
from tools.real_engine.engine import attached, engine_name

_VLLM = (
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
)


def test_the_name_comes_from_the_metric_families_then_the_server_header() -> None:
    base = "http://127.0.0.1:9"
    assert engine_name(_VLLM, "0.32.0", "uvicorn", base) == "vLLM 0.32.0"
    assert engine_name(_VLLM, None, None, base) == "vLLM"
    ours = "# TYPE loopbench_server_engine_queue_depth gauge\nloopbench_server_x 1\n"
    assert engine_name(ours, "9.9", "uvicorn", base) == "a loopbench reference server"
    # a family that merely mentions vllm: further on its line is not vLLM's
    other = "# HELP other_total counts vllm: requests\nother_total 3\n"
    assert engine_name(other, None, "nginx", base) == f"the engine at {base} (server: nginx)"
    assert engine_name("", None, None, base) == f"the engine at {base}"


def test_a_reference_server_at_engine_url_is_named_as_one(server_url: str) -> None:
    """The defect: attached to loopbench's own reference server, the runner printed "vLLM"
    (the console line and the table's engine column); this asks the real server."""
    with attached(server_url) as engine:
        name = engine.name
    assert name == "a loopbench reference server"
    row = Row("loopbench", "chat", "ttft_ms", "p50", 7.0, None, None, "", None)
    head = render([row], name).splitlines()[0]
    assert name in head and "vLLM" not in head
