"""bench/options.py: a bench's options dataclass from its parsed command line (pure)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from bench.options import options_from
from tools.real_engine.run import Options
from tools.real_engine.simulate import SIM_PLACEMENT, SimOptions


@dataclass(frozen=True)
class _Opts:
    out: Path = Path("default")
    requests: int = 60
    quick: bool = False


def test_same_named_flags_fill_fields_overrides_win_and_the_rest_keep_defaults() -> None:
    args = argparse.Namespace(out=Path("x"), requests=5, check=True)
    assert options_from(_Opts, args) == _Opts(out=Path("x"), requests=5)
    assert options_from(_Opts, args, requests=1, quick=True) == _Opts(Path("x"), 1, True)


def test_the_real_engine_options_the_simulation_shares_are_carried_over() -> None:
    sim = SimOptions(out=Path("o"), requests=7, output_tokens=9, run_timeout_s=1.5)
    # the placement too: the simulation's own default (pinned) where the check's differs
    assert options_from(Options, sim) == Options(
        out=Path("o"), requests=7, output_tokens=9, run_timeout_s=1.5, placement=SIM_PLACEMENT
    )
