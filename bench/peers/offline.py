"""What the peers need to run offline: prompt files and a local Hugging Face tokenizer.

Both peers load a tokenizer by Hugging Face name (guidellm to size and count prompts,
aiperf to load its dataset even when it counts tokens from the server's usage).  Offline,
aiperf accepts only a name found in the Hugging Face cache (``HF_HUB_OFFLINE=1`` makes it
resolve the name with ``snapshot_download(local_files_only=True)``; a plain folder path is
refused), so the runner trains a tiny byte-level BPE on the prompts with the ``tokenizers``
package and lays it out as a cached snapshot of :data:`TOKENIZER_NAME` in a private
``HF_HOME``.  Nothing is downloaded: the peers run with ``HF_HUB_OFFLINE=1``,
``TRANSFORMERS_OFFLINE=1`` and ``HF_DATASETS_OFFLINE=1`` (see :func:`offline_env`).

Every prompt carries a unique ``lbq-<n>`` tag, so the server's timing log names the
request even for a tool that keeps no id of it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from harness.wire.tokens import CHARS_PER_TOKEN

#: the Hugging Face name both peers are given; it exists only in the runner's private cache
TOKENIZER_NAME = "loopbench/peers-bpe"
#: ~50 input tokens at the reference server's 4 characters per token
PROMPT_TOKENS = 50
_WORDS = [
    "plan",
    "the",
    "next",
    "step",
    "read",
    "the",
    "file",
    "run",
    "the",
    "tests",
    "fix",
    "the",
    "failing",
    "case",
    "and",
    "report",
    "what",
    "changed",
    "in",
    "the",
    "module",
    "before",
    "the",
    "review",
]


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def tag(n: int) -> str:
    """The n-th unique prompt tag (the server's timing log finds ``lbq-[0-9a-z]+``)."""
    return f"lbq-{_base36(n)}"


def prompt(n: int, tokens: int = PROMPT_TOKENS) -> str:
    """A prompt of ~``tokens`` tokens (4 characters each) that starts with its tag."""
    text = tag(n)
    i = n
    while len(text) < tokens * CHARS_PER_TOKEN:
        text += " " + _WORDS[i % len(_WORDS)]
        i += 7
    return text[: tokens * CHARS_PER_TOKEN]


class TagCounter:
    """Hands out consecutive tag numbers, so no two requests of one run share a tag."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, count: int) -> range:
        r = range(self.next, self.next + count)
        self.next += count
        return r


def guidellm_rows(numbers: Sequence[int], output_tokens: int) -> Iterator[str]:
    """JSON lines for guidellm's ``json_file`` data: ``prompt`` and ``output_tokens_count``."""
    for n in numbers:
        yield json.dumps({"prompt": prompt(n), "output_tokens_count": output_tokens})


def aiperf_rows(numbers: Sequence[int], output_tokens: int) -> Iterator[str]:
    """JSON lines for aiperf's ``single_turn`` dataset: ``text`` and ``output_length``."""
    for n in numbers:
        yield json.dumps({"text": prompt(n), "output_length": output_tokens})


def write_lines(path: Path, lines: Iterator[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def train_bpe(
    corpus: Sequence[str], vocab_size: int = 1000, special: Sequence[str] = ()
) -> Tokenizer:
    """A byte-level BPE trained on ``corpus``: every byte has a token, so any text encodes.

    The same corpus gives the same tokenizer (the trainer is deterministic), which is what
    lets the real-engine check rebuild its model's tokenizer byte for byte.
    """
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>", *special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    return tok


#: ``tokenizer_config.json`` of a BPE from :func:`train_bpe` (transformers' fast tokenizer)
TOKENIZER_CONFIG: dict[str, Any] = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "model_max_length": 1_000_000,
}


def cache_snapshot(hf_home: Path, name: str, files: Mapping[str, str]) -> Path:
    """Lay ``files`` (file name -> text) out as the cached snapshot of the model ``name`` in
    ``hf_home``'s hub cache, where ``HF_HUB_OFFLINE=1`` finds it by name; returns the
    snapshot folder."""
    revision = hashlib.sha1("".join(files[k] for k in sorted(files)).encode()).hexdigest()
    repo = hf_home / "hub" / ("models--" + name.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for file_name, text in files.items():
        (snapshot / file_name).write_text(text, encoding="utf-8")
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision, encoding="utf-8")
    return snapshot


def write_tokenizer(hf_home: Path, corpus: Sequence[str]) -> Path:
    """Train the tiny BPE on ``corpus`` into ``hf_home``'s hub cache; returns the snapshot."""
    files = {
        "tokenizer.json": train_bpe(corpus).to_str(),
        "tokenizer_config.json": json.dumps(TOKENIZER_CONFIG),
    }
    return cache_snapshot(hf_home, TOKENIZER_NAME, files)


def offline_env(hf_home: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a peer: the private HF cache, and every hub access switched off."""
    env = dict(os.environ if base is None else base)
    env.update(
        HF_HOME=str(hf_home),
        HF_HUB_CACHE=str(hf_home / "hub"),
        HF_DATASETS_CACHE=str(hf_home / "datasets"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        DO_NOT_TRACK="1",
    )
    # The peers' own HF token must not be picked up from the user's environment either.
    env.pop("HF_TOKEN", None)
    return env
