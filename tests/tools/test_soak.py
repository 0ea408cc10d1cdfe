"""The soak's pure parts: its scenario is valid, its growth measure ignores warm-up and noise."""

from __future__ import annotations

from pathlib import Path

import yaml

from harness.wire.transports import TRANSPORT_NAMES
from harness.workload.scenario import load_scenario
from tools.soak import SIDE_MIX, SideMix, slope_per_h, soak_scenario, store_rows, warmup_s


def test_the_soak_scenario_is_a_valid_mixed_scenario(tmp_path: Path) -> None:
    path = tmp_path / "soak.yaml"
    path.write_text(yaml.safe_dump(soak_scenario(240, seed=3)))
    scenario = load_scenario(path)
    assert list(scenario.transports) == list(TRANSPORT_NAMES)
    assert scenario.load.order == "interleaved" and scenario.load.rounds > 1
    # duration_s is per transport in a closed loop: together they make the soak's length
    assert scenario.load.duration_s is not None
    assert abs(scenario.load.duration_s * len(TRANSPORT_NAMES) - 240) < 0.01


def test_the_slope_is_a_line_through_every_sample_not_first_versus_last() -> None:
    # 1.5 MiB per minute with noise: 90 MiB/h, whatever the noise at either end
    pts = [
        (t, 50 + 1.5 * t / 60 + (3 if i % 5 == 0 else 0)) for i, t in enumerate(range(0, 240, 5))
    ]
    slope = slope_per_h(pts)
    assert slope is not None and 85 <= slope <= 95
    flat = [(float(t), 50.0 + (t % 3)) for t in range(0, 240, 5)]
    flat_slope = slope_per_h(flat)
    assert flat_slope is not None and abs(flat_slope) < 2
    assert slope_per_h(pts[:5]) is None  # too few samples to say
    assert warmup_s(240) == 60 and warmup_s(60) == 30


def test_the_side_mix_is_a_table_of_endpoints() -> None:
    names = [r.name for r in SIDE_MIX]
    assert len(names) == len(set(names))
    assert all(r.path.startswith("/") and r.every_s > 0 for r in SIDE_MIX)


def test_store_rows_reads_a_store_file(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "s.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE responses (id TEXT, items BLOB)")
    db.execute("INSERT INTO responses VALUES ('a', x'0102')")
    db.commit()
    db.close()
    assert store_rows(path) == {"rows": 1, "item_bytes": 2}
    assert store_rows(tmp_path / "missing.sqlite3") is None


def test_every_endpoint_of_the_side_mix_answers_the_real_server(server_url: str) -> None:
    # One request of each line, in table order, against a real reference server: a line whose
    # endpoint moved or whose body the server refuses would count a 4xx here and in every soak.
    side = SideMix(server_url)
    for request in SIDE_MIX:
        side._send(request)
    assert all(list(c) == ["200"] for c in side.counts.values()), side.counts
    assert {"retrieve", "input_items", "background", "delete", "compact"} <= set(side.counts)
    assert side.last_id is None  # the delete removed the response the create stored
