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
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from harness.metrics import definitions as D
from harness.metrics.results_model import Manifest, Summary
from harness.metrics.validity import RolloutKey
from harness.report import analysis as A
from harness.wire.plural import counted

if TYPE_CHECKING:
    import pandas as pd

    from harness.report.results import Run

Key = tuple[int, ...]
FloatArray = npt.NDArray[np.float64]

#: per-turn measured TTFT minus the reference server's modelled TTFT (ms), from the table
MEASUREMENT_ERROR = D.get("measurement_error_ms").name
#: pseudo-metric: the modelled TTFT itself (ms), for relative self-checks
MODELLED_TTFT = "modelled_ttft_ms"


@dataclass(frozen=True, slots=True)
class Samples:
    """One metric of one transport: ``values[i]`` was measured for ``keys[i]``."""

    keys: tuple[Key, ...]
    values: FloatArray

    def __post_init__(self) -> None:
        if len(self.keys) != self.values.size:
            raise ValueError(
                f"Samples: expected one key per value, got {counted(len(self.keys), 'key')} "
                f"and {counted(self.values.size, 'value')}"
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
    manifest: Manifest
    summary: Summary | None
    samples: Mapping[tuple[str, str], Samples] = field(default_factory=dict)
    #: completed (non-warm-up) rollouts per transport, from the CSVs
    rollouts: Mapping[str, int] = field(default_factory=dict)
    #: per transport, :func:`harness.report.analysis.first_turns`
    first_turns: Mapping[str, Mapping[RolloutKey, float]] = field(default_factory=dict)
    #: the results folder, for messages ("" for runs built in memory)
    path: str = ""

    @property
    def where(self) -> str:
        """How messages name this run: its folder, else its id."""
        return self.path or self.run_id

    @property
    def transports(self) -> list[str]:
        summary_t = list(self.summary.transports) if self.summary is not None else []
        return summary_t or sorted(self.rollouts)

    def get(self, transport: str, metric: str) -> Samples:
        return self.samples.get((transport, metric), Samples.of([], []))


def _keyed(df: pd.DataFrame, cols: list[str], values: pd.Series) -> Samples:
    keys = [tuple(int(x) for x in row) for row in df[cols].itertuples(index=False, name=None)]
    return Samples.of(keys, values.to_numpy(dtype=np.float64))


#: how a record kind's samples are keyed so that two runs of one scenario pair up
KEY_COLUMNS: dict[D.RecordKind, list[str]] = {
    "rollout": ["round", "rollout_id"],
    "turn": ["round", "rollout_id", "turn_index"],
}


def run_data(run: Run) -> RunData:
    """Extract the gate's samples from a loaded results folder."""
    frames: dict[D.RecordKind, pd.DataFrame] = {
        "rollout": A.rollout_table(run),
        "turn": A.turn_table(run),
    }
    # the metrics its rules may name, and the self-check's
    metrics = [D.get(name) for name in (*D.gate_metrics(), MEASUREMENT_ERROR)]
    samples: dict[tuple[str, str], Samples] = {}
    for kind, df in frames.items():
        for transport, g in df.groupby("transport", sort=True) if len(df) else ():
            name = str(transport)
            for m in metrics:
                if m.record != kind:
                    continue
                values = D.column(m, g).dropna()
                rows = g.loc[values.index]
                samples[(name, m.name)] = _keyed(rows, KEY_COLUMNS[kind], values)
                if m.name == MEASUREMENT_ERROR:
                    modelled = rows["sim_ttft_ms"].astype(np.float64)
                    samples[(name, MODELLED_TTFT)] = _keyed(rows, KEY_COLUMNS[kind], modelled)
    ro, turns = frames["rollout"], frames["turn"]
    return RunData(
        run_id=run.run_id,
        manifest=run.manifest_model,
        summary=run.summary_model,
        samples=samples,
        rollouts={str(t): int(g["ok"].sum()) for t, g in ro.groupby("transport", sort=True)},
        first_turns={str(t): A.first_turns(turns, str(t)) for t in turns["transport"].unique()},
        path=str(run.path),
    )
