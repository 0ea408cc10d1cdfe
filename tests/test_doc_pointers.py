"""Every pointer from product code into the documentation lands somewhere.

Docstrings and comments that would repeat a docs page say where the page is instead
("docs/reliability.md, "Graceful shutdown"", "docs/metrics.md §1.9"). A pointer to a file or
a section that was renamed sends the reader nowhere, so the scan reads the source and checks
each one: the file exists, a ``§N.N`` names a numbered heading of that file, and a quoted title
right after the file name is part of one of its headings or of a paragraph's bold opening words.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: (file, path) where a ``docs/…md`` is data, not a pointer: a file name the simulated model writes
NOT_POINTERS = {("reference_server/core/arguments.py", "docs/guide.md")}

#: ``docs/x.md``, then optionally ``§1.2`` or a quoted (or *starred*) section title
POINTER = re.compile(
    r"""(?P<file>docs/[a-z0-9_-]+\.md)
        (?:\s*(?:§\s*(?P<number>\d+(?:\.\d+)*)
           |,?\s*(?:"|'|\*)(?P<title>[A-Z`][^"'*]{2,80})(?:"|'|\*)))?""",
    re.VERBOSE,
)


def _product_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "harness", "reference_server"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [name for name in out if name.endswith(".py")]


def _flat(source: str) -> str:
    """The source with each line break (and a comment's ``#`` after it) read as one space,
    so a title wrapped across two docstring or comment lines is still one title."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#[ \t]?)?", " ", source)


def _headings(doc: Path) -> list[str]:
    return [
        line.lstrip("#").strip() for line in doc.read_text().splitlines() if line.startswith("#")
    ]


def _paragraph_heads(doc: Path) -> list[str]:
    """The bold words a paragraph opens with (``**Lineage** — …``): sections below a heading."""
    return re.findall(r"^\*\*([^*]+)\*\*", doc.read_text(), re.MULTILINE)


def _problems(name: str, source: str) -> list[str]:
    problems = []
    for match in POINTER.finditer(_flat(source)):
        if (name, match["file"]) in NOT_POINTERS:
            continue
        doc = ROOT / match["file"]
        if not doc.is_file():
            problems.append(f"{name}: {match['file']} does not exist")
            continue
        headings = _headings(doc)
        if match["number"]:
            wanted = match["number"]
            if not any(re.match(rf"{re.escape(wanted)}\.?\s", h) for h in headings):
                problems.append(f"{name}: {match['file']} has no section §{wanted}")
        elif match["title"]:
            title = match["title"].strip().rstrip(".,;:")
            if not any(title in h for h in headings + _paragraph_heads(doc)):
                problems.append(f'{name}: {match["file"]} has no section "{title}"')
    return problems


def test_every_docs_pointer_in_the_product_names_a_file_and_section_that_exist() -> None:
    problems = [p for name in _product_files() for p in _problems(name, (ROOT / name).read_text())]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('"""Why: docs/reliability.md, "Graceful shutdown"."""', []),
        ("# see docs/metrics.md §1.9 for the stamps", []),
        ("# docs/server.md 'The\n    # store'", []),
        ('# (docs/traces.md, "Overhead")', []),
        ("# docs/reliabilty.md", ["x.py: docs/reliabilty.md does not exist"]),
        ("# docs/metrics.md §1.99", ["x.py: docs/metrics.md has no section §1.99"]),
        ('# docs/server.md, "The shop"', ['x.py: docs/server.md has no section "The shop"']),
    ],
)
def test_the_scan_catches_a_wrong_file_section_or_title(source: str, expected: list[str]) -> None:
    assert _problems("x.py", source) == expected
