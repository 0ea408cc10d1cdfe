"""Rollouts with sub-agents, per transport: how much of their latency the tree's fork and join
cost, and which conversations made it up (docs/metrics.md §1.7).

Per successful rollout that ran sub-agents (``RolloutRecord.conversations > 1``): the share
of its latency (end − start) the root conversation spent waiting for sub-agents after its
own tools were done, and its critical path (the model turns on it, whether it ran through a
sub-agent, and the path itself: the most common one and its share of the rollouts).  Kept as counts per per-mille / per turn count, so the medians are
exact and the counts merge across processes like :mod:`harness.metrics.token_counts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.workload.records import RolloutRecord


def new_counts() -> dict[str, Any]:
    return {
        "rollouts": 0,
        "through_subagent": 0,
        "wait_permille": {},
        "path_turns": {},
        "paths": {},
    }


def add(counts: dict[str, Any], rec: RolloutRecord) -> None:
    if rec.conversations <= 1 or not rec.ok:
        return
    span = rec.end_ns - rec.start_ns
    if span <= 0:
        return
    counts["rollouts"] += 1
    if ">" in rec.critical_path:
        counts["through_subagent"] += 1
    _bump(counts["wait_permille"], round(1000 * rec.subagent_wait_ns / span))
    _bump(counts["path_turns"], rec.critical_path_turns)
    _bump(counts.setdefault("paths", {}), rec.critical_path)


def _bump(hist: dict[str, int], value: int | str) -> None:
    # string keys: the counts travel as JSON between processes
    key = str(value)
    hist[key] = hist.get(key, 0) + 1


def merge(counts: dict[str, Any], other: Mapping[str, Any]) -> None:
    counts["rollouts"] += int(other.get("rollouts", 0))
    counts["through_subagent"] += int(other.get("through_subagent", 0))
    for name in ("wait_permille", "path_turns", "paths"):
        mine = counts.setdefault(name, {})
        for key, n in other.get(name, {}).items():
            mine[str(key)] = mine.get(str(key), 0) + int(n)


def _median(hist: Mapping[str, int]) -> float | None:
    values = sorted((int(k), n) for k, n in hist.items())
    total = sum(n for _, n in values)
    if not total:
        return None
    # the lower and upper middle values, averaged (an even count has two)
    wanted = ((total - 1) // 2, total // 2)
    found: list[int] = []
    seen = 0
    for value, n in values:
        while len(found) < 2 and wanted[len(found)] < seen + n:
            found.append(value)
        seen += n
    return (found[0] + found[1]) / 2


def summary(counts: Mapping[str, Any]) -> dict[str, Any] | None:
    """The transport's figures; None when none of its rollouts ran sub-agents."""
    n = counts["rollouts"]
    if not n:
        return None
    wait = _median(counts["wait_permille"])
    paths: Mapping[str, int] = counts.get("paths") or {}
    # ties go to the path that sorts first, so the figure does not depend on arrival order
    common = min(paths, key=lambda p: (-paths[p], p)) if paths else None
    return {
        "rollouts": n,
        "wait_share_p50": None if wait is None else round(wait / 1000, 3),
        "critical_path_turns_p50": _median(counts["path_turns"]),
        "critical_path_through_subagent": round(counts["through_subagent"] / n, 3),
        # conversation numbers joined by ">" ("0>1>0": the root, waiting on sub-agent 1)
        "critical_path_common": common,
        "critical_path_common_share": None if common is None else round(paths[common] / n, 3),
    }
