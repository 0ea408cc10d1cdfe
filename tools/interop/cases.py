"""Each agent and API/transport ``make interop`` runs, and one run of it against a base URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from tools.interop import npm_agents

# A task with something to look at: the agents run their tools in this scratch folder.
TASK = "Show the first line of notes.txt, then say what it means."


#: the reference server's fault: one connection's 3rd response closed after its first delta
CUT_ONCE = ("--ws-fault-close-after", "3", "--ws-fault-close-connections", "1")


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    agent: str
    api: str
    transport: str
    #: the loopbench transport that replays its trace
    replay: str
    #: the WebSocket cases must stay on WebSocket (Codex falls back to HTTP silently)
    websocket: bool = False
    #: options of a reference server of its own, started for each session (its faults)
    server_args: tuple[str, ...] = ()
    #: recoveries the recorded session's trace must hold (one per cut the server made)
    recoveries: int = 0
    #: warm-ups the recorded session's trace must hold: Codex opens each WebSocket session
    #: with a ``generate: false`` request, the warm-up of the rollout that follows
    warmups: int = 0

    @property
    def version(self) -> str:
        if self.agent == "Codex CLI":
            return npm_agents.CODEX_VERSION
        if self.agent == "Claude Code":
            return npm_agents.CLAUDE_VERSION
        package = {"openai-agents": "openai-agents", "openai SDK": "openai"}.get(
            self.agent, "anthropic"
        )
        return version(package)


CASES: tuple[Case, ...] = (
    Case("codex-http", "Codex CLI", "Responses", "HTTP+SSE", "http"),
    Case("codex-ws", "Codex CLI", "Responses", "WebSocket", "ws", websocket=True, warmups=1),
    # The server closes the socket mid-response once (the 3rd response of the first
    # connection: the warm-up, then the task's second turn); Codex reconnects and re-sends
    # the whole context.  Recorded, that is one rollout with one recovery.
    Case(
        "codex-ws-reconnect",
        "Codex CLI",
        "Responses",
        "WebSocket, cut once",
        "ws",
        websocket=True,
        server_args=CUT_ONCE,
        recoveries=1,
        warmups=1,
    ),
    Case("claude-code", "Claude Code", "Messages", "HTTP+SSE", "messages"),
    Case("agents-http", "openai-agents", "Responses", "HTTP+SSE", "http"),
    Case("agents-ws", "openai-agents", "Responses", "WebSocket", "ws", websocket=True),
    Case("openai-responses", "openai SDK", "Responses", "HTTP+SSE", "http"),
    Case("openai-chat", "openai SDK", "Chat Completions", "HTTP+SSE", "chat"),
    Case("anthropic", "anthropic SDK", "Messages", "HTTP+SSE", "messages"),
)


@dataclass(frozen=True, slots=True)
class AgentRun:
    returncode: int
    seconds: float
    #: what the agent said went wrong (its error events, its last stderr line), if anything
    problem: str | None
    #: the turns the agent itself reports, when it does
    turns: int | None = None


def _scratch(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "notes.txt").write_text("# notes\nA scratch file for the agent to read.\n")


def run_case(
    case: Case, base_url: str, work: Path, agents: npm_agents.Installed | None, timeout_s: float
) -> AgentRun:
    """One session of ``case``'s agent against ``base_url`` in the scratch folder ``work``."""
    _scratch(work / "repo")
    env = npm_agents.scrubbed_environ()
    if case.agent == "Codex CLI":
        assert agents is not None
        env |= npm_agents.codex_home(work / "home", base_url, case.websocket)
        cmd = [str(agents.codex), "exec", "--json", "--skip-git-repo-check", TASK]
    elif case.agent == "Claude Code":
        assert agents is not None
        env |= npm_agents.claude_env(work / "home", base_url)
        cmd = [str(agents.claude), "-p", TASK, "--output-format", "json"]
    else:
        cmd = [sys.executable, "-m", "tools.interop.sdk_loops", case.name, base_url]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    start = time.monotonic()
    try:
        done = subprocess.run(
            cmd,
            cwd=work / "repo",
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return AgentRun(-1, time.monotonic() - start, f"no answer within {timeout_s:.0f} s")
    seconds = time.monotonic() - start
    (work / "agent.out").write_text(done.stdout)
    (work / "agent.err").write_text(done.stderr)
    problem, turns = _judge(case, done)
    return AgentRun(done.returncode, seconds, problem, turns)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


def _judge(case: Case, done: subprocess.CompletedProcess[str]) -> tuple[str | None, int | None]:
    """(what went wrong, the turns the agent reports) from its output."""
    if case.agent == "Codex CLI":
        events = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
        errors = [e for e in events if e.get("type") in ("error", "turn.failed")]
        if errors:
            return json.dumps(errors[0])[:200], None
        if not any(e.get("type") == "turn.completed" for e in events):
            return f"no turn.completed: {_last_line(done.stderr)}", None
    elif case.agent == "Claude Code":
        try:
            result = json.loads(done.stdout)
        except ValueError:
            return f"no JSON result: {_last_line(done.stderr or done.stdout)}", None
        if result.get("is_error"):
            return f"{result.get('subtype')}: {str(result.get('result'))[:160]}", None
        return None, int(result.get("num_turns", 0)) or None
    else:
        try:
            return None, int(json.loads(_last_line(done.stdout))["turns"])
        except (ValueError, KeyError):
            return f"exit {done.returncode}: {_last_line(done.stderr)}", None
    if done.returncode != 0:
        return f"exit {done.returncode}: {_last_line(done.stderr)}", None
    return None, None
