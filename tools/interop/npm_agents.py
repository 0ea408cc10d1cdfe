"""The npm agents, pinned, in a folder of their own (``.agents/``, never the project's dependencies).

Codex CLI and Claude Code are what performance engineers run today; ``make interop`` installs
the versions below with npm's ordinary client into ``.agents/`` (gitignored) and runs them
from there, each in a scratch home so no user configuration, login or history is read.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

CODEX_PACKAGE = "@openai/codex"
CODEX_VERSION = "0.171.0"
CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_VERSION = "2.1.332"
PINS = {CODEX_PACKAGE: CODEX_VERSION, CLAUDE_PACKAGE: CLAUDE_VERSION}

# Telemetry, error reports and update checks of Claude Code off (docs/agents.md); its
# connectivity check (HEAD /api/hello) goes to the base URL, loopback, and stays.
CLAUDE_QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}

# Codex reads these from its config.toml (there are no environment variables for them).
CODEX_QUIET = """check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false
"""


class InstallError(RuntimeError):
    """npm is missing or could not install the pinned agents."""


@dataclass(frozen=True, slots=True)
class Installed:
    codex: Path
    claude: Path


def _bins(folder: Path) -> Installed:
    bins = folder / "node_modules" / ".bin"
    return Installed(codex=bins / "codex", claude=bins / "claude")


def _installed_version(folder: Path, package: str) -> str | None:
    manifest = folder / "node_modules" / package / "package.json"
    try:
        text = manifest.read_text()
    except OSError:
        return None
    version = json.loads(text).get("version")
    return version if isinstance(version, str) else None


def ensure_agents(folder: Path, log: Path) -> Installed:
    """The pinned agents in ``folder``, installed there by npm if they are not yet."""
    if all(_installed_version(folder, p) == v for p, v in PINS.items()):
        return _bins(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # A package.json of its own: npm must not walk up into (or write to) the project's.
    manifest = folder / "package.json"
    if not manifest.exists():
        manifest.write_text('{"private": true, "description": "make interop\'s agents"}\n')
    specs = [f"{p}@{v}" for p, v in PINS.items()]
    cmd = ["npm", "install", "--no-audit", "--no-fund", "--save-exact", "--prefix", str(folder)]
    try:
        with log.open("ab") as out:
            done = subprocess.run(
                [*cmd, *specs], stdout=out, stderr=subprocess.STDOUT, timeout=600, check=False
            )
    except FileNotFoundError:
        raise InstallError("npm not found: install Node.js (npm) to run the npm agents") from None
    except subprocess.TimeoutExpired:
        raise InstallError(f"npm install took over 10 minutes (log: {log})") from None
    if done.returncode != 0:
        raise InstallError(
            f"npm install {' '.join(specs)} failed (exit {done.returncode}; log: {log})"
        )
    missing = [p for p, v in PINS.items() if _installed_version(folder, p) != v]
    if missing:
        raise InstallError(
            f"npm installed no {', '.join(missing)} at the pinned version (log: {log})"
        )
    return _bins(folder)


def codex_home(home: Path, base_url: str, websocket: bool) -> dict[str, str]:
    """A scratch ``CODEX_HOME`` whose provider is the server at ``base_url``; the environment."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_provider = "loopbench"\n'
        + CODEX_QUIET
        + "\n[model_providers.loopbench]\n"
        + 'name = "loopbench"\n'
        + f'base_url = "{base_url}"\n'
        + 'env_key = "LOOPBENCH_API_KEY"\n'
        + 'wire_api = "responses"\n'
        + f"supports_websockets = {'true' if websocket else 'false'}\n"
    )
    return {
        "CODEX_HOME": str(home),
        "HOME": str(home),
        "LOOPBENCH_API_KEY": "sk-interop-local",
        # loopback only, whatever proxy the machine is set up with
        "NO_PROXY": "*",
    }


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    """Claude Code's environment: only the base URL and a key set, telemetry off."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "sk-ant-interop-local",
        "NO_PROXY": "*",
        **CLAUDE_QUIET,
    }


def scrubbed_environ() -> dict[str, str]:
    """This process's environment without anything that would point an agent elsewhere."""
    drop = ("OPENAI_", "ANTHROPIC_", "CODEX_", "CLAUDE_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}
