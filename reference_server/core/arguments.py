"""Function-call arguments that a real agent's tool dispatch accepts (pure, seeded).

The schema keywords the walker follows, the strings it draws by property name, and how the
arguments reach the planned length (one free-text property grows; paths, ids, URLs and enums
never do): docs/model.md §11, the "Content." item.  A ``number`` is drawn as an integer too,
since agents parse ``timeout_ms: number`` into integer types.
"""

from __future__ import annotations

import math
import random
import re
import shlex
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from harness.wire.tokens import CHARS_PER_TOKEN, chunked_text
from reference_server.core.conversation import item_text
from reference_server.core.regex_sample import matching_string

# A path or command argument names a file the conversation mentioned this often (when it did).
SEEN_PATH_PROBABILITY = 0.8
MAX_SEEN_PATHS = 32
# mentioned_paths reads the last few items, else the system prompt among the first; the end of each.
SCAN_HEAD_ITEMS = 4
SCAN_TAIL_ITEMS = 8
SCAN_CHARS = 16_384
# Schema-driven arguments: arrays at most this long, nested at most this deep.
MAX_SAMPLED_ITEMS = 64
MAX_SAMPLED_DEPTH = 8
# An optional property worth filling (_worth_filling) is filled this often: a model mostly
# leaves optional arguments out.
OPTIONAL_PROBABILITY = 0.25

_PATHS = (
    "src/main.py",
    "src/app/server.ts",
    "README.md",
    "tests/test_api.py",
    "lib/utils.js",
    "pkg/handler/handler.go",
    "docs/guide.md",
    "src/lib.rs",
    "package.json",
    "pyproject.toml",
    "Makefile",
    "config/settings.yaml",
)
_DIRS = (".", "src", "tests", "lib", "docs", "src/app", "pkg")
_COMMANDS = (
    "ls -la",
    "git status",
    "git diff --stat",
    "pytest -q tests/test_api.py",
    "rg -n TODO src",
    "cat README.md",
    "npm test",
    "go test ./...",
    "cargo build",
    "make lint",
    "sed -n 1,80p src/main.py",
    "grep -rn 'def main' src",
)
_PATTERNS = ("TODO", "def main", "import os", "error", "class \\w+", "fn new", "useState")
_GLOBS = ("**/*.py", "src/**/*.ts", "*.md", "**/*_test.go", "tests/**")
_QUERIES = ("error handling", "config loader", "retry policy", "unit tests", "API docs")
_WORDS = ("fix", "update", "check", "read", "run", "tests", "config", "parser", "server", "docs")
_HOSTS = ("example.com", "docs.example.org", "api.example.net")
# Free text a call may lengthen, best first: what an agent writes at length.
_FREE_TEXT = (
    "content",
    "new_string",
    "new_str",
    "patch",
    "input",
    "text",
    "body",
    "code",
    "file_text",
    "contents",
    "message",
    "prompt",
    "plan",
    "description",
    "explanation",
    "justification",
    "query",
    "old_string",
    "old_str",
)
# Where allOf's further patterns go when merged (a key no schema uses).
_MORE_PATTERNS = " patterns"
# Integer properties by name: how many (10-200), which line (1-300).
_COUNTS = ("limit", "max_results", "head_limit", "count", "max_lines", "n")
_LINES = ("offset", "line", "start_line", "end_line", "line_number")
# Files the conversation names: relative or absolute, with an extension that starts with a
# letter (notes.txt, /srv/app/main.go; not v1.0), not inside a URL or a longer path.
_PATH_MENTION = re.compile(
    r"(?<![\w/.~:-])((?:~?/)?(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,5})(?![\w/-])"
)
_READ_ITEM_TYPES = ("message", "function_call_output", "custom_tool_call_output")
_FILE_COMMANDS = ("cat {path}", "head -n 20 {path}", "wc -l {path}", "sed -n 1,40p {path}")
# A command carries exact-plan filler as a shell comment (the filler starts with a space).
_COMMAND_SEPARATOR = " #"
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def _words(name: str) -> str:
    """``filePath``, ``file-path`` and ``file_path`` alike: ``file_path``."""
    return _CAMEL.sub(r"_\1", name).lower().replace("-", "_")


# What a property's name says its string holds: (kind, whole names, name endings), first match
# wins; any other name holds text.
_NAME_KINDS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("url", ("url", "uri", "href", "link", "endpoint"), ("_url", "_uri")),
    ("id", ("id", "ids", "uuid"), ("_id", "_ids", "_uuid")),
    ("program", ("shell", "interpreter", "program"), ()),
    ("command", ("cmd", "command", "commands", "script"), ("_command", "_cmd")),
    ("glob", ("glob", "include", "exclude", "globs"), ("_glob",)),
    ("pattern", ("pattern", "regex", "regexp", "search_pattern"), ("_pattern",)),
    (
        "dir",
        ("dir", "directory", "cwd", "workdir", "working_directory", "folder", "root"),
        ("_dir", "_directory", "_folder"),
    ),
    (
        "path",
        ("path", "file", "filename", "file_path", "filepath", "paths", "files", "target"),
        ("_path", "_file", "_paths", "_files", "filename"),
    ),
    ("query", ("query", "q", "search", "keywords", "question"), ()),
    ("name", ("name", "title", "label", "subject", "header", "tag", "branch"), ()),
    ("email", ("email", "mail"), ()),
)
# Kinds whose values are drawn from a list of realistic ones.
_CHOICES: dict[str, tuple[str, ...]] = {
    "command": _COMMANDS,
    "program": ("bash", "sh", "zsh"),
    "glob": _GLOBS,
    "pattern": _PATTERNS,
    "dir": _DIRS,
    "path": _PATHS,
    "query": _QUERIES,
}


def _kind_of_name(name: str) -> str:
    """What a property's name says its string holds (``path``, ``command`` …), or ``text``."""
    n = _words(name)
    for kind, names, endings in _NAME_KINDS:
        if n in names or n.endswith(endings):
            return kind
    return "text"


Draw = Callable[[random.Random], str]


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def _url(rng: random.Random) -> str:
    return f"https://{rng.choice(_HOSTS)}/{rng.choice(_WORDS)}/{rng.randint(1, 99)}"


def _email(rng: random.Random) -> str:
    return f"{rng.choice(_WORDS)}@{rng.choice(_HOSTS)}"


# Kinds whose values are made up, not picked from a list.
_MADE: dict[str, Draw] = {
    "url": _url,
    "id": lambda rng: f"{rng.choice(('call', 'item', 'task', 'msg'))}_{rng.getrandbits(40):010x}",
    "name": lambda rng: f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}",
    "email": _email,
}
# A value per JSON Schema ``format`` this walker knows.
_FORMATS: dict[str, Draw] = {
    **dict.fromkeys(("uri", "url", "iri", "uri-reference", "iri-reference"), _url),
    **dict.fromkeys(("email", "idn-email"), _email),
    "uuid": _uuid,
    "date": lambda rng: f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
    "time": lambda rng: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
    "date-time": lambda rng: (
        f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"
    ),
    **dict.fromkeys(("hostname", "idn-hostname"), lambda rng: rng.choice(_HOSTS)),
    "ipv4": lambda rng: f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
    "ipv6": lambda rng: f"fd00::{rng.randint(1, 0xFFFF):x}",
}


def _realistic(kind: str, rng: random.Random) -> str:
    if kind in _CHOICES:
        return rng.choice(_CHOICES[kind])
    if kind in _MADE:
        return _MADE[kind](rng)
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 6)))


def _finite(schema: dict[str, Any], key: str) -> float | None:
    value = schema.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if -1e15 < value < 1e15 else None  # also false for NaN


class _Walker:
    """One tool's schema, its ``$defs``, and the generator the values are drawn from."""

    def __init__(self, root: dict[str, Any], rng: random.Random, paths: Sequence[str] = ()) -> None:
        self.root = root
        self.rng = rng
        self.paths = paths

    def realistic(self, kind: str) -> str:
        """:func:`_realistic`, but mostly a file the conversation named when it named some."""
        if self.paths and kind in ("path", "command") and self.rng.random() < SEEN_PATH_PROBABILITY:
            path = self.rng.choice(self.paths)
            if kind == "path":
                return path
            return self.rng.choice(_FILE_COMMANDS).format(path=shlex.quote(path))
        return _realistic(kind, self.rng)

    # -- schema plumbing -----------------------------------------------------------------
    def resolve(self, schema: Any, depth: int) -> dict[str, Any]:
        """``schema`` with local ``$ref`` followed and ``allOf`` merged (a dict, maybe empty)."""
        for _ in range(MAX_SAMPLED_DEPTH):
            if not isinstance(schema, dict):
                return {}
            ref = schema.get("$ref")
            if not isinstance(ref, str) or not ref.startswith("#"):
                break
            target: Any = self.root
            for part in ref[1:].split("/")[1:] if ref != "#" else []:
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest} if isinstance(target, dict) else rest
        if not isinstance(schema, dict):
            return {}
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in parts:
                _merge(merged, self.resolve(part, depth))
            return merged
        return schema

    # -- values --------------------------------------------------------------------------
    def value(self, schema: Any, name: str, depth: int) -> Any:
        s = self.resolve(schema, depth)
        if "const" in s:
            return s["const"]
        enum = s.get("enum")
        if isinstance(enum, list) and enum:
            return self.rng.choice(enum)
        for key in ("oneOf", "anyOf"):
            branches = s.get(key)
            if isinstance(branches, list) and branches:
                branch = self.pick_branch(branches, depth)
                base = {k: v for k, v in s.items() if k != key}
                return self.value({**base, **branch}, name, depth)
        kind = self.type_of(s)
        if kind == "integer":
            return self.integer(s, name)
        if kind == "number":
            return self.number(s, name)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        if kind == "array":
            return self.array(s, name, depth)
        if kind == "object":
            return self.object(s, depth + 1)
        return self.string(s, name)

    def optional(self, s: dict[str, Any], name: str, depth: int) -> Any:
        """An optional argument as a cautious model fills it: its default, the first choice, off."""
        if "default" in s and "$ref" not in s:
            return s["default"]
        enum = s.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        if s.get("type") == "boolean":
            return False
        return self.value(s, name, depth)

    def pick_branch(self, branches: list[Any], depth: int) -> dict[str, Any]:
        """One branch, preferring one that is not ``null`` (an agent fills what it may)."""
        resolved = [self.resolve(b, depth) for b in branches]
        useful = [b for b in resolved if b.get("type") != "null"] or resolved
        return self.rng.choice(useful)

    def type_of(self, s: dict[str, Any]) -> str:
        kind = s.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if isinstance(k, str) and k != "null"]
            kind = self.rng.choice(kinds) if kinds else "null"
        if isinstance(kind, str):
            return kind
        if "properties" in s or "required" in s or "additionalProperties" in s:
            return "object"
        if "items" in s or "prefixItems" in s:
            return "array"
        if "minimum" in s or "maximum" in s:
            return "number"
        return "string"

    def integer(self, s: dict[str, Any], name: str) -> int:
        lo, hi = self.int_range(s, name)
        if lo > hi:  # contradictory bounds: the nearest honest value
            return int(lo)
        step = _finite(s, "multipleOf")
        if step and step == int(step) and step > 0:
            k_lo, k_hi = -(-lo // int(step)), hi // int(step)
            if k_lo <= k_hi:
                return int(self.rng.randint(int(k_lo), int(k_hi)) * int(step))
        return self.rng.randint(int(lo), int(hi))

    def int_range(self, s: dict[str, Any], name: str) -> tuple[int, int]:
        """The schema's integer bounds, narrowed to what the property's name makes plausible."""
        n = _words(name)
        lo, hi = 1, 100
        if "timeout" in n:
            seconds = n.endswith(("_s", "sec", "secs", "seconds"))
            lo, hi = (5, 120) if seconds else (5000, 120000)
        elif n.endswith("_ms"):
            lo, hi = 1000, 30000
        elif n in _COUNTS:
            lo, hi = 10, 200
        elif n in _LINES:
            lo, hi = 1, 300
        minimum, maximum = _finite(s, "minimum"), _finite(s, "maximum")
        ex_min, ex_max = _finite(s, "exclusiveMinimum"), _finite(s, "exclusiveMaximum")
        floors = [] if minimum is None else [math.ceil(minimum)]
        ceilings = [] if maximum is None else [math.floor(maximum)]
        if s.get("exclusiveMinimum") is True and minimum is not None:  # draft 4: a flag
            floors = [math.floor(minimum) + 1]
        elif ex_min is not None:
            floors.append(math.floor(ex_min) + 1)
        if s.get("exclusiveMaximum") is True and maximum is not None:
            ceilings = [math.ceil(maximum) - 1]
        elif ex_max is not None:
            ceilings.append(math.ceil(ex_max) - 1)
        floor = max(floors) if floors else None
        ceiling = min(ceilings) if ceilings else None
        plausible_lo = lo if floor is None else max(lo, floor)
        plausible_hi = hi if ceiling is None else min(hi, ceiling)
        if plausible_lo <= plausible_hi:
            return plausible_lo, plausible_hi
        # The plausible range misses the schema's: anything the schema allows.
        if floor is not None and ceiling is not None:
            return floor, ceiling
        if floor is not None:
            return floor, floor + 100
        assert ceiling is not None
        return ceiling - 100, ceiling

    def number(self, s: dict[str, Any], name: str) -> float | int:
        lo, hi = self.int_range(s, name)
        step = _finite(s, "multipleOf")
        if lo <= hi and (step is None or step == int(step)):
            return self.integer(s, name)
        # No integer fits (or a fractional step): a number inside the bounds.
        a = _finite(s, "minimum") or _finite(s, "exclusiveMinimum") or 0.0
        b = _finite(s, "maximum") or _finite(s, "exclusiveMaximum") or a + 1
        if step:
            # The first multiple strictly above the lower bound: valid for an exclusive one too.
            return round((math.floor(a / step) + 1) * step, 10)
        return a + (b - a) * (0.25 + 0.5 * self.rng.random())

    def string(self, s: dict[str, Any], name: str) -> str:
        fmt = s.get("format")
        # A format this walker does not know gets the value its property's name suggests.
        draw = _FORMATS.get(fmt) if isinstance(fmt, str) else None
        text = draw(self.rng) if draw is not None else self.realistic(_kind_of_name(name))
        patterns = [s.get("pattern"), *s.get(_MORE_PATTERNS, [])]
        wanted = [p for p in patterns if isinstance(p, str)]
        if wanted:
            text = self.matching(wanted, text)
        lo, hi = _int(s.get("minLength")), _int(s.get("maxLength"))
        if lo is not None and len(text) < lo:
            text += "x" * (lo - len(text))
        if hi is not None and len(text) > hi >= 0:
            text = text[:hi]
        return text

    def matching(self, patterns: list[str], first: str) -> str:
        """A string every pattern accepts: the realistic one, one made from the first
        pattern, or a few plain candidates; else the realistic one (the schema's loss)."""
        try:
            compiled = [re.compile(p) for p in patterns]
        except re.error:
            return first
        made = [matching_string(p, self.rng) for p in patterns]
        candidates = [first, *(m for m in made if m is not None)]
        candidates += ["a", "abc", "x1", "A", "1", "a-b", "a_b", "2026-01-01", "v1.0.0"]
        for candidate in candidates:
            if all(c.search(candidate) for c in compiled):
                return candidate
        return first

    def array(self, s: dict[str, Any], name: str, depth: int) -> list[Any]:
        if depth >= MAX_SAMPLED_DEPTH:
            return []
        lo, hi = _int(s.get("minItems", 0)), _int(s.get("maxItems", MAX_SAMPLED_ITEMS))
        lo = min(lo, MAX_SAMPLED_ITEMS) if lo is not None and lo >= 0 else 0
        hi = min(hi, MAX_SAMPLED_ITEMS) if hi is not None and hi >= 0 else MAX_SAMPLED_ITEMS
        prefix = s.get("prefixItems")
        if not isinstance(prefix, list):
            legacy = s.get("items")
            prefix = legacy if isinstance(legacy, list) else []
        items = s.get("items")
        rest: Any = items if isinstance(items, dict) else s.get("additionalItems")
        if not isinstance(rest, dict):
            rest = {} if (items is None and not prefix) else None
        if rest is not None and not prefix and self.argv_like(name, rest):
            return self.argv(lo, hi)
        want = max(lo, min(hi, self.rng.randint(1, 3)))
        if rest is None:
            want = min(want, len(prefix))
        out: list[Any] = []
        attempts = 0
        while len(out) < want and attempts < want * 4:
            attempts += 1
            i = len(out)
            sub = prefix[i] if i < len(prefix) else rest
            value = self.value(sub, _singular(name), depth + 1)
            if s.get("uniqueItems") is True and value in out:
                continue
            out.append(value)
        return out

    def argv_like(self, name: str, items: dict[str, Any]) -> bool:
        item = self.resolve(items, 0)
        return (
            _kind_of_name(name) == "command"
            and item.get("type", "string") == "string"
            and ("enum" not in item and "const" not in item and "pattern" not in item)
        )

    def argv(self, lo: int, hi: int) -> list[str]:
        """A command as an argument vector: ``["bash", "-lc", "<command>"]``, as Codex sends it."""
        argv = ["bash", "-lc", self.realistic("command")]
        if hi < len(argv):
            argv = [" ".join(argv[2:])][:hi] if hi >= 1 else []
        while len(argv) < lo:
            argv.append(self.rng.choice(_WORDS))
        return argv

    def object(self, s: dict[str, Any], depth: int) -> dict[str, Any]:
        if depth > MAX_SAMPLED_DEPTH:
            return {}
        raw_props = s.get("properties")
        props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
        raw_required = s.get("required")
        required = (
            [r for r in raw_required if isinstance(r, str)]
            if isinstance(raw_required, list)
            else []
        )
        room = _int(s.get("maxProperties"))
        room = len(props) + len(required) if room is None else room
        out: dict[str, Any] = {}
        for name in required:
            out[name] = self.value(props.get(name, {}), name, depth)
        for name, sub in props.items():
            if name in out or len(out) >= room:
                continue
            resolved = self.resolve(sub, depth)
            if resolved.get("deprecated") is True:
                continue
            if _worth_filling(name) and self.rng.random() < OPTIONAL_PROBABILITY:
                out[name] = self.optional(resolved, name, depth)
        lo = _int(s.get("minProperties"))
        if lo is not None:
            for name, sub in props.items():
                if len(out) >= lo:
                    break
                out.setdefault(name, self.value(sub, name, depth))
            extra = s.get("additionalProperties", True)
            if extra is not False:
                i = 0
                while len(out) < lo and i < MAX_SAMPLED_ITEMS:
                    out.setdefault(
                        f"key{i}",
                        self.value(extra if isinstance(extra, dict) else {}, "text", depth),
                    )
                    i += 1
        return out


def _worth_filling(name: str) -> bool:
    """Whether a model would fill this optional property unasked: where to look, how much,
    how long, a description.  Flags, modes and justifications change what the tool does
    (Codex refuses a ``justification`` without ``sandbox_permissions``), and a working
    directory the model cannot know exists fails the command: left out."""
    n = _words(name)
    if _kind_of_name(name) in ("path", "glob", "pattern", "query"):
        return True
    return n == "description" or n in _COUNTS or n in _LINES or "timeout" in n


def _int(value: Any) -> int | None:
    """``value`` when it is a JSON integer (a boolean is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _merge(into: dict[str, Any], part: dict[str, Any]) -> None:
    for key, value in part.items():
        if key == "pattern" and "pattern" in into:
            into.setdefault(_MORE_PATTERNS, []).append(value)
        elif key == "properties" and isinstance(value, dict):
            into["properties"] = {**into.get("properties", {}), **value}
        elif key == "required" and isinstance(value, list):
            into["required"] = [*into.get("required", []), *value]
        else:
            into.setdefault(key, value)


def _singular(name: str) -> str:
    n = _words(name)
    return n[:-1] if n.endswith("s") and len(n) > 3 else n


def sample_arguments(
    schema: dict[str, Any], rng: random.Random, paths: Sequence[str] = ()
) -> dict[str, Any]:
    """One arguments object valid against ``schema`` (a tool's ``parameters``).

    ``paths`` (:func:`mentioned_paths`) are files the conversation named: a path or a
    command mostly uses one of them, so an agent's tool finds the file it was asked about.
    """
    walker = _Walker(schema, rng, paths)
    return walker.object(walker.resolve(schema, 0), 0)


def _padding_key(
    schema: dict[str, Any], args: dict[str, Any], *, exact: bool
) -> tuple[str, str] | None:
    """(property, separator) of a string we may lengthen without breaking the schema.

    Free text first (best-first :data:`_FREE_TEXT`, then any other ``text``-like
    string); a command only under an exact plan, its filler after `` # ``.  None
    when nothing may grow.
    """
    raw_props = schema.get("properties")
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}

    def growable(name: str) -> bool:
        sub = props.get(name)
        if not isinstance(sub, dict) or name not in args or not isinstance(args[name], str):
            return False
        free = not any(k in sub for k in ("enum", "const", "format", "pattern", "maxLength"))
        return free and sub.get("type", "string") == "string"

    names = [n for n in props if growable(n)]
    ranked = sorted(
        names, key=lambda n: _FREE_TEXT.index(_words(n)) if _words(n) in _FREE_TEXT else 99
    )
    for name in ranked:
        if _words(name) in _FREE_TEXT or _kind_of_name(name) in ("text", "query", "name"):
            return name, ""  # the filler starts with a space
    if exact:
        for name in ranked:
            if _kind_of_name(name) == "command":
                return name, _COMMAND_SEPARATOR
    if exact and not props and schema.get("additionalProperties", True) is not False:
        return "content", ""
    return None


def make_arguments(
    tool: dict[str, Any],
    n_tokens: int,
    rng: random.Random,
    *,
    exact: bool = True,
    paths: Sequence[str] = (),
) -> str:
    """JSON arguments valid against ``tool['parameters']``, about ``n_tokens`` tokens long.

    With ``exact`` (loopbench's hint) they are exactly ``n_tokens`` whenever the
    schema leaves a string to lengthen and the bare arguments are shorter; without
    it only free text grows, towards ``n_tokens``.
    """
    raw_schema = tool.get("parameters")
    schema: dict[str, Any] = raw_schema if isinstance(raw_schema, dict) else {}
    args = sample_arguments(schema, rng, paths)
    base = orjson.dumps(args).decode()
    target_chars = n_tokens * CHARS_PER_TOKEN
    picked = _padding_key(_Walker(schema, rng).resolve(schema, 0), args, exact=exact)
    if picked is None:
        return base
    key, sep = picked
    if exact and len(base) > target_chars and key in args:
        # A short plan: the growable string at its shortest, so the plan is still met when it can be.
        args[key] = "ls" if sep == _COMMAND_SEPARATOR else ""
        base = orjson.dumps(args).decode()
    if len(base) > target_chars - CHARS_PER_TOKEN:
        return base  # already the planned length (or longer: nothing may shrink)
    current = args.get(key, "")
    current_s = current if isinstance(current, str) else ""
    if key in args:
        overhead = len(orjson.dumps(current_s + sep)) - len(orjson.dumps(current_s))
    else:  # a new key costs its name, quotes, colon and comma as well
        overhead = len(orjson.dumps({key: sep})) - 2 + (1 if args else 0)
    room = target_chars - len(base) - overhead
    if room < 0:
        return base
    # Whole filler tokens: the total lands within the last token's 4 characters, so it counts exactly.
    args[key] = current_s + sep + chunked_text(room // CHARS_PER_TOKEN, rng)
    return orjson.dumps(args).decode()


def mentioned_paths(items: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """Files the conversation names, most recent first.

    The user's messages and the tool outputs among the last :data:`SCAN_TAIL_ITEMS` items
    (the task, what the tools just showed); else the system prompt's (its examples are a
    last resort).  At most :data:`SCAN_CHARS` of each item, so the cost does not grow with
    the conversation.
    """
    recent = [it for it in items[-SCAN_TAIL_ITEMS:] if not _is_prompt(it)]
    return _paths_in(recent) or _paths_in([it for it in items[:SCAN_HEAD_ITEMS] if _is_prompt(it)])


def _is_prompt(item: dict[str, Any]) -> bool:
    return item.get("type", "message") == "message" and item.get("role") in ("system", "developer")


def _paths_in(items: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in reversed(items):
        if item.get("type", "message") not in _READ_ITEM_TYPES:
            continue
        for match in _PATH_MENTION.finditer(item_text(item)[-SCAN_CHARS:]):
            path = match.group(1)
            if len(path) >= 5 and len(seen) < MAX_SEEN_PATHS:
                seen.setdefault(path, None)
    return tuple(seen)
