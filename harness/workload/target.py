"""A scenario's ``target:`` section: how requests are shaped for a real server.

Validated like every other section (file, field, expected value); turned into the
client's :class:`~harness.client.shaping.RequestShaping` by the run (with the
``--header``, ``--session-header``, ``--extra-body`` and ``--tokenizer`` flags on top).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field
from pydantic import model_validator as _model_validator

from harness.wire.transports import APIS
from harness.wire.validation import invalid
from harness.workload.distributions import StrictModel, scalars_as_text

#: the APIs whose bodies ``extra_body`` can address, one key each in the per-API form: all
EXTRA_BODY_APIS = APIS
#: body fields the client itself must decide: it reads a stream, and names the model once
RESERVED_BODY_FIELDS = {
    "stream": "the client reads a streamed response; stream cannot be changed",
    "model": "the model name comes from the scenario's model: field or --model",
}
#: an HTTP header name (RFC 9110 token)
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


def extra_body_problem(extra: dict[str, Any]) -> tuple[str, str, Any] | None:
    """(field relative to extra_body, expected, got) for the first problem, or None."""
    apis = [k for k in extra if k in EXTRA_BODY_APIS]
    others = [k for k in extra if k not in EXTRA_BODY_APIS]
    if apis and others:
        return (
            others[0],
            "either body fields for every API or only the keys "
            f"{', '.join(EXTRA_BODY_APIS)} (each a mapping of fields), not both",
            others[0],
        )
    per_api = {api: extra[api] for api in apis} if apis else {"": extra}
    for api, fields in per_api.items():
        if not isinstance(fields, dict):
            return api, "a mapping of body fields for that API", fields
        for key in fields:
            if key in RESERVED_BODY_FIELDS:
                where = f"{api}.{key}" if api else key
                return where, f"no {key} field ({RESERVED_BODY_FIELDS[key]})", fields[key]
    return None


class TargetConfig(StrictModel):
    """How every request is shaped for a real server (docs/targets.md)."""

    headers: Annotated[dict[str, str], BeforeValidator(scalars_as_text)] = Field(
        default_factory=dict,
        description="Extra HTTP headers on every request and WebSocket handshake, NAME: VALUE. "
        "Values of credential headers (authorization, x-api-key, *token*, *key*) are never "
        "printed or recorded; prefer --header or --api-key-env for secrets.",
    )
    session_header: str | None = Field(
        default=None,
        description="A header set to the rollout's id on every request of that rollout (and on "
        "its WebSocket handshake), e.g. X-Session-ID: routers keep a conversation on one "
        "replica, where its prefix cache is.",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Fields merged into every request body: a mapping for every API, or keys "
        "responses, chat, messages with a mapping each; e.g. {ignore_eos: true, min_tokens: 64} "
        "for vLLM.",
    )
    tokenizer: str | None = Field(
        default=None,
        min_length=1,
        description="A Hugging Face tokenizer: a tokenizer.json (or its folder; relative to this "
        "file) or a model name already in the local cache. Sizes the synthetic text and counts "
        "streamed tokens; default: 4 characters per token (the reference server's rule).",
    )

    @_model_validator(mode="after")
    def _checks(self) -> TargetConfig:
        for name in self.headers:
            if not HEADER_NAME.match(name):
                raise invalid(
                    f"headers.{name}",
                    "a header name of letters, digits and -_.!#$%&'*+^`|~ (no spaces or colon)",
                    name,
                )
        for name, value in self.headers.items():
            if any(c in value for c in "\r\n\0"):
                # the value is not shown: it may be a credential
                raise invalid(f"headers.{name}", "a value on one line", "a line break")
        if self.session_header is not None and not HEADER_NAME.match(self.session_header):
            raise invalid(
                "session_header",
                "a header name of letters, digits and -_.!#$%&'*+^`|~, e.g. X-Session-ID",
                self.session_header,
            )
        problem = extra_body_problem(self.extra_body)
        if problem is not None:
            field, expected, got = problem
            raise invalid(f"extra_body.{field}" if field else "extra_body", expected, got)
        return self
