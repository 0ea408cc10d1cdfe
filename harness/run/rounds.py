"""Interleaving rounds: the rollouts every transport runs before the next round starts.  Pure."""

from __future__ import annotations

from collections.abc import Sequence

from harness.workload.plan import RolloutPlan


def interleaving_rounds(plans: Sequence[RolloutPlan], rounds: int) -> list[list[RolloutPlan]]:
    """``plans`` grouped by round, for ``loopbench run`` and the Locust master alike.

    Groups follow the generator's ``round`` tag, so each record's ``round`` matches its plan
    and the summary pairs transports per (round, rollout); plans without one are chunked.
    """
    if rounds <= 1:
        return [list(plans)]
    if any("round" not in p.tags for p in plans):
        size = -(-len(plans) // rounds)
        return [list(plans[i : i + size]) for i in range(0, len(plans), size)]
    groups: dict[int, list[RolloutPlan]] = {}
    for plan in plans:
        groups.setdefault(int(plan.tags["round"]), []).append(plan)
    return [groups[k] for k in sorted(groups)]
