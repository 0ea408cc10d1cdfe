"""The interop table: per case and mode, runs that passed, turns, errors, the first problem."""

from __future__ import annotations

from dataclasses import dataclass, field

from tools.interop.cases import Case


@dataclass(slots=True)
class Tally:
    runs: int = 0
    ok: int = 0
    turns: list[int] = field(default_factory=list)
    errors: int = 0
    first_problem: str = ""

    def add(self, problems: list[str], turns: int) -> None:
        self.runs += 1
        self.turns.append(turns)
        if problems:
            self.errors += 1
            self.first_problem = self.first_problem or "; ".join(problems)
        else:
            self.ok += 1


@dataclass(frozen=True, slots=True)
class Row:
    case: Case
    mode: str
    tally: Tally


def _turns(turns: list[int]) -> str:
    if not turns:
        return "-"
    lo, hi = min(turns), max(turns)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def render(rows: list[Row], seconds: float) -> str:
    header = ("agent", "version", "API / transport", "mode", "ok/runs", "turns", "errors", "note")
    body = [
        (
            r.case.agent,
            r.case.version,
            f"{r.case.api} / {r.case.transport}",
            r.mode,
            f"{r.tally.ok}/{r.tally.runs}",
            _turns(r.tally.turns),
            str(r.tally.errors),
            r.tally.first_problem[:100],
        )
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(b) for b in body]
    failed = sum(r.tally.runs - r.tally.ok for r in rows)
    verdict = "all passed" if not failed else f"{failed} failed"
    out.append(f"interop: {sum(r.tally.runs for r in rows)} runs, {verdict}, {seconds:.0f} s")
    return "\n".join(out)
