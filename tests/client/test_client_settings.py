"""One client-settings object: the manifest's ``client_options`` it writes, and the transport
options built from it. Pure: records in, dicts out."""

from __future__ import annotations

from dataclasses import fields

from harness.client.options import ClientSettings, TransportOptions
from harness.client.shaping import RequestShaping
from harness.wire.tokens import FIXED_WIDTH

SHAPING = RequestShaping((("X-Team", "secret"),), "x-session", {"chat": {"top_k": 5}})


def test_the_manifest_keeps_its_keys_in_order_and_leaves_defaults_out() -> None:
    """manifest.json is read by key, but written runs compare byte for byte: the order and the
    keys written only when not the default are those of every earlier version."""
    plain = ClientSettings().manifest_dict(tokenizer="4-chars", rx_stamp="user")
    assert list(plain) == [
        "hints", "keepalive", "verify_tls", "request_timeout_s", "recover_from", "tokenizer",
        "shaping", "rx_stamp", "rx_stamp_option",
    ]  # fmt: skip
    assert plain["rx_stamp_option"] == "auto"
    given = ClientSettings(cache_control="none", ws_subagents="lanes", shaping=SHAPING)
    out = given.manifest_dict(tokenizer="gpt2", rx_stamp="kernel")
    assert list(out) == [
        "hints", "keepalive", "cache_control", "verify_tls", "request_timeout_s", "recover_from",
        "tokenizer", "shaping", "ws_subagents", "rx_stamp", "rx_stamp_option",
    ]  # fmt: skip
    assert (out["cache_control"], out["ws_subagents"]) == ("none", "lanes")
    # header names only: a header's value may be a credential
    assert out["shaping"]["headers"] == ["X-Team"]
    assert "secret" not in str(out)


def test_transport_options_carry_the_settings_and_resolve_only_what_they_must() -> None:
    settings = ClientSettings(
        api_key="k", hints=False, keepalive=False, verify_tls=False, request_timeout_s=3,
        cache_control="system", recover_from="compacted", shaping=SHAPING, ws_subagents="lanes",
        rx_stamp="auto",
    )  # fmt: skip
    options = TransportOptions.of(settings, "http://h/v1", max_connections=2)
    for f in fields(ClientSettings):
        if f.name not in ("ws_subagents", "rx_stamp"):
            assert getattr(options, f.name) == getattr(settings, f.name), f.name
    # what the option leaves to the scenario or the machine is decided before a transport
    # reads it: the transport's defaults stand until then
    assert (options.ws_subagents, options.rx_stamp) == ("connection", "user")
    assert (options.base_url, options.max_connections, options.tokens) == (
        "http://h/v1", 2, FIXED_WIDTH
    )  # fmt: skip
    chosen = TransportOptions.of(settings, "http://h/v1", ws_subagents="lanes", rx_stamp="kernel")
    assert (chosen.ws_subagents, chosen.rx_stamp) == ("lanes", "kernel")
