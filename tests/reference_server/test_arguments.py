"""Function-call arguments are valid for the tools real agents declare (core/arguments.py, pure).

Thousands of generated arguments (different seeds) for the tool schemas Codex CLI, Claude
Code and the openai-agents SDK sent (tests/data/agents/) and for schemas written to cover
the JSON Schema keywords (tests/data/tool_schemas.json), each validated with ``jsonschema``
under the draft the schema declares (2020-12 when it declares none), formats checked.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from harness.wire.tokens import count_tokens
from reference_server.core.arguments import make_arguments, mentioned_paths, sample_arguments
from tests.agent_requests import CHAT, MESSAGES, RESPONSES, bodies

DATA = Path(__file__).resolve().parents[1] / "data"
DRAWS_PER_TOOL = 300


def _as_function(tool: dict[str, Any]) -> dict[str, Any] | None:
    """A captured tool as the server's function tool (name, parameters), or None if not one."""
    if "input_schema" in tool and not tool.get("type"):  # Messages
        return {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("type") != "function":
        return None
    inner = tool.get("function", tool)  # Chat nests it
    return {"name": inner["name"], "parameters": inner.get("parameters") or {}}


def agent_tools() -> list[tuple[str, dict[str, Any]]]:
    tools: dict[str, dict[str, Any]] = {}
    for name in (*RESPONSES, *MESSAGES, *CHAT):
        for body in bodies(name):
            for tool in body.get("tools") or []:
                fn = _as_function(tool)
                if fn is not None:
                    tools.setdefault(f"{name}:{fn['name']}", fn)
    return sorted(tools.items())


def written_tools() -> list[tuple[str, dict[str, Any]]]:
    doc = json.loads((DATA / "tool_schemas.json").read_text(encoding="utf-8"))
    return [(f"written:{t['name']}", t) for t in doc["tools"]]


ALL_TOOLS = agent_tools() + written_tools()


def _validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _floats(value: Any) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [f for v in value.values() for f in _floats(v)]
    if isinstance(value, list):
        return [f for v in value for f in _floats(v)]
    return []


def test_the_real_agents_tools_are_all_here() -> None:
    names = {key.split(":", 1)[1] for key, _ in agent_tools()}
    # Codex CLI, Claude Code and the openai-agents SDK's tools, as captured
    assert {"exec_command", "Bash", "Read", "Edit", "Write", "read_file"} <= names
    assert len(ALL_TOOLS) >= 25


@pytest.mark.parametrize(("key", "tool"), ALL_TOOLS, ids=[k for k, _ in ALL_TOOLS])
def test_arguments_validate_against_the_schema(key: str, tool: dict[str, Any]) -> None:
    schema = tool["parameters"]
    validator = _validator(schema)
    for seed in range(DRAWS_PER_TOOL):
        rng = random.Random(seed)
        n_tokens = rng.choice((1, 20, 60, 400))
        # files the conversation named feed paths and commands on odd seeds
        paths = ("notes.txt", "/srv/my app/main.go") if seed % 2 else ()
        text = make_arguments(tool, n_tokens, rng, exact=seed % 4 == 0, paths=paths)
        args = orjson.loads(text)
        errors = [e.message for e in validator.iter_errors(args)]
        assert not errors, (key, seed, args, errors)
        # integers are integers: agents parse numbers into integer types (Codex: i32)
        if key.startswith("written:fetch_page"):
            continue  # its `ratio` and `step` may only be fractional
        assert not _floats(args), (key, seed, args)


def test_the_same_seed_gives_the_same_arguments() -> None:
    for _, tool in ALL_TOOLS:
        a = make_arguments(tool, 60, random.Random(7))
        assert a == make_arguments(tool, 60, random.Random(7))


def _strings(value: Any, name: str = "") -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(name, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, k)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v, name)]
    return []


@pytest.mark.parametrize("exact", [True, False])
def test_paths_commands_and_urls_stay_short_whatever_the_length(exact: bool) -> None:
    """A long plan lengthens free text (content, new_string …), never a path, URL or id."""
    for key, tool in ALL_TOOLS:
        for seed in range(20):
            args = orjson.loads(make_arguments(tool, 2000, random.Random(seed), exact=exact))
            for name, value in _strings(args):
                lowered = name.lower()
                short = any(w in lowered for w in ("path", "url", "dir", "file")) or lowered == "id"
                # under loopbench's exact hint a lone command may carry the filler
                short = short or (not exact and lowered in ("cmd", "command"))
                assert not short or len(value) <= 100, (key, name, value[:120])


def test_optional_flags_and_justifications_are_left_out() -> None:
    """Seen in real Codex sessions: a `justification` without `sandbox_permissions` is refused,
    a `workdir` the model made up fails the command."""
    tools = dict(ALL_TOOLS)
    seen: dict[str, set[str]] = {"exec_command": set(), "Bash": set()}
    for seed in range(500):
        for key, name in (
            ("codex-http:exec_command", "exec_command"),
            ("claude-code:Bash", "Bash"),
        ):
            args = orjson.loads(make_arguments(tools[key], 60, random.Random(seed), exact=False))
            seen[name] |= set(args)
    assert seen["exec_command"] == {"cmd"}  # a workdir that does not exist fails the command
    assert seen["Bash"] == {"command", "timeout", "description"}


def _object(**props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in props.items()},
        "required": list(props),
    }


def test_realistic_values_for_what_names_ask() -> None:
    bash = {"name": "Bash", "parameters": _object(command="string", timeout="number")}
    read = {"name": "Read", "parameters": _object(file_path="string", url="string")}
    shell = dict(written_tools())["written:shell"]
    for seed in range(50):
        b = sample_arguments(bash["parameters"], random.Random(seed))
        assert " " not in b["command"] or b["command"].split()[0].isalpha()
        assert isinstance(b["timeout"], int) and 5000 <= b["timeout"] <= 120000
        r = sample_arguments(read["parameters"], random.Random(seed))
        assert r["file_path"] in ("Makefile",) or "." in r["file_path"]
        assert len(r["file_path"]) < 64 and r["url"].startswith("https://")
        argv = sample_arguments(shell["parameters"], random.Random(seed))["command"]
        assert argv[:2] == ["bash", "-lc"] and len(argv) == 3


@pytest.mark.parametrize("n_tokens", [30, 60, 400, 5000])
def test_exact_plans_are_exact_and_free_text_follows_the_plan(n_tokens: int) -> None:
    write = dict(written_tools())["written:write_file"]
    # loopbench's own synthetic tool: one command string
    synthetic = {
        "name": "run_tool",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
            "additionalProperties": False,
        },
    }
    for seed in range(20):
        assert count_tokens(make_arguments(synthetic, n_tokens, random.Random(seed))) == n_tokens
        assert count_tokens(make_arguments(write, n_tokens, random.Random(seed))) == n_tokens
        # without the hint the free text still grows to the plan; a lone command does not
        drawn = make_arguments(write, n_tokens, random.Random(seed), exact=False)
        assert count_tokens(drawn) == n_tokens
        bare = make_arguments(synthetic, n_tokens, random.Random(seed), exact=False)
        assert count_tokens(bare) < 30


def test_the_files_a_conversation_names_are_found() -> None:
    items = [
        {"type": "message", "role": "system", "content": "Working directory: /srv/repo/a.py"},
        {
            "type": "message",
            "role": "user",
            "content": "Show the first line of notes.txt, e.g. v1.0",
        },
        {"type": "function_call", "name": "Bash", "arguments": '{"command":"cat made/up.py"}'},
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": "README.md\nsrc/app/main.py\nsee https://example.com/page.html",
        },
    ]
    # the outputs and messages, newest first; not the model's own arguments, URLs or versions
    assert mentioned_paths(items) == ("README.md", "src/app/main.py", "notes.txt")
    assert mentioned_paths([]) == ()
    # a system prompt's examples only when the recent items name nothing
    prompt = {"type": "message", "role": "system", "content": "Skills live in skills/SKILL.md."}
    chat = [{"type": "message", "role": "user", "content": "hi"}] * 10
    assert mentioned_paths([prompt, *chat]) == ("skills/SKILL.md",)
    task = {"type": "message", "role": "user", "content": "Read notes.txt"}
    assert mentioned_paths([prompt, task]) == ("notes.txt",)


def test_paths_and_commands_mostly_use_the_files_the_conversation_named() -> None:
    read = _object(file_path="string", command="string")
    picks = [sample_arguments(read, random.Random(s), ("notes.txt",)) for s in range(400)]
    named = sum(p["file_path"] == "notes.txt" for p in picks)
    assert 0.7 * 400 < named < 0.9 * 400
    commands = [p["command"] for p in picks if "notes.txt" in p["command"]]
    assert len(commands) > 0.7 * 400 and all(
        c.split()[0] in ("cat", "head", "wc", "sed") for c in commands
    )
    # a name with a space is quoted for the shell
    spaced = sample_arguments(read, random.Random(3), ("my notes.txt",))
    assert spaced["file_path"] == "my notes.txt" or "'my notes.txt'" in spaced["command"]
