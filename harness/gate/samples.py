"""Per-sample latencies of a run, keyed so that two runs of the same scenario pair up.

The gate tests on samples, not on the summary's percentiles: a significance
test needs the spread.  Rollouts are keyed by ``(round, rollout_id)``, turns by
``(round, rollout_id, turn_index)``; the same seeded scenario gives the same
keys in every run, so baseline and candidate can be compared rollout by rollout.
Warm-up rollouts (``load.warmup_rollouts``) and failed records are left out,
as the summary leaves them out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas as pd

    from harness.report.results import Run

Key = tuple[int, ...]
FloatArray = npt.NDArray[np.float64]

#: pseudo-metric: per-turn measured TTFT minus the reference server's modelled TTFT (ms)
MEASUREMENT_ERROR = "measurement_error_ms"
#: pseudo-metric: the modelled TTFT itself (ms), for relative self-checks
MODELLED_TTFT = "modelled_ttft_ms"
#: not a latency: each turn's history size (first turns fingerprint the replayed rollouts)
HISTORY_TOKENS = "history_tokens"


@dataclass(frozen=True, slots=True)
class Samples:
    """One metric of one transport: ``values[i]`` was measured for ``keys[i]``."""

    keys: tuple[Key, ...]
    values: FloatArray

    def __post_init__(self) -> None:
        if len(self.keys) != self.values.size:
            raise ValueError(
                f"Samples: expected one key per value, got {len(self.keys)} keys "
                f"and {self.values.size} values"
            )

    def __len__(self) -> int:
        return int(self.values.size)

    @classmethod
    def of(cls, keys: list[Key], values: list[float] | FloatArray) -> Samples:
        return cls(tuple(keys), np.asarray(values, dtype=np.float64))

    def by_round(self) -> dict[int, FloatArray]:
        rounds: dict[int, list[float]] = {}
        for key, value in zip(self.keys, self.values.tolist(), strict=True):
            rounds.setdefault(key[0], []).append(value)
        return {r: np.asarray(v, dtype=np.float64) for r, v in sorted(rounds.items())}


@dataclass(frozen=True, slots=True)
class RunData:
    """What the gate needs of one run: its documents and its samples."""

    run_id: str
    manifest: Mapping[str, Any]
    summary: Mapping[str, Any] | None
    samples: Mapping[tuple[str, str], Samples] = field(default_factory=dict)
    #: completed (non-warm-up) rollouts per transport, from the CSVs
    rollouts: Mapping[str, int] = field(default_factory=dict)
    #: the results folder, for messages ("" for runs built in memory)
    path: str = ""

    @property
    def where(self) -> str:
        """How messages name this run: its folder, else its id."""
        return self.path or self.run_id

    @property
    def transports(self) -> list[str]:
        summary_t = list((self.summary or {}).get("transports", {}))
        return summary_t or sorted(self.rollouts)

    def get(self, transport: str, metric: str) -> Samples:
        return self.samples.get((transport, metric), Samples.of([], []))


def _warmup(manifest: Mapping[str, Any]) -> int:
    scenario = manifest.get("scenario") or {}
    load = scenario.get("load") or {} if isinstance(scenario, Mapping) else {}
    value = load.get("warmup_rollouts", 0) if isinstance(load, Mapping) else 0
    return int(value or 0)


def _keyed(df: pd.DataFrame, cols: list[str], values: pd.Series) -> Samples:
    keys = [tuple(int(x) for x in row) for row in df[cols].itertuples(index=False, name=None)]
    return Samples.of(keys, values.to_numpy(dtype=np.float64))


def run_data(run: Run) -> RunData:
    """Extract the gate's samples from a loaded results folder."""
    warm = _warmup(run.manifest)
    samples: dict[tuple[str, str], Samples] = {}
    rollouts: dict[str, int] = {}

    ro = run.rollouts
    if len(ro):
        ro = ro[ro["rollout_id"] >= warm]
    for transport, g in ro.groupby("transport", sort=True) if len(ro) else ():
        name = str(transport)
        ok = g[(g["status"] == "completed") & (g["end_ns"] > 0)]
        start = ok["intended_start_ns"].where(ok["intended_start_ns"] > 0, ok["start_ns"])
        samples[(name, "rollout_ms")] = _keyed(
            ok, ["round", "rollout_id"], (ok["end_ns"] - start) / 1e6
        )
        rollouts[name] = len(ok)

    tu = run.turns
    if len(tu):
        tu = tu[tu["rollout_id"] >= warm]
    key_cols = ["round", "rollout_id", "turn_index"]
    for transport, g in tu.groupby("transport", sort=True) if len(tu) else ():
        name = str(transport)
        ok = g[g["status"].isin(("completed", "incomplete")) & (g["sent_ns"] > 0)]
        first = ok[ok["first_token_ns"] > 0]
        ttft = (first["first_token_ns"] - first["sent_ns"]) / 1e6
        samples[(name, "ttft_ms")] = _keyed(first, key_cols, ttft)
        fe = ok[ok["first_event_ns"] > 0]
        samples[(name, "ttfb_ms")] = _keyed(
            fe, key_cols, (fe["first_event_ns"] - fe["sent_ns"]) / 1e6
        )
        dn = ok[ok["done_ns"] > 0]
        samples[(name, "turn_ms")] = _keyed(dn, key_cols, (dn["done_ns"] - dn["sent_ns"]) / 1e6)
        tp = ok[(ok["output_tokens"] >= 2) & (ok["last_token_ns"] > ok["first_token_ns"])]
        samples[(name, "tpot_ms")] = _keyed(
            tp,
            key_cols,
            (tp["last_token_ns"] - tp["first_token_ns"]) / (tp["output_tokens"] - 1) / 1e6,
        )
        samples[(name, HISTORY_TOKENS)] = _keyed(ok, key_cols, ok["history_tokens"])
        sim = first[first["sim_ttft_ms"] >= 0]
        modelled = sim["sim_ttft_ms"].astype(np.float64)
        measured = (sim["first_token_ns"] - sim["sent_ns"]) / 1e6
        samples[(name, MEASUREMENT_ERROR)] = _keyed(sim, key_cols, measured - modelled)
        samples[(name, MODELLED_TTFT)] = _keyed(sim, key_cols, modelled)

    return RunData(
        run_id=run.run_id,
        manifest=run.manifest,
        summary=run.summary,
        samples=samples,
        rollouts=rollouts,
        path=str(run.path),
    )
