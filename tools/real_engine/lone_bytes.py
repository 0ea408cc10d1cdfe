"""The tiny model's tokenizer with every token decodable alone (pure; no torch here, so the
project's own tests can check it)."""

from __future__ import annotations

import json

from tokenizers import pre_tokenizers


def lone_bytes_renamed(tokenizer_json: str) -> str:
    """The byte-level BPE with its tokens of the lone bytes 0x80-0xFF renamed ``~80`` .. ``~ff``.

    A random model samples those 128 tokens (a quarter of this vocabulary) like any other; alone
    each decodes to U+FFFD, so vLLM's detokenizer held it back until the next token completed
    the text, and a quarter of the deltas carried two tokens or more: loopbench's gaps between
    deltas were then not vLLM's gaps between tokens (docs/real-engine.md, "ITL").  Renamed, each
    decodes alone.  No merge uses them (the corpus is ASCII), so what encodes is unchanged.
    """
    doc = json.loads(tokenizer_json)
    vocab: dict[str, int] = doc["model"]["vocab"]
    # the ByteLevel pre-tokenizer's alphabet: one character per byte
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    in_merges = {part for merge in doc["model"]["merges"] for part in _parts(merge)}
    renamed: dict[str, int] = {}
    for piece, tid in vocab.items():
        byte = _byte_of(piece) if len(piece) == 1 and piece in alphabet else -1
        if byte >= 0x80:
            if piece in in_merges or f"~{byte:02x}" in vocab:
                raise ValueError(f"the lone byte {byte:#x} is merged, or ~{byte:02x} is a token")
            piece = f"~{byte:02x}"
        renamed[piece] = tid
    doc["model"]["vocab"] = renamed
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def _parts(merge: object) -> list[str]:
    return list(merge) if isinstance(merge, list) else str(merge).split(" ")


def _byte_of(char: str) -> int:
    """The byte a ByteLevel character stands for (GPT-2's printable map of the 256 bytes)."""
    return _BYTE_OF[char]


def _byte_map() -> dict[str, int]:
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in kept:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_OF = _byte_map()
