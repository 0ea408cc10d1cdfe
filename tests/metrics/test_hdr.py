from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.metrics.hdr import EXACT_MAX, UNITS, Histogram, SignedHistogram, write_hlog
from tests.hlog_reader import read_hlog

HOUR_US = 3_600_000_000


def test_layout_matches_hdrh_reference() -> None:
    rng = random.Random(7)
    ours = Histogram()
    ref = HdrHistogram(1, HOUR_US, 3)
    for _ in range(5000):
        v = min(int(rng.lognormvariate(9, 2.5)), HOUR_US)
        ours.record(v)
        ref.record_value(v)
    assert np.array_equal(ours.counts_array(), np.ctypeslib.as_array(ref.counts))
    ordered = sorted(ours.exact or [])
    assert len(ordered) == 5000
    bucketed = ours.copy()
    bucketed.exact = None  # what a histogram of more than EXACT_MAX values reports
    for p in (1, 25, 50, 90, 99, 99.9, 100):
        # 5000 values: nearest rank and hdrh's rounded rank agree at these percentiles
        assert bucketed.percentile(p) == ref.get_value_at_percentile(p)
        assert ours.percentile(p) == ordered[math.ceil(round(p * 50, 9)) - 1]


def test_record_ns_converts_to_microseconds_and_mean_is_exact() -> None:
    h = Histogram()
    h.record_ns(1_000_000)  # 1 ms
    h.record_ns(2_000_400)  # rounds to 2000 µs
    h.record_ns(1_499)  # rounds to 1 µs
    assert h.count == 3
    assert h.sum == 1000 + 2000 + 1
    assert h.mean / 1000 == pytest.approx(3001 / 3 / 1000)
    # below 2,048 µs every microsecond has its own bucket
    assert h.percentile_ms(50) == 1.0
    assert h.percentile_ms(100) == 2.0
    assert h.min == 1.0 and h.max == 2000.0


def test_percentile_reports_highest_equivalent_value_beyond_exact_max() -> None:
    h = Histogram()
    h.record_ns(10_000_000)  # 10,000 µs sits in a bucket 8 µs wide: [10000, 10007]
    assert h.percentile_ms(50) == 10.0  # the value itself while values are kept
    h.exact = None
    assert h.percentile_ms(50) == 10.007
    assert h.mean / 1000 == 10.0


def test_p99_of_60_samples_is_the_maximum() -> None:
    h = Histogram()
    values = [10_000 + 37 * i for i in range(60)]  # µs, above 2,048: buckets wider than 1 µs
    random.Random(3).shuffle(values)
    for v in values:
        h.record(v)
    assert h.percentile(99) == max(values)
    assert h.percentile(100) == max(values)
    # nearest rank: p50 of 60 values is the 30th smallest, p90 the 54th
    assert h.percentile(50) == sorted(values)[29]
    assert h.percentile(90) == sorted(values)[53]
    # also from the buckets alone (nearest rank there too): the maximum's bucket
    h.exact = None
    assert max(values) <= h.percentile(99) <= max(values) * 1.001


def test_p50_of_known_values() -> None:
    h = Histogram()
    for v in (4000, 1000, 3000, 2000):
        h.record(v)
    assert h.percentiles([50, 25, 75, 0]) == [2000.0, 1000.0, 3000.0, 1000.0]
    one = Histogram()
    one.record(123_457)
    assert one.percentiles([1, 50, 99]) == [123_457.0] * 3


def test_exact_values_survive_merge_and_encoding_up_to_exact_max() -> None:
    a, b = Histogram(), Histogram()
    for v in range(1, 61):
        (a if v % 2 else b).record(v * 1001)
    merged = Histogram.decode(a.encode()).merge(Histogram.decode(b.encode()))
    assert merged.exact is not None and sorted(merged.exact) == [v * 1001 for v in range(1, 61)]
    assert merged.percentile(99) == 60 * 1001
    big = Histogram()
    big.record_many_ns([1_000_000] * EXACT_MAX)
    assert big.exact is not None
    big.merge(merged)  # more than EXACT_MAX: the buckets alone from here on
    assert big.exact is None
    assert Histogram.decode(big.encode()).exact is None
    small = Histogram()
    small.record_many_ns([5_000_000] * (EXACT_MAX + 1))
    assert small.exact is None


def test_empty_histogram_reports_nan() -> None:
    h = Histogram()
    assert h.count == 0
    assert math.isnan(h.percentile_ms(50))
    assert math.isnan(h.mean)
    assert math.isnan(h.max)


def test_out_of_range_values_are_counted_and_clamped() -> None:
    h = Histogram()
    h.record_ns(-5_000)
    h.record_ns(2 * HOUR_US * 1000)
    h.record_ns(0)  # zero is in range: an on-time schedule lag
    assert (h.below, h.above, h.count) == (1, 1, 3)
    assert h.sum == HOUR_US  # clamped: 0 + top + 0
    assert h.percentile(100) >= HOUR_US
    assert h.percentile(0) == 0.0

    tps = Histogram("tps")
    assert tps.unit == "tps"
    tps.record(2_500_000.0)
    tps.record(-1.0)
    tps.record(999.6)
    assert (tps.below, tps.above, tps.count) == (1, 1, 3)
    assert tps.sum == UNITS["tps"] + 0 + 1000


def test_unknown_unit_rejected() -> None:
    with pytest.raises(ValueError, match="unit"):
        Histogram("ms")


def test_record_many_ns_equals_record_ns() -> None:
    values = [-3, 0, 999, 1_000_000, 123_456_789, 10**16]
    a = Histogram()
    a.record_many_ns(values)
    b = Histogram()
    for v in values:
        b.record_ns(v)
    assert a == b
    assert (a.below, a.above) == (1, 1)


def test_merge_requires_same_unit() -> None:
    with pytest.raises(ValueError, match="unit"):
        Histogram().merge(Histogram("tps"))


_values = st.lists(st.integers(min_value=-(10**6), max_value=2 * HOUR_US), max_size=60)


@settings(max_examples=60, deadline=None)
@given(_values, _values, _values)
def test_merged_histograms_equal_one_histogram_of_all_values(
    a: list[int], b: list[int], c: list[int]
) -> None:
    parts = []
    for values in (a, b, c):
        h = Histogram()
        for v in values:
            h.record(v)
        parts.append(h)
    merged = Histogram()
    for h in parts:
        merged.merge(h)
    whole = Histogram()
    for v in a + b + c:
        whole.record(v)
    assert merged == whole
    assert merged.below == whole.below and merged.above == whole.above
    assert merged.percentiles([50, 99]) == whole.percentiles([50, 99])


@settings(max_examples=40, deadline=None)
@given(_values, st.sampled_from(sorted(UNITS)))
def test_encode_decode_round_trip(values: list[int], unit: str) -> None:
    h = Histogram(unit)
    for v in values:
        h.record(v)
    back = Histogram.decode(h.encode())
    assert back == h
    assert back.unit == unit
    assert (back.below, back.above, back.sum) == (h.below, h.above, h.sum)


def test_decode_accepts_bare_hdrhistogram_payload() -> None:
    ref = HdrHistogram(1, HOUR_US, 3)
    for v in (100, 200, 300):
        ref.record_value(v)
    h = Histogram.decode(ref.encode().decode())
    assert h.count == 3
    assert h.sum == 600
    assert (h.below, h.above) == (0, 0)
    assert h.percentile(50) == 200


def test_decode_rejects_other_layouts() -> None:
    other = HdrHistogram(1, 60_000, 2)
    other.record_value(5)
    with pytest.raises(ValueError, match="digits"):
        Histogram.decode(other.encode().decode())
    with pytest.raises(ValueError, match="payload"):
        Histogram.decode("not-base64!")


def test_signed_histogram_percentiles() -> None:
    s = SignedHistogram()
    for ms in (-3, -1, 0, 2, 4):
        s.record_ns(ms * 1_000_000)
    assert s.count == 5
    assert s.percentile_ms(0) == -3.0
    assert s.percentile_ms(20) == -3.0
    assert s.percentile_ms(40) == -1.0
    assert s.percentile_ms(50) == 0.0  # nearest rank ceil(2.5) = 3
    assert s.percentile_ms(100) == 4.0  # exact while the values are kept
    s.pos.exact = None
    assert s.percentile_ms(100) == 4.001  # 4,000 µs: bucket 2 µs wide
    assert math.isnan(SignedHistogram().percentile_ms(50))


def _intervals() -> dict[str, list[tuple[float, float, Histogram]]]:
    rng = random.Random(3)
    tagged: dict[str, list[tuple[float, float, Histogram]]] = {}
    for tag in ("http.ttft", "ws.ttft"):
        for i in range(3):
            h = Histogram()
            for _ in range(50):
                h.record_ns(int(rng.uniform(1e6, 50e6)))
            if i == 1:
                h.record_ns(-1)
            tagged.setdefault(tag, []).append((float(i), float(i + 1), h))
    return tagged


def test_hlog_readable_by_hdrh_reader(tmp_path: Path) -> None:
    path = tmp_path / "x.hlog"
    tagged = _intervals()
    write_hlog(path, tagged, start_time_s=1_764_673_323.25)
    reader = HistogramLogReader(str(path), HdrHistogram(1, HOUR_US, 3))
    seen: dict[str, list[int]] = {}
    try:
        while (h := reader.get_next_interval_histogram()) is not None:
            seen.setdefault(h.get_tag(), []).append(h.get_total_count())
        assert reader.get_start_time_sec() == pytest.approx(1_764_673_323.25)
    finally:
        reader.close()
    assert seen == {tag: [h.count for _, _, h in iv] for tag, iv in tagged.items()}


def test_hlog_read_back_restores_counters(tmp_path: Path) -> None:
    path = tmp_path / "x.hlog"
    tagged = _intervals()
    write_hlog(path, tagged, start_time_s=1000.0)
    start, back = read_hlog(path)
    assert start == 1000.0
    assert back == tagged
    assert back["ws.ttft"][1][2].below == 1


def test_hlog_rejects_bad_intervals(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tag"):
        write_hlog(tmp_path / "x.hlog", {"a,b": [(0.0, 1.0, Histogram())]}, 0.0)
    with pytest.raises(ValueError, match="start"):
        write_hlog(tmp_path / "x.hlog", {"a": [(2.0, 1.0, Histogram())]}, 0.0)


def test_exact_values_take_four_bytes_each_and_go_past_exact_max() -> None:
    # 20 histograms per transport fill to EXACT_MAX: as a list of int objects (~40 bytes a
    # value) that made a long run's harness climb for its first 10,000 turns per transport.
    h = Histogram()
    for v in range(EXACT_MAX):
        h.record_ns(v * 1000 + 3_000_000)
    assert h.exact is not None and h.exact.itemsize == 4
    assert sys.getsizeof(h.exact) <= EXACT_MAX * 4 * 1.2 + 100
    top = Histogram()
    top.record_ns(10**18)  # clamped to the unit's top, 3.6e9 µs: still fits
    assert top.exact is not None and list(top.exact) == [UNITS["us"]]
    assert h.percentile(50) == 3_000 + EXACT_MAX // 2 - 1  # µs, exact
    h.record_ns(1)
    assert h.exact is None and h.count == EXACT_MAX + 1
