"""``loopbench gate``: the command line of the regression gate (docs/ci.md).

Exit codes are the gate's contract with CI and never collide: 0 pass,
1 regression, 2 SLO breach, 3 invalid run / not comparable, 4 usage error.
Argument errors and an unwritable report file exit 4 (``harness.cli.main``); an error
measuring or reading the runs is mapped here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli.common import (
    SCENARIO_HELP,
    add_command,
    api_key,
    epilog,
    examples,
    parse_pairs,
    progress_printer,
    transports_epilog,
)
from harness.cli.run_args import add_target_options, scenario_sets, target_flags
from harness.client.options import ClientSettings
from harness.gate.ab import ABOptions, Side, run_ab
from harness.gate.evaluate import evaluate
from harness.gate.junit import render_junit
from harness.gate.markdown import render_markdown
from harness.gate.rules import GateConfig, load_rules
from harness.gate.samples import run_data
from harness.report.results import load_run
from harness.run.target import resolve_target
from harness.wire.errors import (
    LoopbenchError,
    NotAResultsFolder,
    ResultsError,
    ScenarioError,
    UsageError,
)
from harness.wire.exit_codes import ExitCode
from harness.wire.transports import parse_transports
from harness.workload.scenario import load_scenario

if TYPE_CHECKING:
    from harness.gate.outcome import GateReport

_STATUS = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}


def _allowances(cfg: GateConfig) -> str:
    """``rollout_ms.p50 +20 %, …``: the default rules' allowances as ``--help`` states them
    (read from the rules themselves, so the text cannot drift from what the gate applies)."""
    return ", ".join(f"{r.metric}.{r.statistic} +{r.max_increase_pct:g} %%" for r in cfg.regression)


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = add_command(
        sub,
        "gate",
        description="Judge RUN against a BASELINE run with rules (absolute SLOs, significant "
        "relative regressions, minimum speedups, harness self-check), or with --ab measure two "
        "targets in interleaved rounds of one job and judge the candidate against the baseline. "
        "Exit codes: 0 pass, 1 regression, 2 SLO breach, 3 invalid run or not comparable, "
        "4 usage error. See docs/ci.md.",
        epilog=epilog(
            examples(
                "loopbench run examples/ci/scenario.yaml --run-id cand",
                "loopbench gate results/cand --baseline results/baseline",
                "loopbench gate results/cand --baseline results/baseline "
                "--rules examples/ci/gates.yaml --junit gate.xml --markdown gate.md",
                "loopbench gate --ab examples/ci/scenario.yaml --rules examples/ci/gates-ab.yaml",
            ),
            transports_epilog(),
        ),
        allow_abbrev=False,
    )
    p.add_argument(
        "subject",
        metavar="RUN|SCENARIO",
        help=f"results folder to judge, or with --ab the {SCENARIO_HELP}",
    )
    p.add_argument("--baseline", metavar="BASELINE", help="results folder of the baseline run")
    p.add_argument(
        "--rules",
        metavar="FILE",
        help="rules YAML (default: may not regress by more than "
        f"{_allowances(load_rules(None))} between separate runs; "
        f"{_allowances(load_rules(None, ab=True))} in --ab mode)",
    )
    p.add_argument(
        "--junit", metavar="FILE", help="write a JUnit XML report (one testcase per rule)"
    )
    p.add_argument("--markdown", metavar="FILE", help="write a Markdown summary (CI job summary)")
    ab = p.add_argument_group("A/B mode (two targets, interleaved rounds, one job)")
    ab.add_argument(
        "--ab", action="store_true", help="measure baseline and candidate now, then judge"
    )
    for side in ("baseline", "candidate"):
        ab.add_argument(
            f"--{side}-target",
            metavar="URL",
            help=f"{side} endpoint (default: an embedded reference server)",
        )
        ab.add_argument(
            f"--{side}-api-profile", metavar="NAME", help=f"embedded {side} server: API profile"
        )
        ab.add_argument(
            f"--{side}-engine-profile",
            metavar="NAME",
            help=f"embedded {side} server: engine profile",
        )
        ab.add_argument(
            f"--{side}-server-set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"embedded {side} server: profile override, e.g. api.fixed_ms=15",
        )
    ab.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="interleaved rounds (default: scenario's load.rounds, else up to 6)",
    )
    ab.add_argument("--transports", help="comma-separated transports (default: the scenario's)")
    ab.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario field"
    )
    ab.add_argument(
        "--out", default="results", help="results root for the two runs (default: results/)"
    )
    ab.add_argument(
        "--run-id", help="prefix of the two run folders (<id>-baseline, <id>-candidate)"
    )
    ab.add_argument(
        "--api-key-env", help="environment variable holding the API key for the targets"
    )
    ab.add_argument(
        "--insecure",
        action="store_true",
        help="do not verify the targets' TLS certificates (self-signed https:// and wss://)",
    )
    add_target_options(ab)
    ab.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_gate)


_AB_ONLY = (
    "baseline_target",
    "candidate_target",
    "baseline_api_profile",
    "candidate_api_profile",
    "baseline_engine_profile",
    "candidate_engine_profile",
    "rounds",
    "transports",
    "run_id",
    "api_key_env",
)


def _check_usage(args: argparse.Namespace) -> None:
    if args.ab:
        if args.baseline:
            raise UsageError(
                "--baseline names a results folder; in --ab mode use --baseline-target (or nothing, for an embedded server)"
            )
        if args.rounds is not None and args.rounds < 1:
            raise UsageError(f"--rounds: expected a positive integer, got {args.rounds}")
        return
    if not args.baseline:
        raise UsageError("--baseline: required (a results folder), unless --ab is given")
    used = [n for n in _AB_ONLY if getattr(args, n) is not None]
    used += [n for n in ("baseline_server_set", "candidate_server_set", "set") if getattr(args, n)]
    used += [n for n in _SHAPING_FLAGS if getattr(args, n)]
    if used:
        raise UsageError(f"--{used[0].replace('_', '-')}: only with --ab")


#: the request-shaping flags (harness/cli/run_args.py), measured with --ab only
_SHAPING_FLAGS = ("header", "session_header", "extra_body", "model", "tokenizer")


def _measure_ab(args: argparse.Namespace) -> tuple[Path, Path]:
    scenario = load_scenario(
        args.subject, parse_pairs(scenario_sets(args), "--set", "api.fixed_ms=15") or None
    )
    shaping, tokens = resolve_target(scenario, target_flags(args))
    transports = parse_transports(args.transports)
    key = api_key(args.api_key_env)
    sides = [
        Side(
            target=getattr(args, f"{side}_target"),
            api_profile=getattr(args, f"{side}_api_profile"),
            engine_profile=getattr(args, f"{side}_engine_profile"),
            server_set=parse_pairs(
                getattr(args, f"{side}_server_set"), f"--{side}-server-set", "api.fixed_ms=15"
            ),
        )
        for side in ("baseline", "candidate")
    ]
    for name, side in zip(("baseline", "candidate"), sides, strict=True):
        if side.target:
            if side.api_profile or side.engine_profile or side.server_set:
                raise UsageError(
                    f"--{name}-target: the {name}'s profiles and --{name}-server-set configure "
                    "an embedded server; give either a target or those"
                )
            continue
        try:
            # Checked here so a typo exits 4 at once instead of as a server that never starts.
            side.server(scenario).check()
        except LoopbenchError as exc:
            raise UsageError(f"{name} server: {exc}") from exc
    opts = ABOptions(
        results_root=Path(args.out),
        run_id=args.run_id,
        rounds=args.rounds,
        transports=transports,
        client=ClientSettings(api_key=key, verify_tls=not args.insecure, shaping=shaping),
        tokens=tokens,
    )
    printer = progress_printer(args.quiet)
    result = run_ab(scenario, str(args.subject), sides[0], sides[1], opts, printer=printer)
    print(
        f"A/B: {result.rounds} interleaved rounds; baseline {result.baseline.run_dir}, "
        f"candidate {result.candidate.run_dir}",
        file=sys.stderr,
    )
    # Nothing to judge: the partial runs are on disk; main() exits 130 for this.
    result.candidate.stop_if_interrupted()
    return result.candidate.run_dir, result.baseline.run_dir


def print_report(report: GateReport) -> None:
    for r in report.results:
        print(f"{_STATUS[r.status]:<5} {r.kind:<10} {r.name}")
        if r.status != "pass" or r.kind != "validity":
            print(f"      {r.message}")
    counts = f"{report.count('pass')} passed, {report.count('fail')} failed, {report.count('skip')} skipped"
    print(f"gate: {report.verdict.upper()} (exit {report.exit_code}); {counts}")


def _write(path: str, text: str) -> None:
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc}") from exc


def judge(
    candidate: str | Path,
    baseline: str | Path | None,
    rules_path: str | None,
    *,
    ab: bool = False,
) -> GateReport:
    """Load the rules and both runs and evaluate; raises the gate's errors (see :func:`cmd_gate`)."""
    cfg = load_rules(rules_path, ab=ab)
    cand = run_data(load_run(candidate))
    base = run_data(load_run(baseline)) if baseline is not None else None
    return evaluate(cfg, cand, base)


def cmd_gate(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        _check_usage(args)
        if args.rules:
            load_rules(args.rules)  # a broken rules file must fail before minutes of A/B measuring
        if args.ab:
            candidate, baseline = _measure_ab(args)
        else:
            candidate, baseline = Path(args.subject), Path(args.baseline)
        report = judge(candidate, baseline, args.rules, ab=args.ab)
    except (UsageError, ScenarioError, NotAResultsFolder) as exc:
        # NotAResultsFolder: a mistyped path, which re-measuring (3) would not help.
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except ResultsError as exc:
        print(f"error: invalid run: {exc}", file=sys.stderr)
        return ExitCode.INVALID
    except LoopbenchError as exc:
        # A/B measurement failures (server did not start, target unreachable): nothing to judge.
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.INVALID
    if args.junit:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        _write(
            args.junit, render_junit(report, timestamp=stamp, elapsed_s=time.monotonic() - started)
        )
    if args.markdown:
        _write(args.markdown, render_markdown(report))
    print_report(report)
    return report.exit_code
