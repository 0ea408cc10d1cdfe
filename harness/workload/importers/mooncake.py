"""Mooncake request traces → loopbench trace rollouts.

The Mooncake trace (Kimi's FAST'25 KV-cache traces; replayed by aiperf and guidellm) is
JSONL, one request per line: ``timestamp`` (ms), ``input_length`` / ``output_length``
(tokens) and ``hash_ids``, one id per 512-token block of the input standing for the block
*and everything before it*; aiperf's multi-turn files add ``session_id``, ``delay`` and
``text_input``.  How requests become conversations (by ``session_id``, else by a prefix of
``hash_ids``) is docs/traces.md's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.wire.tokens import count_tokens
from harness.workload.importers.common import (
    Request,
    SessionImportError,
    bad_field,
    chain_rollout,
    import_files,
    number_field,
    whole_field,
)
from harness.workload.jsonl import json_lines
from harness.workload.trace import TraceRollout

BLOCK_TOKENS = 512  # the Mooncake traces' KV-cache block (the paper's and the peers' default)


@dataclass(slots=True)
class _Line:
    req: Request
    hash_ids: tuple[int, ...]
    session: str | None
    shared_blocks: int = 0  # leading blocks an earlier request already had


@dataclass(slots=True)
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    tails: list[int] = field(default_factory=list)  # conversations whose last request ends here
    owner: int = -1  # the first conversation with a request through this prefix
    common: bool = False  # requests of two conversations went through it


def _parse_line(obj: Any, source: str, lineno: int, text: str) -> _Line:
    if not isinstance(obj, dict):
        raise SessionImportError(
            f"{source}: line {lineno}: expected a {{timestamp, input_length, output_length, "
            f"hash_ids}} object, got {text[:60]}"
        )
    if obj.get("input_length") is None and isinstance(obj.get("text_input"), str):
        input_tokens = count_tokens(obj["text_input"])
    else:
        input_tokens = whole_field(obj, "input_length", source, lineno) or 0
    output_tokens = whole_field(obj, "output_length", source, lineno) or 0
    raw_ids = obj.get("hash_ids")
    if raw_ids is None:
        hash_ids: tuple[int, ...] = ()
    elif isinstance(raw_ids, list) and all(
        isinstance(h, int) and not isinstance(h, bool) for h in raw_ids
    ):
        hash_ids = tuple(raw_ids)
    else:
        raise bad_field(source, lineno, "hash_ids", "a list of integer block ids", raw_ids)
    session = obj.get("session_id")
    if session is not None and (isinstance(session, bool) or not isinstance(session, str | int)):
        raise bad_field(source, lineno, "session_id", "a string", session)
    req = Request(
        line=lineno,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        arrival_ms=number_field(obj, "timestamp", source, lineno),
        delay_ms=number_field(obj, "delay", source, lineno),
    )
    return _Line(req, hash_ids, None if session is None else str(session))


def _chain_by_prefix(lines: list[_Line], block_tokens: int) -> list[list[_Line]]:
    """Conversations by hash-id prefix (see the module docstring), in order of first arrival."""
    order = sorted(range(len(lines)), key=lambda i: (lines[i].req.arrival_ms or 0.0, i))
    root = _Node()
    convs: list[list[_Line]] = []
    tail_node: list[_Node | None] = []
    for i in order:
        line = lines[i]
        node, depth, best = root, 0, None
        for h in line.hash_ids:
            child = node.children.get(h)
            if child is None:
                break
            node, depth = child, depth + 1
            for c in list(node.tails):
                if len(convs[c]) == 1 and node.common:
                    # Another conversation read this whole start too: it is common context
                    # (a system prompt), not this conversation's own history.
                    node.tails.remove(c)
                    tail_node[c] = None
                    continue
                tail = convs[c][-1].req
                later = (
                    line.req.arrival_ms is None
                    or tail.arrival_ms is None
                    or line.req.arrival_ms > tail.arrival_ms
                )
                if later and line.req.input_tokens > tail.input_tokens:
                    best = c  # deeper nodes come later in the walk, the latest tail last
        line.shared_blocks = depth
        if best is None:
            conv = len(convs)
            convs.append([line])
            tail_node.append(None)
        else:
            conv = best
            convs[conv].append(line)
            old = tail_node[conv]
            if old is not None:
                old.tails.remove(conv)
            tail_node[conv] = None
        full = min(line.req.input_tokens // block_tokens, len(line.hash_ids))
        node = root
        for k, h in enumerate(line.hash_ids):
            node = node.children.setdefault(h, _Node())
            if node.owner < 0:
                node.owner = conv
            elif node.owner != conv:
                node.common = True
            if k + 1 == full and (best is not None or full > line.shared_blocks):
                node.tails.append(conv)
                tail_node[conv] = node
    return convs


def _by_session(lines: list[_Line]) -> list[list[_Line]]:
    convs: dict[str, list[_Line]] = {}
    out: list[list[_Line]] = []
    for line in lines:
        if line.session is None:
            out.append([line])
        elif line.session in convs:
            convs[line.session].append(line)
        else:
            convs[line.session] = [line]
            out.append(convs[line.session])
    return out


def _shared_prefixes(lines: list[_Line]) -> None:
    """Each line's count of leading blocks an earlier line already had (the session case)."""
    seen: set[tuple[int, ...]] = set()
    for line in lines:
        ids = line.hash_ids
        k = 0
        while k < len(ids) and ids[: k + 1] in seen:
            k += 1
        line.shared_blocks = k
        for j in range(k, len(ids)):
            seen.add(ids[: j + 1])


def parse_mooncake(
    lines: Iterable[str], source: str = "<mooncake>", block_tokens: int = BLOCK_TOKENS
) -> list[TraceRollout]:
    """The rollouts of one Mooncake trace file (its lines, in order)."""
    parsed = [
        _parse_line(obj, source, lineno, text)
        for lineno, text, obj in json_lines(
            lines, lambda n, why: SessionImportError(f"{source}: line {n}: {why}")
        )
    ]
    if any(p.session is not None for p in parsed):
        _shared_prefixes(parsed)
        convs = _by_session(parsed)
        grouped_by = "session_id"
    else:
        convs = _chain_by_prefix(parsed, block_tokens)
        grouped_by = "hash_ids"
    label = os.path.basename(source)
    rollouts = []
    for conv in convs:
        first = conv[0]
        meta: dict[str, Any] = {"source": "mooncake", "file": label, "grouped_by": grouped_by}
        if first.session is not None:
            meta["session"] = first.session
        rollouts.append(
            chain_rollout(
                [line.req for line in conv],
                first.session or f"{label}:{first.req.line}",
                # Blocks the first request shares with earlier ones are the common context
                # (system prompt, or the history a forked conversation inherits).
                first.shared_blocks * block_tokens,
                meta,
                cumulative=grouped_by == "hash_ids",
            )
        )
    return rollouts


def import_mooncake_files(
    paths: Sequence[str], block_tokens: int = BLOCK_TOKENS
) -> list[TraceRollout]:
    """Every rollout of every file, in file order (sessions do not span files)."""
    return import_files(
        paths, lambda fh, path: parse_mooncake(fh, path, block_tokens), "JSON lines"
    )
