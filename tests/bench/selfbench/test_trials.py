"""Which timing trials the self-bench keeps: undisturbed ones, best and worst by p99 (pure)."""

from __future__ import annotations

from typing import Any

from bench.selfbench.bench import STEAL_DISTURBED_PCT, best_and_worst, usable_trials


def _trial(steal: float | None, p50: float, p99: float) -> dict[str, Any]:
    disturbed = steal is not None and steal > STEAL_DISTURBED_PCT
    return {
        "cpu_steal_pct": steal,
        "disturbed": disturbed,
        "ws": {"measurement_error_ms": {"p50": p50, "p99": p99}},
    }


def test_disturbed_trials_are_left_out_when_an_undisturbed_one_exists() -> None:
    trials = [_trial(9.4, 0.5, 2.0), _trial(1.0, 0.9, 4.0), _trial(None, 0.8, 3.0)]
    kept, note = usable_trials(trials)
    assert kept == trials[1:] and note == ""
    best, worst = best_and_worst([t["ws"]["measurement_error_ms"] for t in kept])
    # A disturbed trial never becomes the figure, even with lower numbers.
    assert best == {"p50": 0.8, "p99": 3.0} and worst == {"p50": 0.9, "p99": 4.0}


def test_when_every_trial_is_disturbed_all_count_and_a_note_says_so() -> None:
    trials = [_trial(8.2, 1.1, 4.9), _trial(13.4, 1.9, 8.9)]
    kept, note = usable_trials(trials)
    assert kept == trials
    assert "every trial was disturbed" in note and "8.2 %" in note


def test_best_and_worst_rank_by_p99_and_a_missing_p99_ranks_last() -> None:
    errs: list[dict[str, Any]] = [{"p50": 0.4, "p99": 5.5}, {"p50": 0.9, "p99": 2.5}, {"p50": 0.1}]
    best, worst = best_and_worst(errs)
    assert best == {"p50": 0.9, "p99": 2.5}
    assert worst == {"p50": 0.1}
