"""The tiny model's tokenizer decodes every token alone (the ITL gap of issue 38): pure."""

from __future__ import annotations

from tokenizers import Tokenizer

from bench.peers.offline import train_bpe
from tools.real_engine.lone_bytes import lone_bytes_renamed

_CORPUS = [
    "read the failing test and fix the module",
    "the parser checks the config before the docs update runs",
] * 20


def test_no_token_decodes_to_a_replacement_character_and_encodings_are_unchanged() -> None:
    trained = train_bpe(_CORPUS, vocab_size=400, special=("<tool_call>", "</tool_call>"))
    ours = Tokenizer.from_str(lone_bytes_renamed(trained.to_str()))
    n = trained.get_vocab_size()
    assert ours.get_vocab_size() == n
    # before: the 128 lone high bytes decode to U+FFFD, which vLLM's detokenizer holds back
    held = [i for i in range(n) if "\ufffd" in trained.decode([i])]
    assert len(held) == 128
    assert not [i for i in range(n) if "\ufffd" in ours.decode([i])]
    assert {ours.decode([i]) for i in held} == {f"~{b:02x}" for b in range(0x80, 0x100)}
    for text in (*_CORPUS[:2], 'call {"path": "a/b.py"} <tool_call>x</tool_call>'):
        assert ours.encode(text).ids == trained.encode(text).ids
