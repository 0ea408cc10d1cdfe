"""``make bench-peers``: loopbench next to guidellm and aiperf against one reference server.

Every tool runs the same single-turn Chat Completions workload; each request the tool
reports is matched to the TTFT the server modelled for it (the server's ``--timing-log``),
so the tools are compared on their measurement error, not on their own TTFT figures.
docs/peers.md explains the workload, the matching and the offline setup.
"""
