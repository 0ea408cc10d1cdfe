"""``loopbench record``: a recording proxy between an agent and its endpoint (docs/traces.md).

``observe`` is pure (bytes and timestamps in, exchange summaries and a trace out);
``proxy`` is the asyncio edge that relays the bytes and stamps them.
"""
