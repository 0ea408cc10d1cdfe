"""``--tokenizer``: a Hugging Face tokenizer the test builds itself sizes the text and counts the stream.

The tokenizer is a BPE model over single letters with merges for five words only
(``the and for are you``), whitespace pre-tokenized: each of those words is one token,
every other word one token per letter.  The 4-characters rule counts every three-letter
word as one token, so the two conventions disagree on most of the reference server's
text: a count that follows the tokenizer cannot be the default one by accident.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from harness.cli.main import main
from harness.client.stream import ResponseStream
from harness.report.results import load_run
from harness.run.tokenizer import load_tokens, resolve_tokenizer_file
from harness.wire.errors import UsageError
from harness.wire.tokens import FIXED_WIDTH
from harness.workload.agent import Transcript
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import load_scenario
from tests.foreign_servers import canned_events

MERGED = ("the", "and", "for", "are", "you")
TINY = "tiny"


def build_tokenizer(path: Path) -> Path:
    vocab: dict[str, int] = {"[UNK]": 0}
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab[c] = len(vocab)
    merges: list[tuple[str, str]] = []
    for word in MERGED:
        prefix = word[0]
        for ch in word[1:]:
            if (prefix, ch) not in merges:
                merges.append((prefix, ch))
            prefix += ch
            vocab.setdefault(prefix, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return path


@pytest.fixture
def tokenizer_file(tmp_path: Path) -> Path:
    return build_tokenizer(tmp_path / "tokenizer.json")


def _count(path: Path, text: str) -> int:
    return len(Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids)


def test_the_test_tokenizer_disagrees_with_the_default_rule(tokenizer_file: Path) -> None:
    assert _count(tokenizer_file, " the you") == 2 == FIXED_WIDTH.count(" the you")
    assert _count(tokenizer_file, " was log") == 6 != FIXED_WIDTH.count(" was log")


@pytest.mark.parametrize("n", [1, 7, 30, 400])
def test_synthetic_text_has_the_planned_tokens_under_the_tokenizer(
    tokenizer_file: Path, n: int
) -> None:
    tokens = load_tokens(str(tokenizer_file))
    text = tokens.make_text(n, random.Random(n))
    assert _count(tokenizer_file, text) == n
    assert set(text.split()) <= set(MERGED)
    # the same seed, the same text: every transport replays the same bytes
    assert tokens.make_text(n, random.Random(n)) == text


def test_transcript_sizes_its_text_with_the_tokenizer(tokenizer_file: Path) -> None:
    tokens = load_tokens(str(tokenizer_file))
    plan = generate_rollouts(load_scenario(TINY))[0]
    transcript = Transcript(plan, tokens=tokens)
    first = transcript.next_input(0)
    prompt = first.new_items[0]["content"]
    assert _count(tokenizer_file, prompt) == plan.user_prompt_tokens
    jobs = [("call_1", 37), ("call_2", 5)]
    transcript.add_tool_outputs(0, jobs)
    outputs = [item["output"] for item in transcript.pending]
    assert [_count(tokenizer_file, o) for o in outputs] == [37, 5]
    # the default convention is unchanged: 4 characters a token
    default = Transcript(plan).next_input(0).new_items[0]["content"]
    assert len(default) == 4 * plan.user_prompt_tokens


def test_streamed_tokens_are_counted_with_the_tokenizer(tokenizer_file: Path) -> None:
    text = " was the log you"
    counts = {}
    for name, tokens in (("default", FIXED_WIDTH), ("tokenizer", load_tokens(str(tokenizer_file)))):
        stream = ResponseStream(0, tokens=tokens)
        for i, event in enumerate(canned_events("resp_1", text)):
            stream.feed(event, 1000 + i)
        assert stream.done
        counts[name] = stream.streamed_tokens
    assert (
        counts
        == {"default": 4, "tokenizer": _count(tokenizer_file, text)}
        == {
            "default": 4,
            "tokenizer": 8,
        }
    )


def test_a_name_in_the_local_cache_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hub"
    model = cache / "models--acme--tiny-tok"
    snapshot = model / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    build_tokenizer(snapshot / "tokenizer.json")
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert resolve_tokenizer_file("acme/tiny-tok") == snapshot / "tokenizer.json"
    assert load_tokens("acme/tiny-tok").count(" was") == 3


def test_a_name_not_in_the_cache_is_a_usage_error_saying_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(UsageError, match="never downloads") as err:
        load_tokens("acme/absent")
    assert str(tmp_path / "hub" / "models--acme--absent") in str(err.value)
    with pytest.raises(SystemExit) as exited:
        main(["run", TINY, "--tokenizer", "acme/absent", "--out", str(tmp_path), "-q"])
    assert exited.value.code == 4
    err_text = capsys.readouterr().err
    assert "error: --tokenizer acme/absent: not a tokenizer.json file or folder" in err_text
    assert str(tmp_path / "hub") in err_text
    assert not (tmp_path / "r").exists()


def test_a_run_counts_streamed_tokens_with_the_tokenizer(
    tokenizer_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "run",
                TINY,
                "--tokenizer",
                str(tokenizer_file),
                "--transports",
                "http,ws",
                "--out",
                str(tmp_path),
                "--run-id",
                "tok",
                "-q",
            ]
        )
    out = capsys.readouterr().out
    assert exited.value.code == 0, out
    run = load_run(tmp_path / "tok")
    turns = run.turns
    final = turns[turns.turn_index == turns.turn_index.max()]
    # The reference server streams 4-character words and reports usage by that rule; the
    # tokenizer splits most of them into letters: the streamed count is the tokenizer's.
    assert (final.streamed_tokens > final.output_tokens).all()
    assert (final.output_tokens == final.planned_output_tokens).all()
    manifest = json.loads((tmp_path / "tok" / "manifest.json").read_text())
    assert manifest["client_options"]["tokenizer"] == str(tokenizer_file)
    summary = json.loads((tmp_path / "tok" / "summary.json").read_text())
    for name in ("http", "ws"):
        tok = summary["tokens"][name]
        assert tok["turns"] == tok["usage_turns"] == len(turns[turns.transport == name])
        assert tok["output_ratio"] == 1.0
        assert tok["planned_input"] == int(turns[turns.transport == name].history_tokens.sum())
    assert "tokens planned → server-reported: http in" in out
