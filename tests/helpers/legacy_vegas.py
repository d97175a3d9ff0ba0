"""Test-only: converts the pre-study table format of VeGAS over seeds — ``metrics/bon_seeds.json`` as
``tools/bon_seeds.py`` published it, read from git history (up to commit 9cd6297) — to the study table schema
(``embodied_rft.study.table``) of ``conf/study/vegas.yaml``. Used once to write ``results/vegas/table.json`` and
``table.md``, and by ``tests/vegas/test_study_table.py`` to show every published number is unchanged.

What the old table did not keep stays unknown in the new one: per-seed episode counts and count columns (``episodes``
None, ``counts`` empty), per-seed McNemar p-values (``p_mcnemar_per_seed`` None), every subset but the long-horizon
one, and the live items behind each AUROC. A selector is an outcome on the seeds it ran on (``sc``, ``bon_zs``,
``bon_zs_smollm2``: seed 0 only); the old table pooled a comparison only when both selectors ran on every seed, so
those selectors have no comparison here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from embodied_rft.study.spec import Study
from embodied_rft.study.table import _outcome, derive, finish

REPO = Path(__file__).resolve().parents[2]
LAST_OLD = "9cd6297"  # the last commit with the pre-study tables under metrics/ and reports/
OLD_FILE = "metrics/bon_seeds.json"
ARM = "vegas"
LONG = "long_horizon"
# old pooled comparison groups -> (baseline selector, subset, the new comparison id of selector `sel`)
GROUPS = {
    "paired_vs_greedy": ("greedy", None, "greedy_to_{sel}"),
    "paired_vs_greedy_long_horizon": ("greedy", LONG, "greedy_to_{sel}_long"),
    "paired_vs_sample": ("sample", None, "sample_to_{sel}"),
}


def old_table(repo: Path, path: str = OLD_FILE) -> dict[str, Any] | None:
    """``path`` as committed at :data:`LAST_OLD`; None when git or that commit is not available."""
    try:
        out = subprocess.run(["git", "show", f"{LAST_OLD}:{path}"], cwd=repo, capture_output=True, text=True)
    except OSError:
        return None
    return json.loads(out.stdout) if out.returncode == 0 else None


def outcome(sel: str) -> str:
    return f"{ARM}/{sel}"


def convert(old: dict[str, Any], study: Study) -> dict[str, Any]:
    """The old table (``old_table``) as the study table of ``study`` (``conf/study/vegas.yaml``)."""
    seeds = old["seeds"]
    outcomes = {}
    for sel, s in old["success"].items():
        rows = []
        for seed, x, lh in zip(seeds, s["per_seed"], s["long_horizon_per_seed"], strict=True):
            if x is None:  # not played on this seed
                continue
            rows.append(
                {
                    "seed": seed,
                    "success": x,
                    "episodes": None,
                    "counts": {},
                    "subsets": {} if lh is None else {LONG: lh},
                }
            )
        outcomes[outcome(sel)] = _outcome(rows)
    comparisons = {}
    for group, (base, subset, cid) in GROUPS.items():
        for sel, c in old[group].items():
            raw = {
                "a": outcome(base),
                "b": outcome(sel),
                "subset": subset,
                "seeds": seeds,  # the old table pooled a comparison only over all its seeds
                "success_gap_per_seed": c["gap_per_seed"],
                "p_mcnemar_per_seed": None,  # the old table kept only the pooled counts
                "only_a": c[f"only_{base}"],
                "only_b": c["only_selector"],
                "episodes": c["episodes"],
            }
            comparisons[cid.format(sel=sel)] = derive(raw, outcomes)
    order = [c.id for c in study.comparisons]  # the study's order, as a table built from runs has it
    comparisons = {k: comparisons[k] for k in sorted(comparisons, key=order.index)}
    auroc: dict[str, dict[str, Any]] = {}
    for sel, per in old["live_auroc"].items():
        for seed, a in zip(seeds, per, strict=True):
            if a is not None:
                auroc.setdefault(str(seed), {})[sel] = {"auroc": a}
    sections = {
        "bon_coverage": {"arm": ARM, "per_seed": {str(s): old["coverage"][str(s)] for s in seeds}},
        "bon_live_auroc": {"arm": ARM, "per_seed": {str(s): auroc[str(s)] for s in seeds if str(s) in auroc}},
    }
    return finish(study.name, seeds, outcomes, comparisons, sections, study)


def main(repo: Path = REPO) -> None:
    """Write ``results/vegas/table.json`` and ``table.md`` from the old table (run once: ``python -m
    tests.helpers.legacy_vegas``)."""
    from embodied_rft.core.atomic import write_json_atomic, write_text_atomic
    from embodied_rft.study import checks  # noqa: F401 - registers the generic checks
    from embodied_rft.study.registry import load_plugins
    from embodied_rft.study.spec import load
    from embodied_rft.study.table import render

    study = load(repo / "conf/study/vegas.yaml")
    load_plugins(study.plugins, str(study.file))  # the VeGAS sections and check
    old = old_table(repo)
    if old is None:
        raise SystemExit(f"git show {LAST_OLD}:{OLD_FILE} failed: no git history here")
    table = json.loads(json.dumps(convert(old, study)))
    write_json_atomic(repo / "results/vegas/table.json", table)
    write_text_atomic(repo / "results/vegas/table.md", render(table))


if __name__ == "__main__":
    main()
