"""Progress display: plain periodic lines for logs, a rich live table on a terminal."""

from __future__ import annotations

import io

from harness.run.progress import (
    LineProgress,
    PassProgress,
    RichProgress,
    format_line,
    make_progress,
    schedule_table,
)


def _p(**changes: object) -> PassProgress:
    base: dict[str, object] = {
        "transport": "ws",
        "round": 0,
        "rounds": 1,
        "done": 3,
        "total": 10,
        "turns": 30,
        "errors": 1,
        "dropped": 0,
        "late": 0,
        "ttft_p50_ms": 41.25,
        "elapsed_s": 6.0,
    }
    base.update(changes)
    return PassProgress(**base)  # type: ignore[arg-type]


def test_rates_and_eta() -> None:
    p = _p()
    assert p.turns_per_s == 5.0
    assert p.eta_s == 14.0  # 6 s for 3 rollouts, 7 to go
    # Open loop: the schedule bounds the ETA from below.
    assert _p(schedule_left_s=30.0).eta_s == 30.0
    assert _p(done=0).eta_s is None
    assert _p(finished=True).eta_s == 0.0


def test_format_line() -> None:
    line = format_line(_p())
    for part in ("ws", "3/10 rollouts", "5.0 turns/s", "TTFT p50    41.2 ms", "errors 1", "ETA"):
        assert part in line, line
    assert "late" not in line
    assert "late 2  dropped 1" in format_line(_p(late=2, dropped=1))
    assert format_line(_p(rounds=2, round=1)).startswith("ws r2/2")
    assert "TTFT p50       - ms" in format_line(_p(ttft_p50_ms=None))


def test_line_progress_is_periodic() -> None:
    now = [0.0]
    lines: list[str] = []
    progress = LineProgress(lines.append, interval_s=5.0, clock=lambda: now[0])
    progress.update(_p(done=0))  # nothing done yet: no line
    now[0] = 1.0
    progress.update(_p(done=1))
    assert lines == []
    now[0] = 5.5
    progress.update(_p(done=2))
    now[0] = 6.0
    progress.update(_p(done=3))
    assert len(lines) == 1 and "2/10" in lines[0]
    progress.update(_p(done=10, finished=True))  # the end of a pass is always printed
    assert len(lines) == 2 and "10/10" in lines[1]
    progress.update(_p(transport="http", done=1))  # another pass: its own clock
    assert len(lines) == 3


def test_make_progress_picks_by_terminal() -> None:
    assert make_progress(io.StringIO(), quiet=True) is None
    assert isinstance(make_progress(io.StringIO()), LineProgress)


def test_rich_progress_renders_every_pass() -> None:
    out = io.StringIO()
    progress = RichProgress(out, width=160)
    progress.update(_p(transport="http", done=10, finished=True))
    progress.update(_p(transport="ws", late=2, dropped=1))
    progress.close()
    text = out.getvalue()
    for part in ("http", "ws", "10/10", "3/10", "2/1", "done", "TTFT p50 ms"):
        assert part in text, text


def test_schedule_table_only_for_scheduled_runs() -> None:
    summary = {
        "load": {"mode": "open"},
        "transports": {
            "http": {
                "schedule": {
                    "intended": 9,
                    "started": 9,
                    "late": 1,
                    "dropped": 0,
                    "lag_max_ms": 120.5,
                },
                "schedule_lag_ms": {"p50": 0.4, "p99": 110.0},
                "rollout_ms": {"p50": 900.0},
                "rollout_uncorrected_ms": {"p50": 880.0},
            }
        },
    }
    table = schedule_table(summary)
    assert table is not None and table.row_count == 1
    assert schedule_table({"load": {"mode": "closed"}, "transports": {}}) is None
