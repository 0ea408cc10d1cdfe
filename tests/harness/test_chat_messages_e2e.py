"""``chat`` and ``messages`` end to end through ``loopbench run``, ``run --procs`` and
``gate --ab`` against the embedded reference server, paired with ``http`` and ``ws``."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.report.results import Run
from tests.runs import ROOT, loopbench
from tests.transports.conftest import loopbench_run

APIS = ("chat", "messages")
TINY = ROOT / "scenarios" / "tiny.yaml"

# the first test's time includes the module fixture's four commands, each bounded on its own
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_the_same_seeded_rollouts_over_chat_messages_and_http(paired: tuple[Run, str]) -> None:
    run, stdout = paired
    summary = run.summary
    assert summary is not None and summary["valid"], summary and summary["invalid_reasons"]
    keys = {}
    for name in (*APIS, "http", "ws"):
        t = summary["transports"][name]
        assert t["turns"]["errors"] == 0 and t["rollouts"]["errors"] == 0, name
        assert name in stdout
        mine = run.turns[run.turns["transport"] == name]
        keys[name] = sorted(zip(mine["rollout_id"], mine["turn_index"], strict=True))
        # every turn measured and honest: the stream carried what the usage reports
        assert (mine["first_output_ns"] >= mine["first_token_ns"]).all(), name
        assert (mine["first_token_ns"] > mine["sent_ns"]).all(), name
        assert not mine["decode_implausible"].any(), name
        assert (mine["sim_ttft_ms"] > 0).all(), name  # the server's sim_timing was copied
    assert keys["chat"] == keys["messages"] == keys["http"] == keys["ws"]
    # ... so each comparison with http is paired: chat and messages against WebSocket mode too
    pairs = {(c["baseline"], c["candidate"]): c for c in summary["comparisons"]}
    for name in (*APIS, "ws"):
        assert pairs[("http", name)]["paired"] is True


def test_input_and_cached_tokens_are_recorded_for_every_api(paired: tuple[Run, str]) -> None:
    turns = paired[0].turns
    by = {name: turns[turns["transport"] == name].set_index(["rollout_id", "turn_index"]).sort_index()
          for name in (*APIS, "http")}  # fmt: skip
    # the whole conversation every turn: the server counts the same input as for http
    assert (by["chat"]["input_tokens"] == by["http"]["input_tokens"]).all()
    ratio = by["messages"]["input_tokens"] / by["http"]["input_tokens"]
    assert ratio.between(0.95, 1.05).all(), ratio
    # Each transport's replay starts cold: the transports run one after the other over the
    # same rollouts, and a prefix cache keyed by content must not hand a later one the earlier
    # one's prompts (harness/client/rollout.py:pass_salt).
    for name, frame in by.items():
        first = frame[frame.index.get_level_values(1) == 0]
        assert (first["cached_tokens"] == 0).all(), (name, first["cached_tokens"].tolist())
    later = {name: frame[frame.index.get_level_values(1) > 0] for name, frame in by.items()}
    # the shared prefix cache serves every API; Messages reads it at its breakpoints
    for name in (*APIS, "http"):
        assert (later[name]["cached_tokens"] > 0).all(), name
        assert (later[name]["cached_tokens"] < later[name]["input_tokens"]).all(), name


#: the three other ways to measure, each a ``loopbench`` command of its own
OTHER_PATHS: dict[str, tuple[tuple[str, ...], float]] = {
    "procs": (("run", str(TINY), "--procs", "2", "--run-id", "procs"), 180),
    "ab": (("gate", "--ab", str(TINY), "--rounds", "1", "--run-id", "ab"), 240),
    "loc": (("locust", str(TINY), "--run-time", "60", "--run-id", "loc"), 180),
}


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[tuple[Run, str], Path, dict[str, subprocess.CompletedProcess[str]]]:
    """The paired run of the four transports, and the other paths' out folder and processes.

    The four commands share nothing (each starts its own embedded servers) and no test
    judges their timing, so they run side by side; each test reads one of them.
    """
    out = tmp_path_factory.mktemp("results")

    def paired_run() -> tuple[Run, str]:
        # tiny.yaml with two parallel calls per tool turn: a tool loop the chat message list
        # and the Messages content blocks must both carry whole
        sets = ["--set", "rollout.parallel_calls=2", "--set", "rollout.count=3"]
        return loopbench_run(out, "paired", "--transports", "chat,messages,http,ws", *sets)

    def other(name: str) -> subprocess.CompletedProcess[str]:
        args, timeout = OTHER_PATHS[name]
        # no limit on schedule lag: four commands side by side on two cores stall event
        # loops (a loaded machine once made `run --procs` exit 3, invalid), and these tests
        # judge turns, not timing
        lag = ("--set", "load.max_schedule_lag_ms=10000")
        # without reports (the Locust master too, through --no-report): the tests read turn
        # counts and exit codes
        return loopbench(
            *args,
            "--transports",
            "chat,messages",
            *lag,
            "--out",
            out,
            "-q",
            timeout=timeout,
            report=False,
        )

    with ThreadPoolExecutor(len(OTHER_PATHS)) as pool:
        others = pool.map(other, OTHER_PATHS)
        # in this process, so in the main thread (a run installs its signal handlers)
        paired = paired_run()
        procs = dict(zip(OTHER_PATHS, others, strict=True))
        return paired, out, procs


@pytest.fixture(scope="module")
def paired(
    runs: tuple[tuple[Run, str], Path, dict[str, subprocess.CompletedProcess[str]]],
) -> tuple[Run, str]:
    return runs[0]


@pytest.fixture(scope="module")
def other_paths(
    runs: tuple[tuple[Run, str], Path, dict[str, subprocess.CompletedProcess[str]]],
) -> tuple[Path, dict[str, subprocess.CompletedProcess[str]]]:
    return runs[1], runs[2]


def _api_turns(run_dir: Path) -> dict[str, dict[str, int]]:
    """The turn counts of Chat and Messages in a run folder's summary.json."""
    summary = json.loads((run_dir / "summary.json").read_text())
    return {name: summary["transports"][name]["turns"] for name in APIS}


@pytest.mark.parametrize("command", ["procs", "loc"])
def test_run_procs_and_loopbench_locust_run_the_new_transports(
    command: str,
    other_paths: tuple[Path, dict[str, subprocess.CompletedProcess[str]]],
) -> None:
    """``run --procs`` (procs) and ``loopbench locust`` (loc): every turn of both APIs, no error."""
    out, procs = other_paths
    proc = procs[command]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _api_turns(out / command) == {name: {"count": 8, "errors": 0} for name in APIS}


def test_gate_ab_accepts_the_new_transports(
    other_paths: tuple[Path, dict[str, subprocess.CompletedProcess[str]]],
) -> None:
    out, procs = other_paths
    proc = procs["ab"]
    # 0 (pass) or 1/3 (the rules' verdict on so few samples): what matters is that both
    # sides measured both transports without an error
    assert proc.returncode in (0, 1, 3), proc.stderr[-2000:]
    for side in ("baseline", "candidate"):
        for name, turns in _api_turns(out / f"ab-{side}").items():
            assert turns["count"] > 0 and turns["errors"] == 0, (side, name, turns)
