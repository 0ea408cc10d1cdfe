"""Run seeded rollouts through the gevent edge in a gevent-patched process (a helper of
test_parity.py; the pytest process itself is never monkey-patched).

``python tests/transports/gevent_edge.py`` reads ``{"url", "transports", "plans",
"request_timeout_s"}`` as JSON on stdin, runs every plan over each transport in
order, one rollout at a time, as one Locust user would, and prints the turn
records as JSON on stdout.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import sys  # noqa: E402
from dataclasses import asdict  # noqa: E402

import gevent  # noqa: E402
from gevent_replay import replay  # noqa: E402  (this script's folder is on sys.path)

from harness.client.options import TransportOptions  # noqa: E402
from harness.locust_driver.wire import plan_from_wire  # noqa: E402
from harness.workload.records import TurnRecord  # noqa: E402


def main() -> None:
    job = json.load(sys.stdin)
    options = TransportOptions(job["url"], request_timeout_s=job["request_timeout_s"])
    plans = [plan_from_wire(p) for p in job["plans"]]
    turns: list[TurnRecord] = []
    for name in job["transports"]:
        list(replay(name, options, plans, turns.append, gevent.sleep))
    json.dump([asdict(t) for t in turns], sys.stdout)


if __name__ == "__main__":
    main()
