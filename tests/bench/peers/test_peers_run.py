"""``python -m bench.peers --quick`` end to end, and ``make bench-peers``'s recipe.

``make test`` has no peers virtualenv: guidellm and aiperf must come out "not installed"
(not a crash), loopbench's requests must all be matched to the server's timing log, and
the target is then "not evaluated" (exit 3 under --check).  Whether it passes is
``make bench-peers``'s business on a real measurement, not a unit test's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.peers.figures import BEGIN_MARKER, END_MARKER
from tests.runs import bench_doc

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.timeout(320)
def test_quick_run_with_loopbench_only_reports_the_peers_as_not_installed(tmp_path: Path) -> None:
    bench = tmp_path / "BENCHMARKS.md"
    bench.write_text(f"# B\n{BEGIN_MARKER}\nold\n{END_MARKER}\ntail\n")
    out = tmp_path / "peers.json"
    venv = tmp_path / "no-such-venv"
    args = ("--quick", "--check", "--peers-venv", venv, "--benchmarks", bench)
    # No peer measured: the target cannot be evaluated, which --check reports as a miss.
    doc, printed = bench_doc("bench.peers", out, *args, code=3, timeout=300)
    assert doc["tools"]["guidellm"]["status"] == "not installed"
    assert doc["tools"]["aiperf"]["status"] == "not installed"
    assert doc["target"]["passed"] is None and "not evaluated" in doc["target"]["text"]
    # issue 39's precision target is at 64 streams: a quick run does not reach it
    assert doc["precision_target"]["passed"] is None and doc["passed"] is None
    assert "no loopbench row at 64 streams" in doc["precision_target"]["text"]
    assert doc["machine"]["cpu_count"] >= 1 and "cpu_steal_pct" in doc["machine"]
    runs = {(r["tool"], r["transport"], r["streams"]): r for r in doc["runs"]}
    assert {k for k in runs if k[0] == "loopbench"} == {
        ("loopbench", t, s) for t in ("chat", "ws", "http") for s in (1, 4)
    }
    # the Locust row: the same workload through `loopbench locust`, one worker
    assert {k for k in runs if k[0] == "loopbench-locust"} == {
        ("loopbench-locust", "chat", s) for s in (1, 4)
    }
    ours = ("loopbench", "loopbench-locust")
    for (tool, _, _), run in runs.items():
        if tool not in ours:
            assert run["status"] == "not installed"
            continue
        assert run["status"] == "ok", run
        f = run["figures"]
        # every measured request of the quick size (4 a level) matched to the server's log
        assert f["reported"] == 4 and f["matched"] == 4 and f["match_method"] == "response id"
        assert f["error_ms"]["count"] == 4 and f["error_ms"]["p50"] is not None
        # the server reports its first-token lateness, so the client-side error exists too
        assert f["client_error_ms"]["count"] == 4
        assert 500 < f["decode_tps"]["p50"] < 1500
        assert run["cpu_s"] > 0
    assert doc["timing_log"]["entries"] >= sum(
        r["requests"] + r["warmup"] for r in runs.values() if r["tool"] in ours
    )
    text = bench.read_text()
    assert text.startswith(f"# B\n{BEGIN_MARKER}\n") and text.endswith(f"{END_MARKER}\ntail\n")
    assert "| guidellm | 1 | not installed |" in text and "old" not in text
    assert "| tool | streams |" in printed
    assert (
        "every loopbench row at 64 streams: client-side error (client error − server read) p99 ≤ 0.5 ms"
        in text
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_bench_peers_installs_the_peers_into_their_own_venv_only(tmp_path: Path) -> None:
    venv = tmp_path / "peers-venv"
    done = subprocess.run(
        # -n: print the recipe only; -o: loopbench's own .venv counts as up to date, so what
        # is printed is what bench-peers itself does.
        # --no-print-directory and a clean MAKEFLAGS: under CI's `make test` this make is a
        # sub-make, which would otherwise add "make[1]: Entering directory" lines.
        [
            "make",
            "--no-print-directory",
            "-n",
            "-o",
            ".venv/.installed",
            "bench-peers",
            f"PEERS_VENV={venv}",
        ],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    installs = [ln for ln in lines if "pip install" in ln]
    assert installs and all(ln.startswith(f"{venv}/bin/python -m pip install") for ln in installs)
    assert not any(".venv/" in ln for ln in installs)
    torch = next(i for i, ln in enumerate(lines) if "torch==" in ln)
    peers = next(i for i, ln in enumerate(lines) if "guidellm==" in ln and "aiperf==" in ln)
    assert torch < peers  # the CPU torch first: the peers must find it satisfied
    assert lines[-1].startswith(".venv/bin/python -m bench.peers --check")
    assert f"--peers-venv {venv}" in lines[-1]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "guidellm" not in pyproject and "aiperf" not in pyproject
