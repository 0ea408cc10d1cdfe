"""The simulation's figures from the two logs: what the fake workers sent, what the master did.

Pure: the fake workers' send stamps and counts (one list per process, see
:class:`.fake_workers.Sent`), the timed master's document (:mod:`.master_locustfile`) and
the rows found in the results folder in; a figures dict and its table out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.peers.figures import percentile, spread
from harness.wire.exit_codes import ExitCode

#: observed: the master keeps up when a report is handled before the worker's next is due
KEEP_UP_LAG_P99_MS = 500.0
#: by its cost: the offered load needs at most this share of the one core its single
#: receiving greenlet can use
KEEP_UP_CPU_SHARE = 0.8


def _cpu_used(stamps: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """The master's CPU seconds and the wall seconds between the first and the last report
    handled (process CPU time read at each: ``(start ns, end ns, rows, cpu s)``)."""
    if len(stamps) < 2 or len(stamps[0]) < 4:
        return None
    first = min(stamps, key=lambda s: s[1])
    last = max(stamps, key=lambda s: s[1])
    wall_s = (last[1] - first[1]) / 1e9
    return (last[3] - first[3], wall_s) if wall_s > 0 else None


def _lags_ms(
    sent: Mapping[str, Sequence[int]], handled: Mapping[str, Sequence[Sequence[int]]]
) -> tuple[list[float], list[float]]:
    """Send -> handled and send -> handling started, message by message (zmq keeps each
    client's order, so the k-th message sent is the k-th handled)."""
    lag, wait = [], []
    for node, stamps in sent.items():
        for sent_ns, handled_at in zip(stamps, handled.get(node, ()), strict=False):
            lag.append((handled_at[1] - sent_ns) / 1e6)
            wait.append((handled_at[0] - sent_ns) / 1e6)
    return lag, wait


def _timed_ms(timed: Mapping[str, Sequence[int]], name: str) -> tuple[int, float]:
    calls, ns = timed.get(name, (0, 0))
    return int(calls), ns / 1e6


def figures(
    sent_logs: Sequence[Mapping[str, Any]],
    master: Mapping[str, Any],
    *,
    rows_on_disk: int,
    rollout_rows_on_disk: int,
    offered_turns_per_s: float,
) -> dict[str, Any]:
    by_node = {log["node"]: log for log in sent_logs}
    rows_handled = master["stamps"].get("loopbench_rows", {})
    finals_handled = master["stamps"].get("loopbench_final", {})
    handled_ns = master["handled_ns"]
    timed = master["timed_ns"]

    sent_rows = {n: log["rows_sent_ns"] for n, log in by_node.items()}
    lag, wait = _lags_ms(sent_rows, rows_handled)
    final_sent = {n: [log["final_sent_ns"]] for n, log in by_node.items() if log["final_sent_ns"]}
    final_lag, _ = _lags_ms(final_sent, finals_handled)

    rows_messages_sent = sum(len(v) for v in sent_rows.values())
    rows_messages_handled = sum(len(rows_handled.get(n, ())) for n in sent_rows)
    turn_rows_sent = sum(int(log["turn_rows"]) for log in sent_logs)
    rollout_rows_sent = sum(int(log["rollout_rows"]) for log in sent_logs)
    claims_sent = sum(int(log["claims"]) for log in sent_logs)

    starts = [s[0] for stamps in rows_handled.values() for s in stamps]
    ends = [s[1] for stamps in rows_handled.values() for s in stamps]
    window_s = (max(ends) - min(starts)) / 1e9 if starts else 0.0
    # The rows shipped over the time the fake agents made them: from the first rollout's
    # start to the last shipment, on the workers' clock.
    began = [int(log.get("load_started_ns") or 0) for log in sent_logs]
    shipped = [ns for log in sent_logs for ns in log["rows_sent_ns"]]
    made_s = (max(shipped) - min(b for b in began if b)) / 1e9 if shipped and any(began) else 0.0
    rows_ns = sum(s[1] - s[0] for stamps in rows_handled.values() for s in stamps)
    rows_in_messages = sum(s[2] for stamps in rows_handled.values() for s in stamps)

    plans = master.get("plans") or {}
    writer_calls, writer_ms = _timed_ms(timed, "ResultsWriter.add_turn")
    _, writer_roll_ms = _timed_ms(timed, "ResultsWriter.add_rollout")
    from_state_calls, from_state_ms = _timed_ms(timed, "Accumulator.from_state")
    merge_calls, merge_ms = _timed_ms(timed, "Accumulator.merge")
    _, finalize_ms = _timed_ms(timed, "MasterSide.finalize")
    claim_ms = [ns / 1e6 for ns in handled_ns.get("loopbench_claim", ())]
    used = _cpu_used([s for stamps in rows_handled.values() for s in stamps])
    cpu = used[0] / used[1] if used else None
    # Work is work: CPU seconds over the rows handled in between do not depend on how much
    # of a core the machine gave the master (its share does), so they give its ceiling.
    by_end = sorted((s for stamps in rows_handled.values() for s in stamps), key=lambda s: s[1])
    handled_in_window = sum(s[2] for s in by_end[1:])  # the rows after the first report's
    turn_share = turn_rows_sent / max(1, turn_rows_sent + rollout_rows_sent)
    us_per_turn_row = (
        used[0] * 1e6 / (handled_in_window * turn_share) if used and handled_in_window else None
    )
    loop_lag = [
        ns / 1e6
        for at, ns in master.get("loop_lag", ())
        if starts and min(starts) <= at <= max(ends)
    ]
    gc_load = [
        (gen, ns / 1e6)
        for at, gen, ns in master.get("gc", ())
        if starts and min(starts) <= at <= max(ends)
    ]
    full_gc = [ms for gen, ms in gc_load if gen == 2]

    out: dict[str, Any] = {
        "workers": len(by_node),
        "workers_seen_by_master": len(rows_handled),
        "agents": sum(int(log["agents"]) for log in sent_logs),
        "load_window_s": round(window_s, 2),
        "messages": {
            "rows_sent": rows_messages_sent,
            "rows_handled": rows_messages_handled,
            "finals_sent": len(final_sent),
            "finals_handled": sum(len(finals_handled.get(n, ())) for n in final_sent),
            "claims_sent": claims_sent,
            "claims_handled": len(claim_ms),
            "stats_handled": len(handled_ns.get("stats", ())),
            "heartbeats_handled": len(handled_ns.get("heartbeat", ())),
        },
        "rows": {
            "turn_rows_sent": turn_rows_sent,
            "turn_rows_on_disk": rows_on_disk,
            "rollout_rows_sent": rollout_rows_sent,
            "rollout_rows_on_disk": rollout_rows_on_disk,
            "turn_rows_per_s": round(turn_rows_sent / made_s, 1) if made_s > 0 else None,
            "rows_per_message": spread([s[2] for v in rows_handled.values() for s in v], 50, 99),
        },
        "master_cpu_share": None if cpu is None else round(cpu, 3),
        # everything the master did per turn row (its claims, rollout rows, Locust's own
        # messages, decoding included), in CPU µs; the ceiling of one master core from it;
        # and the share of a core the offered load needs at that cost
        "master_cpu_us_per_turn_row": None
        if us_per_turn_row is None
        else round(us_per_turn_row, 1),
        "master_ceiling_turn_rows_per_s": round(1e6 / us_per_turn_row) if us_per_turn_row else None,
        "offered_turn_rows_per_s": round(offered_turns_per_s, 1),
        "master_core_needed": round(offered_turns_per_s * us_per_turn_row / 1e6, 3)
        if us_per_turn_row
        else None,
        # each fake-worker process over its whole life: were the senders starved?
        "fake_process_cpu_share": sorted(
            {round(float(log.get("process_cpu_share", 0.0)), 3) for log in sent_logs}
        ),
        "report_lag_ms": spread(lag, 50, 99, 100),
        "report_wait_ms": spread(wait, 50, 99, 100),
        "rows_message_handling_ms": spread(
            [ns / 1e6 for ns in handled_ns.get("loopbench_rows", ())], 50, 99, 100
        ),
        "us_per_row_handled": round(rows_ns / rows_in_messages / 1e3, 2)
        if rows_in_messages
        else None,
        "claim_handling_ms": spread(claim_ms, 50, 99, 100),
        # the master's loop, woken every 10 ms: what holds it delays every report behind it
        "master_loop_lag_ms": spread(loop_lag, 50, 99, 100),
        # the collector's pauses during the load: a full one walks the whole plan
        "gc": {
            "collections": len(gc_load),
            "pause_ms_total": round(sum(ms for _, ms in gc_load), 1),
            "full_collections": len(full_gc),
            "full_pause_ms": spread(full_gc, 50, 100),
        },
        "writer": {
            "us_per_turn_row": round(writer_ms * 1e3 / writer_calls, 2) if writer_calls else None,
            "rollout_rows_ms": round(writer_roll_ms, 1),
            "rows_per_cpu_s": round(writer_calls / (writer_ms / 1e3)) if writer_ms else None,
        },
        "finals": {
            "lag_ms": spread(final_lag, 50, 100),
            "finalize_ms": round(finalize_ms, 1),
            "from_state_ms_per_worker": round(from_state_ms / from_state_calls, 2)
            if from_state_calls
            else None,
            "merge_ms_per_worker": round(merge_ms / merge_calls, 2) if merge_calls else None,
            "from_state_calls": from_state_calls,
            "merge_calls": merge_calls,
        },
        "plan": {
            "rollouts": plans.get("rollouts"),
            "seconds": round(float(plans.get("seconds", 0.0)), 2),
            "ms_per_rollout": round(plans["seconds"] * 1e3 / plans["rollouts"], 3)
            if plans.get("rollouts")
            else None,
        },
    }
    out["every_message_handled"] = (
        rows_messages_handled == rows_messages_sent
        and out["messages"]["finals_handled"] == len(final_sent) == len(by_node)
        and turn_rows_sent == rows_on_disk
        and rollout_rows_sent == rollout_rows_on_disk
    )
    p99 = percentile(lag, 99)
    # Observed: reports handled before the next is due, on the machine as it was.
    out["keeps_up"] = bool(
        out["every_message_handled"] and p99 is not None and p99 <= KEEP_UP_LAG_P99_MS
    )
    # By its cost: the offered load fits in a core of its own with room left.
    need = out["master_core_needed"]
    out["keeps_up_by_cost"] = bool(
        out["every_message_handled"] and need is not None and need <= KEEP_UP_CPU_SHARE
    )
    return out


def render(fig: Mapping[str, Any]) -> str:
    """The table a person reads (the JSON has every figure)."""
    m, r = fig["messages"], fig["rows"]
    lag, handling = fig["report_lag_ms"], fig["rows_message_handling_ms"]
    fin, plan, wr = fig["finals"], fig["plan"], fig["writer"]
    cpu = fig["master_cpu_share"]
    lines = [
        f"| workers × agents | {fig['workers']} × {fig['agents'] // max(1, fig['workers'])} |",
        f"| turn rows/s into the master | {r['turn_rows_per_s']} |",
        f"| master CPU got (share of one core) | {'–' if cpu is None else f'{cpu * 100:.0f} %'} |",
        f"| master CPU µs per turn row, all in | {fig['master_cpu_us_per_turn_row']} |",
        f"| one master core's ceiling, turn rows/s | {fig['master_ceiling_turn_rows_per_s']} |",
        f"| core the offered {fig['offered_turn_rows_per_s']:g} turns/s need | "
        f"{fig['master_core_needed']} |",
        f"| report lag send→handled p50 / p99 / max ms | {lag['p50']} / {lag['p99']} / "
        f"{lag['p100']} |",
        f"| rows message handling p50 / p99 / max ms | {handling['p50']} / {handling['p99']} / "
        f"{handling['p100']} |",
        f"| master loop lag p50 / p99 / max ms | {fig['master_loop_lag_ms']['p50']} / "
        f"{fig['master_loop_lag_ms']['p99']} / {fig['master_loop_lag_ms']['p100']} |",
        f"| full garbage collections during the load: count, longest pause ms | "
        f"{fig['gc']['full_collections']}, {fig['gc']['full_pause_ms']['p100']} |",
        f"| master µs per row handled (decode, write, statistics) | {fig['us_per_row_handled']} |",
        f"| results writer µs per turn row | {wr['us_per_turn_row']} |",
        f"| claim handling p50 / p99 ms | {fig['claim_handling_ms']['p50']} / "
        f"{fig['claim_handling_ms']['p99']} ({m['claims_handled']} claims) |",
        f"| final: merge + from_state ms per worker | {fin['merge_ms_per_worker']} + "
        f"{fin['from_state_ms_per_worker']} |",
        f"| final: whole finalize ms | {fin['finalize_ms']} |",
        f"| plan generation ms per rollout | {plan['ms_per_rollout']} ({plan['rollouts']} "
        f"rollouts, {plan['seconds']} s) |",
        f"| messages sent / handled (rows, finals, claims) | {m['rows_sent']}/{m['rows_handled']}, "
        f"{m['finals_sent']}/{m['finals_handled']}, {m['claims_sent']}/{m['claims_handled']} |",
        f"| turn rows sent / on disk | {r['turn_rows_sent']} / {r['turn_rows_on_disk']} |",
        f"| keeps up by its cost (needs ≤ {KEEP_UP_CPU_SHARE:g} core) | "
        f"{'yes' if fig['keeps_up_by_cost'] else 'no'} |",
        f"| kept up here (lag p99 ≤ {KEEP_UP_LAG_P99_MS:g} ms) | "
        f"{'yes' if fig['keeps_up'] else 'no'}"
        f"{'; ' + fig['not_judged'] if fig.get('not_judged') else ''} |",
    ]
    return "\n".join(["| figure | value |", "|---|---:|", *lines])


def verdict(fig: Mapping[str, Any], *, check: bool) -> tuple[int, str]:
    """The exit code and the line that says why.

    A message, final or row that did not reach the master and the folder: 3, the run says
    nothing.  With ``check``, whether the master kept up is judged on a quiet machine only:
    2 when it fell behind there, 3 ("not judged") when others kept the machine busy.
    """
    m, r = fig["messages"], fig["rows"]
    if not fig["every_message_handled"]:
        return int(ExitCode.INVALID), (
            f"the master did not account for every message: reports {m['rows_handled']}/"
            f"{m['rows_sent']}, finals {m['finals_handled']}/{m['finals_sent']}, turn rows on "
            f"disk {r['turn_rows_on_disk']}/{r['turn_rows_sent']}"
        )
    lag = fig["report_lag_ms"]["p99"]
    if not check:
        return int(ExitCode.OK), ""
    if fig.get("not_judged"):
        return int(ExitCode.INVALID), f"keeps up: {fig['not_judged']}"
    if not fig["keeps_up"]:
        return int(ExitCode.SLO_BREACH), (
            f"the master fell behind: report lag p99 {lag} ms > {KEEP_UP_LAG_P99_MS:g} ms"
        )
    return int(ExitCode.OK), f"the master kept up: report lag p99 {lag} ms"
