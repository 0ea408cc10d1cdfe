"""The rollout record of a rollout the driver itself failed to run (the Locust user and the
edge host both report one, so that a bug in the driver cannot stall a phase)."""

from __future__ import annotations

from harness.workload.records import RolloutRecord


def test_a_driver_failure_is_an_error_record_that_names_the_exception() -> None:
    rec = RolloutRecord.driver_failed("ws", 7, 2, 1_000, 5_000, KeyError("x"))
    assert (rec.transport, rec.rollout_id, rec.round) == ("ws", 7, 2)
    assert rec.status == "error" and rec.error_kind == "driver:KeyError"
    # started when it was meant to: no schedule lag is invented for a rollout that never ran
    assert rec.intended_start_ns == rec.start_ns == 1_000 and rec.end_ns == 5_000
    assert rec.schedule_lag_ns == 0
