"""VeGAS over seeds: failure synthesis, the verifier and every Best-of-N selector once per seed, then each selector
against greedy pooled over the seeds (the issue's headline: docs/vegas.md §7).

``python -m embodied_rft.tools.bon_seeds --seeds 0 1 2 [--runs-dir runs] [--summary-only] [-- OVERRIDE ...]``
(``make bon-seeds``) runs, per seed and under ``runs/seed-<s>/`` exactly as ``make seeds`` lays it out
(``tools/seeds.py``: ``seed=<s>`` and every ``paths.*`` re-rooted), the stages the selectors need — ``prepare``,
``decompose``, ``distill``, ``base``, ``sft`` (and ``grpo`` when ``bon.policy=grpo``), then ``synth``, ``verifier``,
``bon`` — skipping each stage whose metrics exist with unchanged parameters (``make seeds``' own rule and stamps,
so its finished runs are reused). Then it reads each ``metrics/bon.details.json`` and writes
``metrics/bon_seeds.json`` and ``reports/bon_seeds.md``: per selector, success per seed and mean; against greedy, the
gap per seed, the episodes only one of the two solved pooled over the seeds, and the exact McNemar p-value of those
counts, overall and on the long-horizon subset; each verifier selector against ``sample`` (one draw at T, no verifier)
on the same episodes, the same way — whether the verifier's choice beats chance's, not only greedy's; coverage and the
verifiers' live AUROC per seed; and the issue's
checks (``bon_ft`` − greedy ≥ +5 points pooled with p < 0.05 and positive on at least 2 of 3 seeds; ``bon_oracle``
and coverage@4 ≥ greedy + 10 points). A symbolic-simulator proxy throughout.

Before the first stage it checks its arguments and the composed config (``tools/seeds.py``: seeds, ``--runs-dir``,
every stage's section with the overrides) and the one model no stage of this run makes: the zero-shot SmolLM2
verifier's GGUF file when ``bon_zs_smollm2`` is played or scored (``vegas/bon.py`` ``check_models``); then it prints
its plan (per seed, the stages to run and those done) and a time estimate.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from embodied_rft.evaluate.aggregate import mcnemar_exact, paired
from embodied_rft.tools.seeds import (
    _conf_paths,
    _run_stage,
    announce,
    check_args,
    check_config,
    path_overrides,
    publish,
    refuse,
    seed_parser,
)

log = logging.getLogger(__name__)

BASE_STAGES = ("prepare", "decompose", "distill", "base", "sft")
VEGAS_STAGES = ("synth", "verifier", "bon")


def run_seed(seed: int, root: Path, overrides: list[str], policy: str) -> None:
    """Every stage ``bon`` needs for one seed under ``root`` (module docstring)."""
    common = [f"seed={seed}", *path_overrides(_conf_paths(), root), *overrides]
    metrics = root / _conf_paths()["metrics_dir"]
    stages = [*BASE_STAGES, *(("grpo",) if policy == "grpo" else ()), *VEGAS_STAGES]
    ran = False
    for stage in stages:
        ran = _run_stage(seed, stage, common, metrics / f"{stage}.json", root / "logs" / stage, ran) or ran


def _pool(per_seed: list[dict], base: str = "greedy") -> dict[str, Any]:
    only_a, only_b = sum(c["only_a"] for c in per_seed), sum(c["only_b"] for c in per_seed)
    episodes = sum(c["episodes"] for c in per_seed)
    return {
        "gap_per_seed": [c["gap"] for c in per_seed],
        "episodes": episodes,
        f"only_{base}": only_a,
        "only_selector": only_b,
        "gap_pooled": round(100.0 * (only_b - only_a) / episodes, 2) if episodes else 0.0,
        "p_mcnemar": round(mcnemar_exact(only_a, only_b), 6),
        "positive_seeds": sum(c["gap"] > 0 for c in per_seed),
    }


def _vs_sample(record: dict, sel: str) -> dict | None:
    """One seed's paired counts of ``sel`` against ``sample`` from ``episode_success`` (None unless both ran)."""
    es = record.get("episode_success") or {}
    return paired(es["sample"], es[sel]) if es.get("sample") and es.get(sel) else None


def summarise(records: dict[int, dict]) -> dict[str, Any]:
    """Pooled comparisons from each seed's ``bon.details.json`` record (module docstring)."""
    seeds = sorted(records)
    selectors = list(dict.fromkeys(s for r in records.values() for s in r["selectors"]))
    success = {
        sel: {
            "per_seed": [records[s]["selectors"].get(sel, {}).get("success") for s in seeds],
            "long_horizon_per_seed": [records[s]["selectors"].get(sel, {}).get("long_horizon") for s in seeds],
        }
        for sel in selectors
    }
    for v in success.values():
        vals = [x for x in v["per_seed"] if x is not None]
        v["mean"] = round(sum(vals) / len(vals), 2) if vals else None
    paired, paired_long = {}, {}
    for sel in selectors:
        if sel == "greedy":
            continue
        cs = [records[s]["paired_vs_greedy"].get(sel) for s in seeds]
        if all(cs):
            paired[sel] = _pool(cs)
        cl = [records[s].get("paired_vs_greedy_long_horizon", {}).get(sel) for s in seeds]
        if all(cl):
            paired_long[sel] = _pool(cl)
    paired_sample = {}
    for sel in selectors:
        if sel.startswith("bon_"):
            cs = [_vs_sample(records[s], sel) for s in seeds]
            if all(cs):
                paired_sample[sel] = _pool(cs, base="sample")
    cov = {s: records[s].get("coverage") or {} for s in seeds}
    auroc = {sel: [records[s].get("live_auroc", {}).get(sel, {}).get("auroc") for s in seeds] for sel in selectors}
    checks: dict[str, Any] = {}
    ft = paired.get("bon_ft")
    if ft:
        checks["bon_ft_gain_5pts_p05"] = ft["gap_pooled"] >= 5.0 and ft["p_mcnemar"] < 0.05
        checks["bon_ft_positive_on_2_of_3"] = ft["positive_seeds"] >= min(2, len(seeds))
    if paired.get("bon_oracle"):
        checks["bon_oracle_10pts_over_greedy"] = paired["bon_oracle"]["gap_pooled"] >= 10.0
    heads = [c.get("headroom_at_4") for c in cov.values()]
    if heads and all(h is not None for h in heads):
        checks["coverage_at_4_10pts_over_greedy_correct"] = all(h >= 0.10 for h in heads)
    return {
        "label": "symbolic-simulator proxy, not EmbodiedBench numbers",
        "seeds": seeds,
        "success": success,
        "paired_vs_greedy": paired,
        "paired_vs_greedy_long_horizon": paired_long,
        "paired_vs_sample": paired_sample,
        "coverage": {str(s): c for s, c in cov.items()},
        "live_auroc": {k: v for k, v in auroc.items() if any(x is not None for x in v)},
        "checks": checks,
    }


def render(summary: dict[str, Any]) -> str:
    seeds = summary["seeds"]
    lines = [
        f"# VeGAS over seeds {seeds} ({summary['label']})",
        "",
        "Success (%) per seed and mean; each selector against greedy on the same episodes: gap per seed, episodes "
        "solved only by greedy / only by the selector pooled over the seeds, exact McNemar p.",
        "",
        "| selector | success per seed | mean | gap per seed | only greedy | only selector | pooled gap | McNemar p | long-horizon pooled gap (p) |",
        "|---|---|---:|---|---:|---:|---:|---:|---|",
    ]
    fmt = lambda xs: ", ".join("–" if x is None else f"{x:.1f}" for x in xs)  # noqa: E731
    for sel, s in summary["success"].items():
        p = summary["paired_vs_greedy"].get(sel)
        pl = summary["paired_vs_greedy_long_horizon"].get(sel)
        tail = "| – | – | – | – | – | – |"
        if p:
            long = f"{pl['gap_pooled']:+.1f} ({pl['p_mcnemar']:.3g})" if pl else "–"
            tail = (
                f"| {', '.join(f'{g:+.1f}' for g in p['gap_per_seed'])} | {p['only_greedy']} | {p['only_selector']} | "
                f"{p['gap_pooled']:+.1f} | {p['p_mcnemar']:.3g} | {long} |"
            )
        mean = "–" if s["mean"] is None else f"{s['mean']:.1f}"
        lines.append(f"| {sel} | {fmt(s['per_seed'])} | {mean} {tail}")
    if summary.get("paired_vs_sample"):
        lines += [
            "",
            "Each verifier selector against `sample` (one draw at T, no verifier) on the same episodes:",
            "",
            "| selector | gap per seed | only sample | only selector | pooled gap | McNemar p |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for sel, p in summary["paired_vs_sample"].items():
            lines.append(
                f"| {sel} | {', '.join(f'{g:+.1f}' for g in p['gap_per_seed'])} | {p['only_sample']} | "
                f"{p['only_selector']} | {p['gap_pooled']:+.1f} | {p['p_mcnemar']:.3g} |"
            )
    if summary["live_auroc"]:
        lines += ["", "| verifier | live AUROC per seed |", "|---|---|"]
        three = lambda xs: ", ".join("–" if x is None else f"{x:.3f}" for x in xs)  # noqa: E731
        lines += [f"| {k} | {three(v)} |" for k, v in summary["live_auroc"].items()]
    lines += ["", "| check | holds |", "|---|---|"]
    lines += [f"| {k} | {'yes' if v else 'no'} |" for k, v in summary["checks"].items()]
    return "\n".join(lines) + "\n"


def check_prerequisites(sections: dict[str, Any]) -> str:
    """The built ``bon`` config's ``policy`` (``sections``: :func:`check_config`'s), after checking the model no stage
    of this run makes (the zero-shot SmolLM2 verifier, when a selector needs it); refused with one line when missing."""
    from embodied_rft.config import ConfigError
    from embodied_rft.vegas.bon import check_models

    bcfg = sections["bon"]
    try:
        check_models(bcfg, {}, checkpoints=False)
    except ConfigError as exc:
        refuse(str(exc))
    return bcfg.policy


def main(argv: list[str] | None = None) -> int:
    args = seed_parser(__doc__, "bon_seeds").parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    runs = check_args(args)
    if not args.summary_only:
        overrides = list(args.overrides)
        policy = check_prerequisites(check_config(overrides))
        run_one = lambda s, root: run_seed(s, root, overrides, policy)  # noqa: E731
        if not announce(runs, run_one, f"seeds {list(runs)} under {args.runs_dir}/", args.dry_run):
            return 0
        for s, root in runs.items():
            run_one(s, root)
    files = {s: root / "metrics" / "bon.details.json" for s, root in runs.items()}
    missing = [str(f) for f in files.values() if not f.exists()]
    if missing:
        raise SystemExit(f"no Best-of-N results for: {', '.join(missing)} (run without --summary-only first)")
    summary = summarise({s: json.loads(f.read_text("utf-8")) for s, f in files.items()})
    publish(summary, render(summary), args.out_metrics, args.out_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
