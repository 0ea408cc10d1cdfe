"""The commented starter scenario ``loopbench init NAME`` writes.

Every field is written with its default or a small value, and a comment says what it
does, so the file is both a working scenario and a short reference.
"""

from __future__ import annotations

# The description states these, so each is written once, here (it once said 4 rollouts of 8).
_ROLLOUTS = 8
_TOOL_CALLS = (6, 10)

_TEMPLATE = """\
# {name}: a scenario written by `loopbench init`.  Check it with `loopbench validate {name}.yaml`,
# run it with `loopbench run {name}.yaml`; `loopbench schema` gives your editor completion and
# a description of every field.  Every numeric rollout field takes a number or a distribution:
# {{dist: constant, value}}, {{dist: uniform, min, max}}, {{dist: normal, mean, sd, min?, max?}},
# {{dist: lognormal, median, p95}}, {{dist: empirical, values: [...]}}.
name: {name}
description: "my agent workload: {rollouts} rollouts x ~{mean_calls:g} tool calls, http vs ws"
seed: 1                          # same seed, same rollouts: runs are comparable
model: sim-model                 # the model name sent to the endpoint
transports: [http, ws]           # compared in this order; the first is the baseline
server:                          # used only for the embedded reference server (no --target)
  api_profile: optimized
  engine_profile: cerebras-spark
rollout:                         # the shape of one agent task
  count: {rollouts:<24d}# rollouts per transport (5 or more pairs give a CI)
  system_tokens: 800             # first request: system prompt ...
  tool_schema_tokens: 400        # ... tool definitions ...
  user_prompt_tokens: 200        # ... and the user's task
  tool_calls: {{dist: uniform, min: {min_calls}, max: {max_calls}}}   # tool calls per rollout
  parallel_calls: 1              # tool calls per model turn
  tool_output_tokens: {{dist: lognormal, median: 600, p95: 1500}}   # what each tool returns
  tool_output_growth: 1.0        # multiply tool outputs by this per step (history growth)
  tool_latency_ms: {{dist: uniform, min: 20, max: 200}}   # client time per tool call
  step_output_tokens: {{dist: uniform, min: 40, max: 120}}   # model output per tool-calling turn
  final_answer_tokens: 300       # the last turn's answer
  think_ms: 0                    # client time before each request
load:                            # how rollouts start
  mode: closed                   # closed: agents back to back; open / throughput: scheduled
  concurrency: 2                 # agents running at once (closed loop)
  warmup_rollouts: 0             # first N rollouts run but are left out of the statistics
  order: sequential              # or interleaved, with rounds, so drift hits every transport
"""


def starter_scenario(name: str) -> str:
    """The starter file's text for scenario ``name`` (lowercase letters, digits, '-')."""
    low, high = _TOOL_CALLS
    return _TEMPLATE.format(
        name=name,
        rollouts=_ROLLOUTS,
        min_calls=low,
        max_calls=high,
        mean_calls=(low + high) / 2,
    )
