"""The collector's quieting while a pass measures lives in harness/wire/quiet_gc.py, where the
reference server uses it too; this name stays for the modules that still import it here
(harness/record/proxy.py, tests/harness/test_quiet_gc.py)."""

from harness.wire.quiet_gc import (
    FREEZE_EVERY_S,
    GEN0_THRESHOLD,
    VALVE_THRESHOLD,
    begin,
    end,
    refreeze,
)

__all__ = ["FREEZE_EVERY_S", "GEN0_THRESHOLD", "VALVE_THRESHOLD", "begin", "end", "refreeze"]
