"""What an agent sends each turn: the pure half of the rollout loop.

:class:`Transcript` turns a :class:`~harness.workload.plan.RolloutPlan` into request
bodies and folds each response back into the conversation, exactly as a coding
agent does: echo the function calls, run the tools, send their outputs.  All
text is generated from the plan's seed, so every transport sends the same bytes
of content and a comparison between transports is paired.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import orjson

from harness.wire.tokens import FIXED_WIDTH, TokenConvention
from harness.workload.plan import RolloutPlan, TurnPlan

HINT_OUTPUT_TOKENS = "loopbench.output_tokens"
HINT_PARALLEL_CALLS = "loopbench.parallel_calls"
HINT_REASONING_TOKENS = "loopbench.reasoning_tokens"
#: the ``reasoning`` request field of a turn that reasons, as Codex sends it
REASONING = {"summary": "auto"}
TOOL_NAME = "run_tool"
#: the words of the tool description a salt replaces (the same length: 14 characters)
TOOL_PLACE = "the repository"
# Framing tokens per item (role markers, separators); the reference server uses the same figure.
ITEM_OVERHEAD_TOKENS = 4


def _item_tokens(item: dict[str, Any], tokens: TokenConvention = FIXED_WIDTH) -> int:
    kind = item.get("type", "message")
    if kind == "function_call":
        text = str(item.get("name", "")) + str(item.get("arguments", ""))
    elif kind == "function_call_output":
        text = str(item.get("output", ""))
    elif kind == "compaction":
        # Opaque, but 4 characters a token on the reference server: charged as it is long.
        text = str(item.get("encrypted_content", ""))
    else:
        text = str(item.get("content", ""))
    return tokens.count(text) + ITEM_OVERHEAD_TOKENS


def requested_output_tokens(turn: TurnPlan) -> int:
    """The turn's ``max_output_tokens``: what the endpoint's context window must leave room for."""
    # Bounds a real model's output, reasoning included (as the API counts it); generous so
    # the reference server's hint decides.
    return max(64, (turn.output_tokens + turn.reasoning_tokens) * 2 + 32)


def synthetic_tool(
    schema_tokens: int, rng: random.Random, tokens: TokenConvention = FIXED_WIDTH
) -> dict[str, Any]:
    """One function tool whose definition weighs about ``schema_tokens`` tokens.

    Its parameters are a plain ``command`` string so any model (or the reference
    server) can produce valid arguments.
    """
    description = "Run a shell command in the repository and return its output." + tokens.make_text(
        max(0, schema_tokens - 40), rng
    )
    return {
        "type": "function",
        "name": TOOL_NAME,
        "description": description,
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command line to run"}},
            "required": ["command"],
            "additionalProperties": False,
        },
    }


@dataclass(slots=True)
class TurnInput:
    """One request's content, from which each transport picks what it sends."""

    turn: TurnPlan
    history: list[dict[str, Any]]  # every item so far, new ones included (stateless HTTP sends all)
    new_items: list[dict[str, Any]]  # what this turn adds (chained transports send only these)
    instructions: str
    tools: list[dict[str, Any]]
    tool_choice: str
    metadata: dict[str, str]
    max_output_tokens: int
    model: str
    #: this request compacts ``history`` (POST /responses/compact) instead of sampling a turn
    compaction: bool = False
    #: every item so far, never compacted (``None`` until the rollout compacted: ``history``);
    #: what a ``previous_response_not_found`` recovery resends with ``recover_from=full``
    full_history: list[dict[str, Any]] | None = None
    #: the request's ``reasoning`` field (None: not sent, the turn does not reason)
    reasoning: dict[str, Any] | None = None
    #: the turn may name the previous response where the transport chains (False: the
    #: recorded client re-sent the whole input over its WebSocket every turn)
    chain: bool = True
    #: ``history`` carries the reasoning items received (so a request that sends it whole
    #: asks for them encrypted, as Codex does)
    resend_reasoning: bool = False
    #: in the run's token convention: the instructions and tool definitions (in every request
    #: but an append), ``history`` with them (the transcript's ``history_tokens``), and
    #: ``new_items``; what harness/client/bodies.py:sent_tokens adds up per request
    base_tokens: int = 0
    history_tokens: int = 0
    new_tokens: int = 0


def items_tokens(items: list[dict[str, Any]], tokens: TokenConvention = FIXED_WIDTH) -> int:
    """The items' tokens as the transcript counts its history."""
    return sum(_item_tokens(i, tokens) for i in items)


@dataclass(slots=True)
class Transcript:
    plan: RolloutPlan
    model: str = "sim-model"
    history: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    instructions: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    history_tokens: int = 0
    # False: send no loopbench.* metadata, as against an endpoint that knows nothing of them.
    hints: bool = True
    # Every item so far, also those a compaction replaced (``history`` is what is sent).
    full_history: list[dict[str, Any]] = field(default_factory=list)
    compactions: int = 0
    # True for a stateless transport (store: false, no chain): the server keeps nothing, so the
    # reasoning items it returned go back in the history, in place, as Codex sends them.
    resend_reasoning: bool = False
    # False when the whole history goes out every turn and the client sends no reasoning back
    # (a trace's resends_reasoning: false): the reasoning then never re-enters the context.
    # True (a chained transport): the server's chain holds it whatever the client sends.
    server_holds_reasoning: bool = True
    # False: every turn sends the whole history, never naming the previous response (a trace
    # whose client re-sent its input over WebSocket: its ws_chains is false).
    chain: bool = True
    # Sizes the text and counts the history: 4 characters a token, or the run's --tokenizer.
    tokens: TokenConvention = FIXED_WIDTH
    #: first in the instructions and the tool description: one transport's replay apart from
    #: another's in a server's prefix cache (harness/client/rollout.py:pass_salt); "" for none
    salt: str = ""
    # base_tokens, counted once (the instructions and tools never change)
    _base: int = 0

    def __post_init__(self) -> None:
        rng = random.Random(self.plan.seed)
        tokens = self.tokens
        # The salted texts are as long as the plain ones: the same tokens, salt or none.
        opening = f"You are agent {self.salt}." if self.salt else "You are a coding agent."
        self.instructions = opening + tokens.make_text(max(0, self.plan.system_tokens - 6), rng)
        self.tools = [synthetic_tool(self.plan.tool_schema_tokens, rng, tokens)]
        if self.salt:
            # The tool definitions render first in a server's prompt: they need it too.
            tool = self.tools[0]
            tool["description"] = tool["description"].replace(TOOL_PLACE, f"repo #{self.salt}", 1)
        prompt = tokens.make_text(self.plan.user_prompt_tokens, rng)
        self.pending = [{"type": "message", "role": "user", "content": prompt}]
        self.history_tokens = self.base_tokens
        self._base = self.history_tokens

    @property
    def base_tokens(self) -> int:
        """Instructions and tool definitions: in every request, never compacted."""
        tokens = self.tokens
        return tokens.count(self.instructions) + tokens.count(orjson.dumps(self.tools).decode())

    def context_tokens(self) -> int:
        """What the next turn's request would hold: the history and the items pending for it."""
        return self.history_tokens + items_tokens(self.pending, self.tokens)

    def compaction_input(self, index: int) -> TurnInput:
        """The request that compacts the history and the pending tool outputs (as Codex does
        before a turn that would hold too much)."""
        return TurnInput(
            turn=self.plan.turns[index],
            history=self.history + self.pending,
            new_items=[],
            instructions=self.instructions,
            tools=self.tools,
            tool_choice="none",
            metadata={},
            max_output_tokens=requested_output_tokens(self.plan.turns[index]),
            model=self.model,
            compaction=True,
            base_tokens=self._base,
            history_tokens=self.context_tokens(),
        )

    def compacted(self, output_items: list[dict[str, Any]]) -> None:
        """Go on from the compaction: the user's messages, then the compaction item(s).

        The API lists the user's messages in the compact output; the reference server
        leaves them to the client (docs/server.md), so they are kept from the history
        here either way.  The pending tool outputs were compacted with the rest.
        """
        items = [
            {"type": "compaction", "encrypted_content": str(it.get("encrypted_content", ""))}
            for it in output_items
            if it.get("type") == "compaction"
        ]
        users = _user_messages(output_items) or _user_messages(self.history)
        self.full_history.extend(self.pending)
        self.pending = []
        self.history = [*users, *items]
        self.history_tokens = self.base_tokens + items_tokens(self.history, self.tokens)
        self.compactions += 1

    def next_input(self, index: int) -> TurnInput:
        turn = self.plan.turns[index]
        self.full_history.extend(self.pending)
        self.history.extend(self.pending)
        new_tokens = items_tokens(self.pending, self.tokens)
        self.history_tokens += new_tokens
        new_items, self.pending = self.pending, []
        calls = turn.tool_calls
        metadata: dict[str, str] = {}
        if self.hints:
            metadata[HINT_OUTPUT_TOKENS] = str(turn.output_tokens)
            if calls > 1:
                metadata[HINT_PARALLEL_CALLS] = str(calls)
            if turn.reasoning_tokens > 0:
                metadata[HINT_REASONING_TOKENS] = str(turn.reasoning_tokens)
        return TurnInput(
            turn=turn,
            history=list(self.history),
            new_items=new_items,
            instructions=self.instructions,
            tools=self.tools,
            tool_choice="required" if calls else "none",
            metadata=metadata,
            max_output_tokens=requested_output_tokens(turn),
            model=self.model,
            full_history=list(self.full_history) if self.compactions else None,
            reasoning=dict(REASONING) if turn.reasoning_tokens > 0 else None,
            # the first turn may still chain from a recorded warm-up, as the client did
            chain=self.chain or index == 0,
            resend_reasoning=self.resend_reasoning,
            base_tokens=self._base,
            history_tokens=self.history_tokens,
            new_tokens=new_tokens,
        )

    def record_output(
        self, index: int, output_items: list[dict[str, Any]], reasoning_tokens: int = 0
    ) -> list[tuple[str, int]]:
        """Fold a response's output items (in output order) into the history; returns
        (call_id, output tokens) tool jobs.

        Function calls are echoed; reasoning items are kept as received when
        ``resend_reasoning``, else the server holds them (or, when it holds none either, the
        client dropped them).  The conversation the model sees grows by the turn's
        ``reasoning_tokens`` (usage's count) unless they were dropped.
        """
        turn = self.plan.turns[index]
        jobs: list[tuple[str, int]] = []
        if self.resend_reasoning or self.server_holds_reasoning:
            self.history_tokens += max(0, reasoning_tokens)
        sizes = turn.tool_output_tokens or (100,)
        for call in output_items:
            kind = call.get("type")
            if kind == "reasoning" and self.resend_reasoning:
                self.history.append(call)
                self.full_history.append(call)
            if kind not in ("function_call", None):  # None: a bare call, as tests give it
                continue
            item = {
                "type": "function_call",
                "call_id": call.get("call_id", ""),
                "name": call.get("name", TOOL_NAME),
                "arguments": call.get("arguments", "{}"),
            }
            self.history.append(item)
            self.full_history.append(item)
            self.history_tokens += _item_tokens(item, self.tokens)
            jobs.append((str(call.get("call_id", "")), sizes[len(jobs) % len(sizes)]))
        return jobs

    def add_tool_outputs(
        self, index: int, jobs: list[tuple[str, int]], answers: dict[int, str] | None = None
    ) -> None:
        """Queue the tool outputs as the next turn's new items (content fixed by the seed).

        ``answers``: call index → the final answer of the sub-agent that answered that call,
        sent as its output, as agent SDKs do with a sub-agent's result (which is also what
        lets ``loopbench record`` tell that the sub-agent belongs to this conversation).
        """
        rng = random.Random(self.plan.seed * 7919 + index)
        answers = answers or {}
        # every output's text is drawn, answered or not: the next ones stay the same
        texts = [self.tokens.make_text(tokens, rng) for _, tokens in jobs]
        self.pending = [
            {"type": "function_call_output", "call_id": call_id, "output": answers.get(i) or text}
            for i, ((call_id, _), text) in enumerate(zip(jobs, texts, strict=True))
        ]


def _user_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        it for it in items if it.get("type", "message") == "message" and it.get("role") == "user"
    ]
