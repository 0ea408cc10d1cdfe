"""CPU steal between two /proc/stat readings (pure arithmetic on the counters)."""

from __future__ import annotations

from pathlib import Path

from bench.selfbench.cpu_steal import read_cpu_times, steal_percent


def _stat(tmp_path: Path, line: str) -> Path:
    p = tmp_path / "stat"
    p.write_text(line + "\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 0\n")
    return p


def test_steal_is_the_stolen_share_of_all_cpu_time(tmp_path: Path) -> None:
    before = read_cpu_times(_stat(tmp_path, "cpu  100 0 50 800 10 0 5 35 7 0"))
    after = read_cpu_times(_stat(tmp_path, "cpu  160 0 70 900 10 0 10 85 9 0"))
    assert before == (100, 0, 50, 800, 10, 0, 5, 35, 7, 0)
    # Deltas: user 60, system 20, idle 100, softirq 5, steal 50 -> 50 of 235; guest not added.
    assert steal_percent(before, after) == round(100 * 50 / 235, 2)


def test_unknown_without_proc_stat_or_elapsed_time(tmp_path: Path) -> None:
    assert read_cpu_times(tmp_path / "missing") is None
    assert read_cpu_times(_stat(tmp_path, "intr 1 2 3")) is None
    same = (1, 2, 3, 4, 5, 6, 7, 8)
    assert steal_percent(same, same) is None
    assert steal_percent(None, same) is None
    assert steal_percent((1, 2, 3), (4, 5, 6)) is None


def test_this_machine_reads_or_says_unknown() -> None:
    now = read_cpu_times()
    if now is not None:  # Linux
        assert len(now) >= 8 and all(x >= 0 for x in now)
