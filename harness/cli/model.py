"""``loopbench reproduce`` and ``loopbench calibrate``: the simulation model's two commands.

Thin: parse, call :mod:`harness.model.reproduce` / :mod:`harness.model.calibrate`, print.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.common import add_command, epilog, examples, progress_printer, transports_epilog
from harness.model.calibrate import (
    FITTED_API,
    FITTED_ENGINE,
    HTTP_LIKE,
    WS_LIKE,
    describe,
    fit,
    folded,
    profile_yaml,
    profiles_from_fit,
    turns_from_rows,
    unidentified,
)
from harness.model.reproduce import PARTS, REPRODUCE_DIR, all_passed, format_table, run_reproduction
from harness.report.results import load_run
from harness.wire.errors import LoopbenchError
from harness.wire.exit_codes import ExitCode
from harness.wire.transports import TRANSPORTS
from reference_server.core.profiles import load_profiles


def add_parser(sub: Any) -> None:
    rep = add_command(
        sub,
        "reproduce",
        description="Run the built-in reproduce/*.yaml scenarios (`loopbench scenarios`) through real sockets against embedded reference "
        "servers and print each published figure, its band, the measured value and pass/fail. "
        "Exit 1 (a regression against the published figures) unless every row passes.",
        epilog=examples(
            "loopbench reproduce",
            "loopbench reproduce --parts codex-cerebras --set codex-cerebras:rollout.count=4",
        ),
    )
    rep.add_argument(
        "--out", default="results/reproduction", help="results root (default: results/reproduction)"
    )
    rep.add_argument(
        "--scenarios", help="folder of the part scenarios (default: the built-in reproduce set)"
    )
    rep.add_argument("--parts", help="comma-separated subset of parts to run (default: all)")
    rep.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="[PART:]KEY=VALUE",
        help="scenario override for one part (or all), e.g. codex-cerebras:rollout.count=4",
    )
    rep.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    rep.set_defaults(func=cmd_reproduce)

    cal = add_command(
        sub,
        "calibrate",
        description="Fit the simulation model (TTFT vs processed and uncached tokens, decode and "
        "burst rates, post-inference work) to the turns of RUN_DIR, measured against any "
        "endpoint, and write api-NAME.yaml and engine-NAME.yaml for the reference server.",
        epilog=epilog(
            examples(
                "loopbench calibrate results/20261202-110203-quickstart --name mine",
                "loopbench serve --api-profile api-mine.yaml --engine-profile engine-mine.yaml",
            ),
            transports_epilog(
                (t for t in TRANSPORTS if t.name in HTTP_LIKE or t.name in WS_LIKE),
                "transports a fit uses",
            ),
        ),
    )
    cal.add_argument(
        "run_dir",
        nargs="+",
        help="a results folder (best: http and ws over varied tool outputs); several runs "
        "of one scenario at different concurrencies also fit the batching interference",
    )
    cal.add_argument("--name", default="fitted", help="profile name (default: fitted)")
    cal.add_argument("--out", default=".", help="folder for the two YAML files (default: .)")
    cal.add_argument("--transports", help="fit only these transports (comma-separated)")
    cal.add_argument(
        "--base-ttft-ms",
        type=float,
        help="the engine's share of the fixed TTFT, if known (default: all of the cheapest path's)",
    )
    cal.add_argument(
        "--base-api", default="optimized", help="API profile supplying unfitted parameters"
    )
    cal.add_argument(
        "--base-engine",
        default="cerebras-spark",
        help="engine profile supplying unfitted parameters (capacity, cache size)",
    )
    cal.set_defaults(func=cmd_calibrate)


def cmd_reproduce(args: argparse.Namespace) -> int:
    out = Path(args.out)
    parts = [p.strip() for p in args.parts.split(",")] if args.parts else list(PARTS)
    for part in parts:
        if part not in PARTS:
            raise LoopbenchError(
                f"--parts: unknown part {part!r}; expected one or more of {', '.join(PARTS)}"
            )
        for existing in (out / part, out / f"{part}-http"):
            if existing.exists():
                raise LoopbenchError(
                    f"--out {out}: {existing} already exists; remove it or choose another --out"
                )
    overrides: dict[str, dict[str, str]] = {}
    for item in args.set:
        target, colon, rest = item.partition(":")
        if not colon:
            target, rest = "*", item
        key, eq, value = rest.partition("=")
        if not eq or not key:
            raise LoopbenchError(
                f"--set {item!r}: expected [PART:]KEY=VALUE, e.g. codex-cerebras:rollout.count=4"
            )
        overrides.setdefault(target.strip(), {})[key.strip()] = value.strip()
    result = run_reproduction(
        out,
        scenario_dir=Path(args.scenarios) if args.scenarios else REPRODUCE_DIR,
        overrides=overrides,
        parts=parts,
        printer=progress_printer(args.quiet),
    )
    print(format_table(result.rows))
    verdict = "all rows pass" if all_passed(result.rows) else "NOT all rows pass"
    print(f"\n{verdict}; {result.wall_s:.0f} s; results: {out}")
    return ExitCode.OK if all_passed(result.rows) else ExitCode.REGRESSION


def cmd_calibrate(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    for n, folder in enumerate(args.run_dir):
        # each run's requests overlap only each other: the interference is counted per run
        rows += [{**r, "run": n} for r in load_run(folder).turns.to_dict("records")]
    if args.transports:
        keep = {t.strip() for t in args.transports.split(",")}
        rows = [r for r in rows if r["transport"] in keep]
    f = fit(turns_from_rows(rows))
    print(describe(f))
    base_api, base_engine = load_profiles(args.base_api, args.base_engine)
    api_doc, engine_doc = profiles_from_fit(
        f,
        base_api.model_dump(),
        base_engine.model_dump(),
        args.name,
        base_ttft_ms=args.base_ttft_ms,
    )
    # Validate before writing: a fitted profile the server would refuse is no use.
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    api_path = out / f"api-{args.name}.yaml"
    engine_path = out / f"engine-{args.name}.yaml"
    header = f"# Fitted by `loopbench calibrate {' '.join(args.run_dir)}`; see docs/model.md §10."
    api_missing, engine_missing = unidentified(f)
    for missing, base in ((api_missing, args.base_api), (engine_missing, args.base_engine)):
        if missing:
            print(f"unidentified, copied from the base profile {base!r}: {', '.join(missing)}")
    if folded(f):
        print(f"not separable, left in the intercept or the per-token work: {', '.join(folded(f))}")
    api_path.write_text(
        profile_yaml(api_doc, FITTED_API, api_missing, args.base_api, header), encoding="utf-8"
    )
    engine_path.write_text(
        profile_yaml(
            engine_doc, FITTED_ENGINE, engine_missing, args.base_engine, header, folded(f)
        ),
        encoding="utf-8",
    )
    load_profiles(str(api_path), str(engine_path))
    print(f"wrote {api_path} and {engine_path}")
    print(f"replay: loopbench serve --api-profile {api_path} --engine-profile {engine_path}")
    return ExitCode.OK
