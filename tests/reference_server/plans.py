"""The output plan of a response without tools or a chain that asks for its length by the
``loopbench.output_tokens`` hint, for the tests of what the server streams from it."""

from __future__ import annotations

import random
from typing import Any

from reference_server.core.output import OutputPlan, plan_output


def hinted_plan(output_tokens: int, seed: int, **options: Any) -> OutputPlan:
    """``plan_output`` with ``rng=random.Random(seed)``; ``options`` set its other keywords."""
    fields: dict[str, Any] = {
        "tools": [],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "metadata": {"loopbench.output_tokens": str(output_tokens)},
        "max_output_tokens": None,
        "chain_function_calls": 0,
        "default_output_tokens": 1,
        "default_auto_tool_calls": 0,
        "rng": random.Random(seed),
    }
    return plan_output(**{**fields, **options})
