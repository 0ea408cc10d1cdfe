"""The official SDKs' tool loops, as a user writes them, run against one base URL.

``python -m tools.interop.sdk_loops KIND BASE_URL`` runs one loop in a process of its own
(so ``make interop`` can bound it in time and a hang cannot take the runner with it) and
prints one JSON line: the model turns it completed and the tool calls it answered.

Kinds: ``openai-responses`` (``responses.create(stream=True)``, the whole context re-sent,
as with ``store: false``), ``openai-chat`` (``chat.completions.create(stream=True)`` with
``stream_options``, ``max_completion_tokens``, ``parallel_tool_calls``), ``anthropic``
(``messages.stream``), ``agents-http`` and ``agents-ws`` (the openai-agents SDK's
``Runner`` over HTTP and over its Responses WebSocket session).  No loopbench hints are
sent: the simulated model answers as it would any client.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    responses_websocket_session,
    set_tracing_disabled,
)
from anthropic import Anthropic
from openai import AsyncOpenAI, OpenAI
from openai.types.shared import Reasoning

TASK = "Show the first line of notes.txt, then say what it means."
INSTRUCTIONS = "You are a coding assistant working in a small repository. Use the tools."
MAX_TURNS = 12
MAX_TOKENS = 4096
KEY = "sk-interop-local"
MODEL = "gpt-5.5"
CLAUDE_MODEL = "claude-sonnet-4-5"

TOOLS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Read a text file of the repository.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "path relative to the repository"},
                "max_lines": {"type": "integer", "minimum": 1, "maximum": 2000},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    {
        "name": "run_command",
        "description": "Run a shell command in the repository and return its output.",
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout_s": {"type": "integer", "minimum": 1, "maximum": 600},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
]


def run_tool(name: str, arguments: str) -> str:
    """What the tools answer: fixed text (the loop is measured, not the tools)."""
    try:
        args = json.loads(arguments) if arguments else {}
    except ValueError:
        return f"error: the arguments of {name} are not JSON"
    if not isinstance(args, dict):
        return f"error: the arguments of {name} are not an object"
    if name == "read_file":
        return "# notes\nThe first line is a heading.\n"
    return "exit 0\n"


def openai_responses(base_url: str) -> dict[str, int]:
    client = OpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    tools: Any = [{"type": "function", **t} for t in TOOLS]
    reasoning: Any = {"effort": "low"}
    context: list[Any] = [{"role": "user", "content": TASK}]
    turns = calls = 0
    for _ in range(MAX_TURNS):
        done: Any = None
        with client.responses.create(
            model=MODEL,
            instructions=INSTRUCTIONS,
            input=context,
            tools=tools,
            store=False,
            stream=True,
            max_output_tokens=MAX_TOKENS,
            reasoning=reasoning,
            include=["reasoning.encrypted_content"],
        ) as stream:
            for event in stream:
                if event.type == "response.completed":
                    done = event.response
        turns += 1
        outputs = [item.model_dump(exclude_none=True) for item in done.output]
        context += outputs
        pending = [o for o in outputs if o["type"] == "function_call"]
        if not pending:
            break
        for call in pending:
            calls += 1
            output = run_tool(call["name"], call["arguments"])
            context.append(
                {"type": "function_call_output", "call_id": call["call_id"], "output": output}
            )
    return {"turns": turns, "tool_calls": calls}


def openai_chat(base_url: str) -> dict[str, int]:
    client = OpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    tools: Any = [{"type": "function", "function": t} for t in TOOLS]
    messages: list[Any] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": TASK},
    ]
    turns = calls = 0
    for _ in range(MAX_TURNS):
        text: list[str] = []
        pending: dict[int, dict[str, str]] = {}
        stream = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=tools,
            tool_choice="auto",
            parallel_tool_calls=True,
            max_completion_tokens=MAX_TOKENS,
            reasoning_effort="low",
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                for tc in delta.tool_calls or []:
                    slot = pending.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = tc.id or slot["id"]
                    if tc.function is not None:
                        slot["name"] = tc.function.name or slot["name"]
                        slot["arguments"] += tc.function.arguments or ""
        turns += 1
        if not pending:
            break
        messages.append(
            {
                "role": "assistant",
                "content": "".join(text) or None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in pending.values()
                ],
            }
        )
        for c in pending.values():
            calls += 1
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": c["id"],
                    "content": run_tool(c["name"], c["arguments"]),
                }
            )
    return {"turns": turns, "tool_calls": calls}


def anthropic_messages(base_url: str) -> dict[str, int]:
    client = Anthropic(base_url=base_url.removesuffix("/v1"), api_key=KEY, max_retries=0)
    tools = [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in TOOLS
    ]
    messages: list[Any] = [{"role": "user", "content": TASK}]
    turns = calls = 0
    for _ in range(MAX_TURNS):
        with client.messages.stream(
            model=CLAUDE_MODEL,
            max_tokens=MAX_TOKENS,
            system=INSTRUCTIONS,
            messages=messages,
            tools=tools,  # type: ignore[arg-type]
        ) as stream:
            message = stream.get_final_message()
        turns += 1
        messages.append(
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in message.content],
            }
        )
        uses = [b for b in message.content if b.type == "tool_use"]
        if not uses:
            break
        results = []
        for use in uses:
            calls += 1
            output = run_tool(use.name, json.dumps(use.input))
            results.append({"type": "tool_result", "tool_use_id": use.id, "content": output})
        messages.append({"role": "user", "content": results})
    return {"turns": turns, "tool_calls": calls}


def _agents(base_url: str, websocket: bool) -> dict[str, int]:
    set_tracing_disabled(True)
    calls = [0]

    @function_tool
    def read_file(path: str, max_lines: int = 200) -> str:
        """Read a text file of the repository."""
        calls[0] += 1
        return run_tool("read_file", json.dumps({"path": path, "max_lines": max_lines}))

    @function_tool
    def run_command(command: str, timeout_s: int = 60) -> str:
        """Run a shell command in the repository and return its output."""
        calls[0] += 1
        return run_tool("run_command", json.dumps({"command": command, "timeout_s": timeout_s}))

    settings = ModelSettings(reasoning=Reasoning(effort="low"), max_tokens=MAX_TOKENS)

    def coder(model: Any) -> Any:
        return Agent(
            name="coder",
            instructions=INSTRUCTIONS,
            tools=[read_file, run_command],
            model=model,
            model_settings=settings,
        )

    async def go() -> Any:
        if websocket:
            async with responses_websocket_session(api_key=KEY, base_url=base_url) as ws:
                result = ws.run_streamed(coder(MODEL), TASK, max_turns=MAX_TURNS)
                async for _ in result.stream_events():
                    pass
                return result
        client = AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
        try:
            model = OpenAIResponsesModel(model=MODEL, openai_client=client)
            return await Runner.run(coder(model), TASK, max_turns=MAX_TURNS)
        finally:
            await client.close()

    result = asyncio.run(go())
    return {"turns": len(result.raw_responses), "tool_calls": calls[0]}


LOOPS: dict[str, Callable[[str], dict[str, int]]] = {
    "openai-responses": openai_responses,
    "openai-chat": openai_chat,
    "anthropic": anthropic_messages,
    "agents-http": lambda url: _agents(url, websocket=False),
    "agents-ws": lambda url: _agents(url, websocket=True),
}


def main(argv: list[str]) -> int:
    kind, base_url = argv
    print(json.dumps(LOOPS[kind](base_url)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
