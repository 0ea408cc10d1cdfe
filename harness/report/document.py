"""A tiny report document model rendered to Markdown and to self-contained HTML.

Reports are built once as a list of blocks and written twice, so ``report.md``
and ``report.html`` never disagree.  Pure: no file is read except an image
being embedded in HTML (as a ``data:`` URI, so the page loads nothing else).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True, slots=True)
class Paragraph:
    text: str
    #: "note", "bad" and "ok" paragraphs render as a coloured box in HTML and a quote in Markdown
    kind: str = ""


@dataclass(frozen=True, slots=True)
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    #: per column: "l" or "r"; default: first column left, others right
    align: str = ""
    caption: str = ""


@dataclass(frozen=True, slots=True)
class Image:
    #: path relative to the report's folder
    path: str
    alt: str
    caption: str = ""


Block = Heading | Paragraph | Table | Image


@dataclass(slots=True)
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> Document:
        self.blocks.extend(blocks)
        return self


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Document) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * max(2, min(6, b.level))} {b.text}", ""]
        elif isinstance(b, Paragraph):
            out += [("> " + b.text) if b.kind else b.text, ""]
        elif isinstance(b, Table):
            align = b.align or "l" + "r" * (len(b.headers) - 1)
            out.append("| " + " | ".join(_md_cell(h) for h in b.headers) + " |")
            out.append("|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|")
            for row in b.rows:
                out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
            if b.caption:
                out += ["", f"*{b.caption}*"]
            out.append("")
        else:
            out += [f"![{b.alt}]({b.path})", ""]
            if b.caption:
                out += [f"*{b.caption}*", ""]
    return "\n".join(out).rstrip() + "\n"


_CSS = """
body { font-family: -apple-system, 'Segoe UI', 'DejaVu Sans', Helvetica, Arial, sans-serif;
       margin: 0 auto; max-width: 1200px; padding: 24px 32px 64px; color: #1c2833;
       line-height: 1.45; background: #fdfefe; }
h1 { font-size: 1.6em; border-bottom: 2px solid #2471a3; padding-bottom: 6px; }
h2 { font-size: 1.25em; margin-top: 2em; color: #1a5276; }
h3 { font-size: 1.05em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: 12px 0; font-size: 0.9em; }
th, td { border: 1px solid #d5d8dc; padding: 4px 10px; }
th { background: #eaf2f8; }
tr:nth-child(even) td { background: #f8f9f9; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
td.r { white-space: nowrap; }
td.r.why { white-space: normal; min-width: 9em; }
.scroll { overflow-x: auto; max-width: 100%; }
td.l, th.l { text-align: left; }
.caption { color: #566573; font-size: 0.88em; margin: 4px 0 16px; }
figure { margin: 16px 0 28px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e5e8e8; }
.note { background: #fef9e7; border-left: 4px solid #f1c40f; padding: 8px 12px; }
.bad { background: #fdedec; border-left: 4px solid #c0392b; padding: 8px 12px; }
.ok { background: #eafaf1; border-left: 4px solid #1e8449; padding: 8px 12px; }
code { background: #f4f6f6; padding: 1px 4px; }
"""


def _data_uri(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"data:image/png;base64,{data}"


def _cell_class(cell: str, align: str) -> str:
    # A number never breaks; a reason in its place ("n/a (no response long enough to fill a
    # 100 ms window)") wraps, or its column alone runs the table off the page.
    return f"{align} why" if align == "r" and " " in cell.strip() and "(" in cell else align


def to_html(doc: Document, base_dir: Path) -> str:
    """Self-contained HTML: inline CSS, images embedded from ``base_dir / image.path``."""
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # an empty icon: without it a browser requests /favicon.ico and logs an error
        '<link rel="icon" href="data:,">',
        f"<title>{e(doc.title)}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>{e(doc.title)}</h1>",
    ]
    for b in doc.blocks:
        if isinstance(b, Heading):
            lvl = max(2, min(6, b.level))
            out.append(f"<h{lvl}>{e(b.text)}</h{lvl}>")
        elif isinstance(b, Paragraph):
            cls = f' class="{e(b.kind)}"' if b.kind else ""
            out.append(f"<p{cls}>{e(b.text)}</p>")
        elif isinstance(b, Table):
            align = b.align or "l" + "r" * (len(b.headers) - 1)
            # A table wider than the column scrolls inside it rather than widening the page.
            out.append('<div class="scroll"><table><thead><tr>')
            out += [f'<th class="{a}">{e(h)}</th>' for h, a in zip(b.headers, align, strict=True)]
            out.append("</tr></thead><tbody>")
            for row in b.rows:
                cells = "".join(
                    f'<td class="{_cell_class(c, a)}">{e(c)}</td>'
                    for c, a in zip(row, align, strict=True)
                )
                out.append(f"<tr>{cells}</tr>")
            out.append("</tbody></table></div>")
            if b.caption:
                out.append(f'<p class="caption">{e(b.caption)}</p>')
        else:
            src = _data_uri(base_dir / b.path)
            out.append(f'<figure><img src="{src}" alt="{e(b.alt)}">')
            if b.caption:
                out.append(f'<figcaption class="caption">{e(b.caption)}</figcaption>')
            out.append("</figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
