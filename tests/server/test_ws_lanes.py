"""Pure connection state: stream_id validation, the byte-bounded lane cache, the token bucket."""

from __future__ import annotations

import pytest

from reference_server.core.conversation import Conversation
from reference_server.core.lanes import CachedResponse, LaneCache, valid_stream_id
from reference_server.core.limits import TokenBucket, retry_after_headers


def _entry(rid: str, tokens: int) -> CachedResponse:
    conv = Conversation.build(None, [{"role": "user", "content": "x" * (4 * tokens - 16)}])
    return CachedResponse(rid, conv, None, [], 0, stored=False)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("lane-a", True),
        ("A.b_c-9", True),
        ("x" * 256, True),
        ("x" * 257, False),
        ("", False),
        ("has space", False),
        ("slash/no", False),
        (7, False),
        (None, False),
    ],
)
def test_stream_id_validation(value: object, ok: bool) -> None:
    assert valid_stream_id(value) is ok


def test_lane_cache_keeps_latest_per_lane_and_finds_forks() -> None:
    cache = LaneCache(max_bytes=10_000)
    cache.put(None, _entry("resp_1", 10))
    cache.put("a", _entry("resp_2", 10))
    cache.put(None, _entry("resp_3", 10))  # replaces resp_1 on the default lane
    assert cache.lane(None) is not None and cache.lane(None).response_id == "resp_3"  # type: ignore[union-attr]
    assert cache.find("resp_1") is None
    found = cache.find("resp_2")
    assert found is not None and found[0] == "a"
    assert cache.total_bytes == 2 * 10 * 4


def test_lane_cache_evicts_least_recently_used_lane_past_the_byte_bound() -> None:
    cache = LaneCache(max_bytes=100 * 4)
    cache.put("a", _entry("ra", 40))
    cache.put("b", _entry("rb", 40))
    cache.touch("a")  # "b" is now the least recently used
    evicted = cache.put("c", _entry("rc", 40))
    assert evicted == ["b"]
    assert cache.find("rb") is None and cache.find("ra") is not None
    assert cache.total_bytes <= cache.max_bytes
    # An entry larger than the whole bound is not kept at all.
    assert cache.put("d", _entry("rd", 200)) == ["a", "c", "d"]  # "b" was the first of four
    assert cache.find("rd") is None and len(cache) == 0


def test_evict_response_drops_only_that_response() -> None:
    cache = LaneCache(max_bytes=10_000)
    cache.put("a", _entry("ra", 5))
    cache.put("b", _entry("rb", 5))
    assert cache.evict_response("ra") is True
    assert cache.evict_response("ra") is False
    assert cache.find("rb") is not None and cache.total_bytes == 20


def test_token_bucket_admits_burst_then_asks_to_wait() -> None:
    bucket = TokenBucket(rate=2.0, burst=3)
    assert [bucket.take(10.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = bucket.take(10.0)
    assert wait == pytest.approx(0.5)
    assert bucket.take(10.5) == 0.0  # one token refilled after 0.5 s
    assert bucket.take(10.5) == pytest.approx(0.5)


def test_token_bucket_rejects_non_positive_rate() -> None:
    with pytest.raises(ValueError, match="rate: expected a positive number"):
        TokenBucket(0)


def test_retry_after_headers_round_up() -> None:
    assert retry_after_headers(0.2) == {"retry-after": "1", "retry-after-ms": "200"}
    assert retry_after_headers(2.5) == {"retry-after": "3", "retry-after-ms": "2500"}
