"""Converts the pre-study ReGRPO tables, read from git history, into the study table schema (test-only code).

Before issue 64 (experiments as data) ``tools/regrpo_seeds.py`` published ReGRPO's tables as ``metrics/regrpo*.json``
in a format of its own: ``arms`` (``"<arm>/<mode>"``: per-seed rows with the behaviour counts as ``<column>_counts``
and the reflection scalars), ``comparisons`` named ``"b vs a (mode)"`` or ``"b (mode b) vs a (mode a)"`` (per seed
the gap and the exact McNemar p rounded to 6 decimals; pooled ``only_a``/``only_b``/``episodes``), ``steps``,
``heldout_rot``, ``eta`` and ``checks`` (``{name: holds}``). Those files left the tree; they are read here from git
(:data:`LEGACY_COMMIT`, the last commit with them; the on-policy recipe's seeds 0-2 table, which the five-seed table
pooled, from :data:`ONPOLICY_SEEDS_0_2`). :func:`convert` turns one into the table of its study
(``conf/study/<name>.yaml``, ``embodied_rft.study.table``): outcomes from the per-seed rows and counts, comparisons
from the stored counts under the study's comparison ids, the ``steps``/``heldout_rot``/``eta`` sections from the
counts they keep, every derived figure and check re-derived by ``study.table.merge`` and the registered checks.

``python -m tests.helpers.legacy_tables`` wrote ``results/<study>/table.json`` and ``table.md`` of the six ReGRPO
studies (and ``results/regrpo_onpolicy/seeds-0-2.json``, the part the on-policy study merges) once;
tests/regrpo/test_study_tables.py shows every published number unchanged.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from embodied_rft.regrpo.study import REFLECTION, STEP_SPLITS, eta_gap, steps_arm
from embodied_rft.study.layout import resolved
from embodied_rft.study.registry import load_plugins
from embodied_rft.study.spec import Study, load
from embodied_rft.study.table import LABEL, SCHEMA, merge

LEGACY_COMMIT = "9cd6297"
ONPOLICY_SEEDS_0_2 = "4ad33ff"
# study -> the published table it was made for
FILES = {
    "regrpo": "metrics/regrpo.json",
    "regrpo_bare": "metrics/regrpo_bare.json",
    "regrpo_nokl": "metrics/regrpo_nokl.json",
    "regrpo_onpolicy": "metrics/regrpo_onpolicy.json",
    "regrpo_trigger": "metrics/regrpo_trigger.json",
    "regrpo_twins": "metrics/regrpo_twins.json",
}
# a study's arm -> the arm's name in the old table, where they differ: the old tool ran the on-policy recipe's arms
# under another folder with the names of the engine-data arms
RENAMES = {
    "regrpo_onpolicy": {"plain_onpolicy": "plain", "rot_onpolicy": "rot", "shuffled_onpolicy": "shuffled"},
}
RATES = ("repeat_after_failure_rate", "recovered_next_call_rate", "recovered_next_call_correct_rate")


def git_json(path: str, commit: str = LEGACY_COMMIT, repo: Path | None = None) -> dict[str, Any] | None:
    """``git show <commit>:<path>`` as JSON; None where git, the commit or the file is not available."""
    if shutil.which("git") is None:
        return None
    r = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True, cwd=repo)
    return json.loads(r.stdout) if r.returncode == 0 else None


def old_arm(study: Study, arm: str) -> str:
    return RENAMES.get(study.name, {}).get(arm, arm)


def old_comparison(study: Study, a: str, b: str) -> str:
    """The old table's name of the comparison of outcome b against outcome a (``<arm>/<mode>`` each)."""
    (aa, ma), (ab, mb) = a.split("/"), b.split("/")
    aa, ab = old_arm(study, aa), old_arm(study, ab)
    return f"{ab} vs {aa} ({ma})" if ma == mb else f"{ab} ({mb}) vs {aa} ({ma})"


def old_eta(study: Study, eta0: str, eta: str, split: str) -> str:
    return f"{old_arm(study, eta)} vs {old_arm(study, eta0)} (steps, {split})"


def row(r: dict[str, Any]) -> dict[str, Any]:
    """An old per-seed row as the ``regrpo_evaluate`` reader gives it."""
    counts = {col: list(r[f"{col}_counts"]) for col in RATES}
    if r.get("calls_after_success") is not None:
        counts["reflection_tokens_after_success"] = [
            r.get("spontaneous_tokens_after_success") or 0,
            r["calls_after_success"],
        ]
    return {
        "seed": r["seed"],
        "success": float(r["success"]),
        "episodes": r["episodes"],
        "counts": counts,
        "subsets": {},
        "reflection": {k: r.get(k) for k in REFLECTION},
    }


def part(old: dict[str, Any], study: Study) -> dict[str, Any]:
    """The stored counts of an old table, as a table of ``study`` whose derived figures are still to be made."""
    outcomes = {}
    for arm, e in study.outcomes():
        rows = (old["arms"].get(f"{old_arm(study, arm)}/{e.mode}") or {}).get("per_seed")
        if rows:
            outcomes[f"{arm}/{e.mode}"] = {"per_seed": [row(r) for r in rows]}
    comparisons = {}
    for c in study.comparisons:
        oc = old["comparisons"].get(old_comparison(study, c.a, c.b))
        if oc is not None:
            comparisons[c.id] = {
                "a": c.a,
                "b": c.b,
                "subset": c.subset,
                **{k: oc[k] for k in ("seeds", "success_gap_per_seed", "p_mcnemar_per_seed")},
                **{k: oc[k] for k in ("only_a", "only_b", "episodes")},
            }
    back = {old_arm(study, a): a for a in study.run}
    sections: dict[str, Any] = {}
    for name, args in study.sections:
        if name == "steps" and old.get("steps"):
            sections["steps"] = {
                split: {back[a]: steps_arm(d["per_seed"]) for a, d in arms.items() if a in back}
                for split, arms in old["steps"].items()
            }
        elif name == "heldout_rot" and old.get("heldout_rot"):
            sections["heldout_rot"] = {
                back[a]: {"seeds": d["seeds"], "pooled": d["pooled"]}
                for a, d in old["heldout_rot"].items()
                if a in back
            }
        elif name == "eta":
            eta: dict[str, Any] = {}
            for pid, (a, b) in args["pairs"].items():
                splits = {}
                for split in STEP_SPLITS:
                    have = (old.get("steps") or {}).get(split) or {}
                    ka, kb = (have.get(old_arm(study, x)) for x in (a, b))
                    if ka and kb:
                        kinds = [{int(s): k for s, k in d["per_seed"].items()} for d in (ka, kb)]
                        if (g := eta_gap(*kinds)) is not None:
                            splits[split] = g
                if splits:
                    eta[pid] = {"eta0": a, "eta": b, "splits": splits}
            if eta:
                sections["eta"] = eta
    return {
        "schema": SCHEMA,
        "study": study.name,
        "label": LABEL,
        "seeds": old["seeds"],
        "spec": resolved(study),
        "outcomes": outcomes,
        "comparisons": comparisons,
        "sections": sections,
    }


def convert(old: dict[str, Any], study: Study) -> dict[str, Any]:
    """An old table as the table of ``study``: its stored counts, every derived figure and check made from them."""
    load_plugins(study.plugins, str(study.file))
    return json.loads(json.dumps(merge([part(old, study)], study)))


def main() -> int:
    from embodied_rft.core.atomic import write_json_atomic, write_text_atomic
    from embodied_rft.study.table import render

    for name, path in FILES.items():
        study = load(name)
        if name == "regrpo_onpolicy":  # the seeds 0-2 table the five-seed one pooled: the study's `merge:` part
            early = convert(git_json(path, ONPOLICY_SEEDS_0_2), study)
            write_json_atomic(Path(study.merge[0]), early)
        table = convert(git_json(path, LEGACY_COMMIT), study)
        write_json_atomic(Path("results") / name / "table.json", table)
        write_text_atomic(Path("results") / name / "table.md", render(table))
        print(f"results/{name}/table.json: seeds {table['seeds']} (from {LEGACY_COMMIT}:{path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
