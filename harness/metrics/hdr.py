"""The project's one histogram layout: HdrHistogram, 3 significant digits (docs/metrics.md §2).

Two units share the class: ``"us"`` (latencies, 0 … 3,600,000,000 µs = 1 h) and ``"tps"``
(integer tokens/s, 0 … 1,000,000).  One bucket layout per unit, so histograms of any process
or host merge losslessly.  Out-of-range values are counted in ``below``/``above`` and clamped,
never dropped; zero is in range (an exactly on-time schedule lag of 0 is a measurement).

Percentiles use the nearest rank, the ``ceil(p/100 * n)``-th smallest value, as HdrHistogram's
Java implementation does (the Python ``hdrh`` rounds the rank, which drops the maximum from
p99 of fewer than 100 values).  Up to :data:`EXACT_MAX` values are also kept, and the
order statistics are exact while they are (merges keep them within that count); the exact sum
makes ``mean`` exact.  ``below``, ``above``, the sum and the kept values travel after the
standard payload (:meth:`Histogram.encode`); ``.hlog`` files carry the buckets, and the counters
in a comment line before each interval, which standard readers skip.
"""

from __future__ import annotations

import functools
import math
import time
from array import array
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from harness.wire.plural import counted

SIGNIFICANT_DIGITS = 3
LOWEST = 1
#: unit -> highest trackable value
UNITS: dict[str, int] = {"us": 3_600_000_000, "tps": 1_000_000}
#: divisor turning a recorded value into the value of an hlog's Interval_Max column
#: (HdrHistogram convention: latencies are logged in milliseconds)
_HLOG_MAX_RATIO = {"us": 1000.0, "tps": 1.0}

# With 3 significant digits HdrHistogram uses 2048 sub-buckets (half = 1024,
# magnitude 10).  _add() computes the counts index inline with these instead
# of calling hdrh's record_value, which is several times slower (bin()-based clz).
_SUB_BUCKET_HALF_MAG = 10
_SUB_BUCKET_HALF = 1 << _SUB_BUCKET_HALF_MAG
_SUB_BUCKET_BITS = _SUB_BUCKET_HALF_MAG + 1

_SUFFIX_SEP = "|"

#: a histogram keeps its recorded values (and reports exact order statistics) up to this count
EXACT_MAX = 10_000
#: the array type of those values: unsigned, at least 32 bits (the largest top, 3.6e9 µs, fits)
_EXACT_TYPE = "I" if array("I").itemsize >= 4 else "L"


def nearest_rank(p: float, n: int) -> int:
    """1-based rank of percentile ``p`` (0–100) among ``n`` values: ``ceil(p/100 * n)``, in [1, n]."""
    # rounding first keeps float noise (e.g. 90 * 10 / 100 = 9.000000000000002) from moving a rank
    return min(n, max(1, math.ceil(round(min(max(p, 0.0), 100.0) * n / 100.0, 9))))


def _unit_for_highest(highest: int) -> str:
    for unit, top in UNITS.items():
        if top == highest:
            return unit
    raise ValueError(
        f"histogram payload: highest trackable value: expected one of "
        f"{sorted(UNITS.values())}, got {highest}"
    )


class Histogram:
    """An HdrHistogram (µs or tokens/s) with out-of-range counters and an exact sum."""

    __slots__ = ("_counts", "above", "below", "count", "exact", "highest", "sum", "unit")

    def __init__(self, unit: str = "us") -> None:
        if unit not in UNITS:
            raise ValueError(f"histogram unit: expected one of {sorted(UNITS)}, got {unit!r}")
        self.unit = unit
        self.highest = UNITS[unit]
        # Counts live in a plain list, in hdrh's index layout: a list increment is
        # ~3x cheaper than one on hdrh's ctypes array, and recording is the hot
        # path.  An hdrh histogram is materialised only to encode.
        self._counts: list[int] = [0] * _layout(unit).counts_len
        #: number of recorded values (out-of-range ones included, at their clamped value)
        self.count = 0
        #: exact sum of the recorded (rounded, clamped) values, in the unit
        self.sum = 0
        self.below = 0
        self.above = 0
        #: the recorded (rounded, clamped) values while ``count <= EXACT_MAX``, else None.
        #: Unsigned machine integers, 4 bytes a value (every unit's top fits in 32 bits): a
        #: list of ints costs ~40, and 20 histograms per transport filling to EXACT_MAX made
        #: the harness's memory climb for the first 10,000 turns of each transport
        #: (docs/reliability.md, *Soak*).
        self.exact: array[int] | None = array(_EXACT_TYPE)

    # -- recording ---------------------------------------------------------------------------

    def record(self, value: float) -> None:
        """Record ``value`` in this histogram's unit (rounded to an integer)."""
        if value < 0:
            self._add(-1)
        else:
            self._add(value if value.__class__ is int else round(float(value)))

    def record_ns(self, ns: int) -> None:
        """Record a duration given in nanoseconds (rounded to the nearest µs).

        Any negative duration counts as ``below``, even one that would round to 0:
        it means two timestamps were taken out of order, which must not go unseen.
        """
        self._add((ns + 500) // 1000 if ns >= 0 else -1)

    def _add(self, v: int) -> None:
        """Count ``v`` (in this histogram's unit); out of range counts as ``below``/``above``."""
        if v < 0 or v > self.highest:
            v = self._clamp(v)
        b = v.bit_length() - _SUB_BUCKET_BITS
        if b > 0:
            self._counts[((b + 1) << _SUB_BUCKET_HALF_MAG) + (v >> b) - _SUB_BUCKET_HALF] += 1
        else:
            self._counts[v] += 1
        exact = self.exact
        if exact is not None:
            if self.count < EXACT_MAX:
                exact.append(v)
            else:
                self.exact = None
        self.count += 1
        self.sum += v

    def record_many_ns(self, values: Iterable[int]) -> None:
        """Record many nanosecond durations (e.g. every inter-token gap of a response)."""
        counts = self._counts
        highest = self.highest
        exact = self.exact
        n = 0
        total = 0
        for ns in values:
            v = (ns + 500) // 1000 if ns >= 0 else -1
            if v < 0 or v > highest:
                v = self._clamp(v)
            b = v.bit_length() - _SUB_BUCKET_BITS
            if b > 0:
                counts[((b + 1) << _SUB_BUCKET_HALF_MAG) + (v >> b) - _SUB_BUCKET_HALF] += 1
            else:
                counts[v] += 1
            if exact is not None:
                exact.append(v)
            n += 1
            total += v
        self.count += n
        self.sum += total
        if exact is not None and len(exact) > EXACT_MAX:
            self.exact = None

    def _clamp(self, v: int) -> int:
        if v < 0:
            self.below += 1
            return 0
        self.above += 1
        return self.highest

    # -- reading -----------------------------------------------------------------------------

    def counts_array(self) -> np.ndarray:
        """The counts in hdrh's index layout (a copy)."""
        return np.array(self._counts, dtype=np.uint64)

    @property
    def min(self) -> float:
        """The smallest recorded value while the values are kept, else the lowest equivalent
        value of its bucket (NaN when empty)."""
        return self.value_at_rank(1, lowest=True)

    @property
    def max(self) -> float:
        """The largest recorded value while the values are kept, else the highest equivalent
        value of its bucket (NaN when empty)."""
        return self.value_at_rank(self.count)

    @property
    def mean(self) -> float:
        """Exact mean of the recorded integer values (NaN when empty)."""
        return self.sum / self.count if self.count else math.nan

    def value_at_rank(self, rank: int, *, lowest: bool = False) -> float:
        """The ``rank``-th smallest value (1-based): exact while the values are kept, else
        the highest (or ``lowest``) equivalent value of its bucket."""
        return self._at_ranks([(rank, lowest)])[0]

    def percentiles(self, ps: Sequence[float]) -> list[float]:
        """Values at percentiles ``ps`` (0–100) in the unit; NaN when empty.

        Nearest rank (:func:`nearest_rank`).  While the values are kept
        (``exact``), the value at that rank; beyond, HdrHistogram semantics: the
        highest value equivalent (same bucket) to the recorded value at that rank,
        so exact below 2,048 units and within 0.1 % above; percentile 0 gives the
        lowest equivalent value of the minimum.
        """
        return self._at_ranks([(nearest_rank(p, max(1, self.count)), p <= 0) for p in ps])

    def _at_ranks(self, ranks: Sequence[tuple[int, bool]]) -> list[float]:
        """The values at ``(rank, lowest)`` pairs, sorting or summing the counts once."""
        if not self.count:
            return [math.nan] * len(ranks)
        if self.exact is not None:
            ordered = sorted(self.exact)
            return [float(ordered[min(self.count, max(1, r)) - 1]) for r, _ in ranks]
        cum = np.cumsum(self.counts_array())
        idx = np.searchsorted(cum, [max(1, r) for r, _ in ranks], side="left")
        return [_at_index(self, int(i), low) for i, (_, low) in zip(idx, ranks, strict=True)]

    def percentile(self, p: float) -> float:
        return self.percentiles((p,))[0]

    def percentile_ms(self, p: float) -> float:
        return self.percentile(p) / 1000.0

    def percentiles_ms(self, ps: Sequence[float]) -> list[float]:
        return [v / 1000.0 for v in self.percentiles(ps)]

    # -- combining ---------------------------------------------------------------------------

    def merge(self, other: Histogram) -> Histogram:
        """Add ``other`` into this histogram (lossless: same layout); returns self."""
        if other.unit != self.unit:
            raise ValueError(f"histogram merge: expected unit {self.unit!r}, got {other.unit!r}")
        if other.count:
            self._counts = [a + b for a, b in zip(self._counts, other._counts, strict=True)]
            if self.exact is None or other.exact is None or self.count + other.count > EXACT_MAX:
                self.exact = None
            else:
                self.exact = self.exact + other.exact
        self.count += other.count
        self.sum += other.sum
        self.below += other.below
        self.above += other.above
        return self

    def copy(self) -> Histogram:
        return Histogram(self.unit).merge(self)

    def snapshot(self) -> tuple[str, list[int]]:
        """``(unit, a copy of the bucket counts)``: what :meth:`from_counts` takes back.  One
        list copy in C, so another thread may take it while this one records."""
        return self.unit, list(self._counts)

    @classmethod
    def from_counts(cls, unit: str, counts: Sequence[int]) -> Histogram:
        """A histogram of bucket ``counts`` alone (e.g. the difference of two
        :meth:`snapshot` s: an interval's recordings): HdrHistogram percentiles, no exact
        values, sum and mean unknown (0)."""
        h = cls(unit)
        if len(counts) != len(h._counts):
            raise ValueError(
                f"histogram counts: expected {len(h._counts)} buckets of unit {unit!r}, "
                f"got {len(counts)}"
            )
        h._counts = list(counts)
        if min(h._counts) < 0:
            raise ValueError("histogram counts: expected no negative count")
        h.count = sum(h._counts)
        h.exact = None
        return h

    def __eq__(self, other: object) -> bool:
        # The kept values are a cache of what the counts record more coarsely: two
        # histograms of the same recordings are equal whether or not one lost them
        # (an .hlog file carries only the buckets).
        if not isinstance(other, Histogram):
            return NotImplemented
        return (
            self.unit == other.unit
            and self.count == other.count
            and self.sum == other.sum
            and self.below == other.below
            and self.above == other.above
            and self._counts == other._counts
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Histogram(unit={self.unit!r}, count={self.count}, below={self.below}, "
            f"above={self.above}, mean={self.mean:.1f})"
        )

    # -- encoding ----------------------------------------------------------------------------

    def to_hdrh(self) -> Any:
        """A new ``hdrh.histogram.HdrHistogram`` holding these counts."""
        h = HdrHistogram(LOWEST, self.highest, SIGNIFICANT_DIGITS)
        arr = self.counts_array()
        np.ctypeslib.as_array(h.counts)[:] = arr
        nz = np.flatnonzero(arr)
        if len(nz):
            # hdrh sizes its encoding from max_value and reports min/max from them
            h.set_internal_tacking_values(int(nz[0]), int(nz[-1]), self.count)
        return h

    def payload(self) -> str:
        """The standard HdrHistogram V2 compressed base64 payload (counts only)."""
        return str(self.to_hdrh().encode().decode("ascii"))

    def encode(self) -> str:
        """``<HdrHistogram base64 payload>|unit=us;below=0;above=0;sum=123[;values=3,1,2]``.

        The part before ``|`` is the standard payload any HdrHistogram tool can
        decode; the suffix carries what that format has no field for, including the
        kept values (``exact``) when there are any.
        """
        values = f";values={','.join(map(str, self.exact))}" if self.exact and self.count else ""
        return (
            f"{self.payload()}{_SUFFIX_SEP}unit={self.unit};below={self.below};"
            f"above={self.above};sum={self.sum}{values}"
        )

    @classmethod
    def decode(cls, s: str) -> Histogram:
        """Inverse of :meth:`encode`; also accepts a bare HdrHistogram payload.

        A bare payload has no counters (0) and its sum is estimated from bucket
        midpoints.  Payloads of any other layout are rejected: merging them
        would not be lossless.
        """
        payload, sep, suffix = s.strip().partition(_SUFFIX_SEP)
        meta: dict[str, str] = {}
        if sep:
            for item in suffix.split(";"):
                key, eq, value = item.partition("=")
                if not eq:
                    raise ValueError(f"histogram encoding: expected key=value, got {item!r}")
                meta[key] = value
        try:
            src = HdrHistogram.decode(payload.encode("ascii"))
        except Exception as exc:
            raise ValueError(f"histogram encoding: undecodable payload ({exc!r})") from exc
        if src.lowest_trackable_value != LOWEST or src.significant_figures != SIGNIFICANT_DIGITS:
            raise ValueError(
                f"histogram payload: expected lowest={LOWEST}, digits={SIGNIFICANT_DIGITS}, got "
                f"lowest={src.lowest_trackable_value}, digits={src.significant_figures}"
            )
        unit = _unit_for_highest(int(src.highest_trackable_value))
        if meta.get("unit", unit) != unit:
            raise ValueError(
                f"histogram encoding: unit {meta['unit']!r} does not match payload range ({unit})"
            )
        out = cls(unit)
        counts = np.ctypeslib.as_array(src.counts)
        n = len(out._counts)
        values: list[int] = counts[:n].tolist()
        values.extend([0] * (n - len(values)))
        out._counts = values
        out.count = sum(out._counts)
        out.below = int(meta.get("below", 0))
        out.above = int(meta.get("above", 0))
        out.sum = int(meta["sum"]) if "sum" in meta else round(src.get_mean_value() * out.count)
        if "values" in meta:
            try:
                exact = array(_EXACT_TYPE, [int(v) for v in meta["values"].split(",")])
            except (ValueError, OverflowError):
                raise ValueError(
                    "histogram encoding: values: expected comma-separated integers"
                ) from None
            if len(exact) != out.count:
                raise ValueError(
                    f"histogram encoding: values: expected {counted(out.count, 'value')} (the payload's "
                    f"count), got {len(exact)}"
                )
            out.exact = exact
        else:
            out.exact = array(_EXACT_TYPE) if out.count == 0 else None
        return out


@functools.cache
def _layout(unit: str) -> Any:
    """An empty hdrh histogram of ``unit``: the index <-> value arithmetic of the layout."""
    return HdrHistogram(LOWEST, UNITS[unit], SIGNIFICANT_DIGITS)


def _at_index(hist: Histogram, idx: int, lowest: bool) -> float:
    """The highest (or ``lowest``) value equivalent to bucket ``idx``'s."""
    layout = _layout(hist.unit)
    value = layout.get_value_from_index(idx)
    if lowest:
        return float(layout.get_lowest_equivalent_value(value))
    return float(layout.get_highest_equivalent_value(value))


class SignedHistogram:
    """A signed duration distribution (e.g. measured − modelled TTFT) as two histograms.

    ``pos`` holds values ≥ 0, ``neg`` the magnitudes of negative values; the
    percentile walks the negative side from its largest magnitude down.
    """

    __slots__ = ("neg", "pos")

    def __init__(self) -> None:
        self.pos = Histogram("us")
        self.neg = Histogram("us")

    def record_ns(self, ns: int) -> None:
        if ns < 0:
            self.neg.record_ns(-ns)
        else:
            self.pos.record_ns(ns)

    @property
    def count(self) -> int:
        return self.pos.count + self.neg.count

    def merge(self, other: SignedHistogram) -> SignedHistogram:
        self.pos.merge(other.pos)
        self.neg.merge(other.neg)
        return self

    def percentile_ms(self, p: float) -> float:
        n = self.count
        if not n:
            return math.nan
        rank = nearest_rank(p, n)
        n_neg = self.neg.count
        if rank <= n_neg:
            # mirrored: the bucket's lowest magnitude is its highest signed value
            return -self.neg.value_at_rank(n_neg - rank + 1, lowest=True) / 1000.0
        return self.pos.value_at_rank(rank - n_neg) / 1000.0


# -- interval logs ---------------------------------------------------------------------------


def write_hlog(
    path: str | Path,
    tagged: Mapping[str, Sequence[tuple[float, float, Histogram]]],
    start_time_s: float,
) -> None:
    """Write interval histograms in the HdrHistogram log format (version 1.3, tagged).

    ``tagged`` maps a tag to ``(start_s, end_s, histogram)`` intervals whose times
    are seconds relative to ``start_time_s`` (seconds since the epoch).  Lines
    are ordered by interval start, as log readers expect.  Before each interval
    line a ``#[loopbench-counters: ...]`` comment carries below/above/sum.
    """
    rows: list[tuple[float, str, float, Histogram]] = []
    for tag, intervals in tagged.items():
        if any(c in tag for c in ", \n\r"):
            raise ValueError(f"hlog tag: expected no comma or whitespace, got {tag!r}")
        for start_s, end_s, hist in intervals:
            if start_s < 0 or end_s < start_s:
                raise ValueError(
                    f"hlog interval {tag!r}: expected 0 <= start <= end, got {start_s}, {end_s}"
                )
            rows.append((start_s, tag, end_s, hist))
    rows.sort(key=lambda r: (r[0], r[1]))
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(start_time_s))
    lines = [
        "#[Histogram log format version 1.3]",
        f"#[StartTime: {start_time_s:.3f} (seconds since epoch), {stamp}]",
        f"#[BaseTime: {start_time_s:.3f} (seconds since epoch)]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]
    for start_s, tag, end_s, hist in rows:
        lines.append(
            f"#[loopbench-counters: Tag={tag}, unit={hist.unit}, below={hist.below}, "
            f"above={hist.above}, sum={hist.sum}]"
        )
        top = hist.max if hist.count else 0.0
        lines.append(
            f"Tag={tag},{start_s:.3f},{end_s - start_s:.3f},"
            f"{top / _HLOG_MAX_RATIO[hist.unit]:.3f},{hist.payload()}"
        )
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
