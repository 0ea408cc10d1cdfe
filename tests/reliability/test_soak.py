"""The soak's pure parts: its scenario is valid, its growth measure ignores warm-up and noise."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.tools.soak import growth_mib, soak_scenario
from harness.wire.transports import TRANSPORT_NAMES
from harness.workload.scenario import load_scenario


def test_the_soak_scenario_is_a_valid_mixed_scenario(tmp_path: Path) -> None:
    path = tmp_path / "soak.yaml"
    path.write_text(yaml.safe_dump(soak_scenario(240, seed=3)))
    scenario = load_scenario(path)
    assert list(scenario.transports) == list(TRANSPORT_NAMES)
    assert scenario.load.order == "interleaved" and scenario.load.rounds > 1
    # duration_s is per transport in a closed loop: together they make the soak's length
    assert scenario.load.duration_s is not None
    assert abs(scenario.load.duration_s * len(TRANSPORT_NAMES) - 240) < 0.01


def test_growth_ignores_the_warm_up_and_sees_a_leak() -> None:
    mib = 1024
    flat = [10 * mib] * 5 + [50 * mib + (i % 3) * mib for i in range(30)]
    assert growth_mib(flat) == 0.0  # the warm-up climb (first quarter) is not growth
    leak = [50 * mib + i * mib for i in range(40)]
    g = growth_mib(leak)
    assert g is not None and 15 <= g <= 25
    assert growth_mib([mib] * 5) is None  # too few samples to say
