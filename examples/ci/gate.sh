#!/bin/sh
# Measure the CI scenario and gate the run against the committed baseline (docs/ci.md).
#
# Exit code: the gate's (0 pass, 1 regression, 2 SLO breach, 3 invalid / not comparable,
# 4 usage error).  Exit 3 usually means the runner was too busy to measure (the run's own
# event loop woke late), so the measurement is repeated, up to GATE_ATTEMPTS times in all;
# every other verdict is final.  A run that fails outright counts as invalid (3).
#
# Environment: GATE_SCENARIO, GATE_BASELINE, GATE_RULES, GATE_OUT (reports), GATE_ATTEMPTS.
set -u
scenario="${GATE_SCENARIO:-examples/ci/scenario.yaml}"
baseline="${GATE_BASELINE:-results/baseline}"
rules="${GATE_RULES:-examples/ci/gates.yaml}"
out="${GATE_OUT:-gate-report}"
attempts="${GATE_ATTEMPTS:-3}"
mkdir -p "$out"
attempt=1
while :; do
    run_id="candidate-$attempt"
    rm -rf "results/$run_id"
    if loopbench run "$scenario" --out results --run-id "$run_id" --quiet; then
        loopbench gate "results/$run_id" --baseline "$baseline" --rules "$rules" \
            --junit "$out/gate.xml" --markdown "$out/gate.md"
        code=$?
    else
        echo "gate.sh: loopbench run failed; treating it as an invalid run" >&2
        code=3
    fi
    if [ "$code" -ne 3 ] || [ "$attempt" -ge "$attempts" ]; then
        break
    fi
    attempt=$((attempt + 1))
    echo "gate.sh: exit 3 (invalid or not comparable); measuring again ($attempt/$attempts)" >&2
done
exit "$code"
