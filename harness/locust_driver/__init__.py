"""Scale-out through Locust's master/worker mode (docs/architecture.md: the gevent world).

Only ever imported by a ``locust`` process: :mod:`.locustfile` imports locust,
which monkey-patches the whole process with gevent.  The client modules are
blocking, sans-asyncio code (plain sockets under :mod:`harness.client`'s HTTP/1.1
parser and websockets' sans-I/O protocol) that gevent makes cooperative once the
process is patched; they import neither locust nor gevent, so they also run,
unpatched, in ordinary tests.  See
``docs/distributed.md``.
"""
