"""``make bench-master``: does one Locust master keep up with the reports of many workers?

A real loopbench master (the locustfile's master side, timed) and fake workers that speak
Locust's worker protocol over its zmq transport and send loopbench's messages, real-sized,
at the real interval; docs/distributed.md, "One master, many workers".
"""
