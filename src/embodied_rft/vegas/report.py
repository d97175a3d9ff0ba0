"""The Best-of-N report (``reports/bon.md``) and its plot (success by selector), from the ``bon`` metrics record.

Input: the record :func:`~.bon.summarize_bon` builds. Outputs: markdown headed **symbolic-simulator proxy, not
EmbodiedBench numbers** — success per selector overall and on the long-horizon subset, each against greedy on the
same episodes (exact McNemar), the cost per planner call, candidate coverage of the greedy run's states and the
verifiers' AUROC on the policy's own live candidates, pooled and within one planner call (where Best-of-N acts) — and an SVG of success by selector (``plots.grouped_bars``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.atomic import write_text_atomic
from ..plots import grouped_bars

NAMES = {
    "greedy": "greedy (EB)",
    "sample": "one sample at T",
    "sc": "self-consistency (majority first action)",
    "bon_zs": "BoN, zero-shot verifier (SFT policy)",
    "bon_zs_smollm2": "BoN, zero-shot verifier (SmolLM2-135M-Instruct)",
    "bon_ft": "BoN, trained verifier",
    "bon_oracle": "BoN, oracle labels (ceiling)",
}


def _c(v: Any, fmt: str = "{:.1f}") -> str:
    return "–" if v is None else fmt.format(v)


def _pair(p: Mapping | None) -> str:
    if not p:
        return "–"
    return f"{p['gap']:+.1f} ({p['only_a']} vs {p['only_b']}, p = {p['p_mcnemar']:.3g})"


def render_markdown(m: Mapping[str, Any]) -> str:
    cfg = m.get("config", {})
    prob = cfg.get("score") == "prob"
    scored = (
        "each distinct first action scored by the verifier's P(yes)"
        if prob
        else f"M = {cfg.get('m')} verifications per distinct first action"
    ) + (
        ", selecting on replanning calls only (each episode's first call greedy)"
        if cfg.get("trigger") == "replan"
        else ""
    )
    lines = [
        f"# Best-of-N action selection ({m['label']})",
        "",
        f"**Success rate (%) in the symbolic EB-ALFRED simulator — a {m['label']}.** {m['episodes']} held-out "
        f"episodes ({', '.join(f'{k}: {v}' for k, v in m['per_split'].items())}), EB's rules; policy "
        f"`{cfg.get('policy')}`, N = {cfg.get('n')} candidates at T = {cfg.get('temperature')}, {scored}, "
        f"unit `{cfg.get('unit')}`. Gaps are against greedy on the same "
        "episodes: points (episodes solved only by greedy vs only by the selector, exact McNemar p).",
        "",
        "| selector | episodes | success | vs greedy | long-horizon | vs greedy (long) | model calls / planner call | "
        "verifications / call | policy tokens / call | verification prompt tokens / call | wall s / call |",
        "|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for sel, s in m["selectors"].items():
        lines.append(
            f"| {NAMES.get(sel, sel)} | {s['episodes']} | {_c(s['success'])} | "
            f"{_pair(m['paired_vs_greedy'].get(sel))} | {_c(s['long_horizon'])} | "
            f"{_pair(m['paired_vs_greedy_long_horizon'].get(sel))} | {s['model_calls_per_call']:.2f} | "
            f"{s['verifications_per_call']:.2f} | {s.get('policy_tokens_per_call', 0):.0f} | "
            f"{s.get('verifier_prompt_tokens_per_call', 0):.0f} | {s['wall_s_per_call']:.3f} |"
        )
    cov = m.get("coverage") or {}
    if cov:
        at = ", ".join(f"@{k}: {100 * v:.1f}%" for k, v in cov["coverage_at"].items())
        lines += [
            "",
            "## Headroom: candidate coverage on the greedy run's own states",
            "",
            f"Over {cov['planner_calls']} planner calls, greedy's first action is oracle-correct in "
            f"{100 * cov['greedy_correct_rate']:.1f}%; N samples at T hold an oracle-correct first action in "
            f"{at} of them ({cov['distinct_first_actions']:.2f} distinct first actions per call). "
            + (
                f"Coverage@4 − greedy = {100 * cov['headroom_at_4']:+.1f} points (the issue asks for ≥ +10)."
                if cov.get("headroom_at_4") is not None
                else ""
            ),
        ]
    if m.get("live_auroc"):
        lines += [
            "",
            "## Verifiers on the policy's own candidates (oracle-labelled, held-out states)",
            "",
            "| verifier | candidates | oracle-correct | AUROC of P(yes) | balanced accuracy (greedy verdict) | "
            "verdict written |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for sel, a in m["live_auroc"].items():
            lines.append(
                f"| {NAMES.get(sel, sel)} | {a['items']} | {a['positives']} | {_c(a['auroc'], '{:.3f}')} | "
                f"{_c(a['balanced_accuracy'], '{:.3f}')} | {_c(a['verdict_rate'], '{:.2f}')} |"
            )
    if m.get("within_call"):
        lines += ["", *render_within_call(m["within_call"])]
    lines += [
        "",
        "## Notes",
        "",
        (
            "- **scores**: a first action's score is the verifier's P(yes) after `action_is_correct:` (`bon.score: "
            "prob`)"
            if prob
            else "- **scores**: a verification's verdict is `yes` = 1, `no` or none written = 0; a first action's "
            "score is the mean of its M verifications"
        )
        + "; the oracle scores correct 1, neutral 0.5, wrong 0; ties go to the candidate with the highest policy "
        "log-prob (docs/vegas.md §5).",
        "- **cost**: model calls = sampled policy answers + verifications, per planner call; wall seconds are the "
        "selector's own (the greedy run's extra coverage samples are timed apart).",
    ]
    return "\n".join(lines) + "\n"


def _ci(r: Mapping | None, scale: float = 1.0, fmt: str = "{:.3f}") -> str:
    if not r or r.get("value") is None:
        return "–"
    lo, hi = r.get("ci95") or (None, None)
    band = "" if lo is None else f" [{fmt.format(scale * lo)}, {fmt.format(scale * hi)}]"
    return fmt.format(scale * r["value"]) + band


def render_within_call(w: Mapping[str, Any]) -> list[str]:
    """The "where Best-of-N acts" section (``vegas/calls.py`` ``within_call``): per part of the calls, each
    verifier's within-call AUROC on mixed calls and each selector's top-1 oracle-correct rate and value over one
    sample on the calls with a correct candidate, bootstrap 95% intervals over calls."""
    lines = [
        "## Where Best-of-N acts: within one planner call (the greedy run's states)",
        "",
        "Within-call AUROC: of the (correct, not correct) candidate pairs of one call, the share a verifier ranks "
        "right, on calls with both. Top-1: on calls with a correct candidate, the share where the pick is "
        "oracle-correct (`sample`: one draw's expected value); value = top-1 − one sample's, on the same calls "
        "(points). Bootstrap 95% intervals over calls.",
        "",
        "| calls | mixed | with a correct one | verifier | within-call AUROC |",
        "|---|---:|---:|---|---|",
    ]
    for part, e in w.items():
        for v, a in e["auroc"].items():
            lines.append(
                f"| {part} ({e['calls']}) | {e['mixed_calls']} | {e['calls_with_correct']} | {NAMES.get(v, v)} | "
                f"{_ci(a)} |"
            )
    lines += ["", "| calls | pick | top-1 oracle-correct (%) | value over one sample (points) |", "|---|---|---|---|"]
    for part, e in w.items():
        for name, t in e["top1"].items():
            val = e["value_over_sample"].get(name)
            lines.append(
                f"| {part} | {name} | {_ci(t, 100, '{:.1f}')} ({t['n']} calls) | "
                f"{_ci(val, 100, '{:+.1f}') if val else '–'} |"
            )
    return lines


def render_report(m: Mapping[str, Any], path: str | Path) -> None:
    write_text_atomic(path, render_markdown(m))


def success_plot(m: Mapping[str, Any], path: str | Path) -> None:
    rows = []
    for sel, s in m["selectors"].items():
        rows.append({"model": sel, "subset": "all episodes", "success_rate": s["success"] or 0.0})
        if s.get("long_horizon") is not None:
            rows.append({"model": sel, "subset": "long_horizon", "success_rate": s["long_horizon"]})
    grouped_bars(rows, f"Success by selector ({m['label']})", path)


__all__ = ["NAMES", "render_markdown", "render_report", "render_within_call", "success_plot"]
