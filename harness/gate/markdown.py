"""A Markdown summary of a gate report, for a CI job summary (``$GITHUB_STEP_SUMMARY``) or an MR note."""

from __future__ import annotations

from harness.gate.outcome import GateReport, RuleResult

_ICON = {"pass": "✅", "fail": "❌", "skip": "⏭️"}


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "x":
        return f"{value:.3f}x"
    return f"{value:,.2f} {unit}".strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _change(r: RuleResult) -> str:
    if r.kind != "regression" or r.ratio is None:
        return ""
    text = f"{(r.ratio - 1) * 100:+.1f}%"
    if r.ci is not None:
        text += f" [{(r.ci[0] - 1) * 100:+.1f}%, {(r.ci[1] - 1) * 100:+.1f}%]"
    return text


def _evidence(r: RuleResult) -> str:
    parts = []
    if r.kind == "speedup" and r.ci is not None:
        parts.append(f"CI [{r.ci[0]:.3f}, {r.ci[1]:.3f}]")
    if r.p_value is not None:
        parts.append(f"p = {r.p_value:.3g}")
    if r.n is not None:
        parts.append(f"n = {r.n[0]}/{r.n[1]}")
    return ", ".join(parts)


def render_markdown(report: GateReport) -> str:
    code = report.exit_code
    head = "✅ pass" if code == 0 else f"❌ {report.verdict}"
    lines = [
        f"## loopbench gate: {head} (exit {code})",
        "",
        f"candidate `{report.candidate_id}`"
        + (f" vs baseline `{report.baseline_id}`" if report.baseline_id else "")
        + f" · scenario `{report.scenario}` seed {report.seed} · rules `{report.rules_source}` "
        f"· α = {report.alpha:g}",
        "",
        f"{report.count('pass')} passed, {report.count('fail')} failed, "
        f"{report.count('skip')} skipped.",
        "",
        "| | kind | rule | baseline | candidate | change (CI) | evidence | limit |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for r in report.results:
        lines.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    _ICON[r.status],
                    r.kind.replace("_", "-"),
                    r.name,
                    _num(r.baseline, r.unit),
                    _num(r.candidate, r.unit),
                    _change(r),
                    _evidence(r),
                    r.limit,
                )
            )
            + " |"
        )
    failed = [r for r in report.results if r.failed]
    if failed:
        lines += ["", "### Failures", ""]
        lines += [f"- **{_cell(r.name)}**: {_cell(r.message)}" for r in failed]
    lines += [
        "",
        "<sub>A relative rule fails only when the change is both statistically significant and "
        "larger than its allowance. Exit codes: 0 pass, 1 regression, 2 SLO breach, "
        "3 invalid or not comparable, 4 usage error.</sub>",
        "",
    ]
    return "\n".join(lines)
