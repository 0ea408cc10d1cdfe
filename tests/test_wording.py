"""House style of what the program prints: counted nouns agree with their count, and a
confidence interval is written ``95 % CI`` (the repository's prose) everywhere.

The scans read the source: a message that says ``{n} rollouts`` prints "1 rollouts" the day
``n`` is 1, long before a test happens to run with one.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

from harness.wire.plural import counted, plural

ROOT = Path(__file__).resolve().parents[1]

#: nouns that messages count
NOUNS = ("turns", "rollouts", "runs", "scrapes", "exchanges", "values", "keys", "features", "files")
#: f-strings whose count is never 1: (file, the text after the count)
NEVER_ONE = {
    # progress lines: "3/40 rollouts" reads as a ratio
    ("harness/run/progress.py", " rollouts  "),
    ("harness/gate/ab.py", " rollouts "),
    ("harness/gate/ab.py", " turns "),
    # a protocol limit or a tool's fixed level, far above 1
    ("harness/workload/schedule.py", " rollouts; lower the rate"),
    ("harness/workload/scenario.py", " rollouts "),
}


def test_counted_nouns_agree_with_the_count() -> None:
    assert counted(1, "rollout") == "1 rollout"
    assert counted(0, "rollout") == "0 rollouts"
    assert counted(1200, "turn") == "1,200 turns"
    assert plural(1, "it counts", "they count") == "it counts"
    assert plural(2.0, "rollout") == "rollouts"


def _unagreed(path: Path) -> list[tuple[int, str]]:
    """``{expr} turns`` in the f-strings of ``path``: a count written before a plural noun."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.JoinedStr):
            continue
        parts = node.values
        for before, after in itertools.pairwise(parts):
            if not (isinstance(before, ast.FormattedValue) and isinstance(after, ast.Constant)):
                continue
            text = str(after.value)
            if re.match(rf" ({'|'.join(NOUNS)})\b(?!/)", text) and not re.match(
                r" \w+ (of|in) ", text
            ):
                found.append((node.lineno, text[:30]))
    return found


def test_no_message_counts_a_plural_noun_without_agreeing() -> None:
    """``1 rollouts`` was printed by ``record``; every count goes through ``counted``."""
    bad = []
    for folder in ("harness", "reference_server"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for line, text in _unagreed(path):
                if not any(rel == f and text.startswith(t) for f, t in NEVER_ONE):
                    bad.append(f"{rel}:{line}: {{…}}{text!r}")
    assert not bad, "counted nouns that say '1 rollouts' when the count is 1:\n" + "\n".join(bad)


#: "95% CI", "{x:.0%} CI": the interval written without the space the prose uses
_CI = re.compile(r"\d%\s*CI\b|%\}\s*CI\b")


@pytest.mark.parametrize("folder", ["harness", "reference_server", "docs", "examples", "README.md"])
def test_a_confidence_interval_is_written_one_way(folder: str) -> None:
    base = ROOT / folder
    files = (
        [base]
        if base.is_file()
        else [p for p in base.rglob("*") if p.suffix in (".py", ".md", ".yaml")]
    )
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
        for p in files
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if _CI.search(line)
    ]
    assert not bad, "write '95 % CI':\n" + "\n".join(bad)
