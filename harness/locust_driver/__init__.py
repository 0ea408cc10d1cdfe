"""Scale-out through Locust's master/worker mode (docs/distributed.md).

Only ever imported by a ``locust`` process: :mod:`.locustfile` imports locust,
which monkey-patches the whole process with gevent.  Locust keeps what it is good
at (users, spawning, distribution across machines, the web UI, stats); each
worker's rollouts run on the asyncio edge ``loopbench run`` uses, in a child
process of its own (:mod:`harness.run.edge_host`, driven by :mod:`.edge`), so a
worker measures as precisely as ``run`` and this package holds no client edge.
"""
