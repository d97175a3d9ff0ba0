"""Test-only: the seed table as ``tools/seeds.py`` published it before studies (``metrics/seeds.json`` up to commit
9cd6297), converted to the study table schema (``embodied_rft.study.table``). Used once to write
``results/seeds/table.json`` and by ``tests/study/test_seeds_table.py`` to show every published number is unchanged.
The old file is read from git history (:func:`old_table`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from embodied_rft.study.spec import Study
from embodied_rft.study.table import _outcome, derive, finish

LAST_OLD = "9cd6297"  # the last commit with the pre-study tables under metrics/ and reports/
OUTCOMES = {
    "base": "pipeline/base",
    "SFT": "pipeline/sft",
    "SFT+GRPO": "pipeline/grpo",
    "GRPO without SFT": "no_sft/grpo",
}
COMPARISONS = {"base < SFT": "base_to_sft", "SFT < SFT+GRPO": "sft_to_grpo"}


def old_table(path: str, repo: Path) -> dict[str, Any] | None:
    """``path`` as committed at :data:`LAST_OLD`; None when git or that commit is not available."""
    try:
        out = subprocess.run(["git", "show", f"{LAST_OLD}:{path}"], cwd=repo, capture_output=True, text=True)
    except OSError:
        return None
    return json.loads(out.stdout) if out.returncode == 0 else None


def convert(old: dict[str, Any], study: Study) -> dict[str, Any]:
    seeds = old["seeds"]
    outcomes = {}
    for label, key in OUTCOMES.items():
        s = old["success"].get(label)
        if not s:
            continue
        rows = []
        for i, seed in enumerate(seeds):
            subsets = {k: v["values"][i] for k, v in s.items() if k != "overall"}
            # the old table kept no per-seed episode counts or behaviour counts
            rows.append(
                {"seed": seed, "success": s["overall"]["values"][i], "episodes": None, "counts": {}, "subsets": subsets}
            )
        outcomes[key] = _outcome(rows)
    comparisons = {}
    for name, cid in COMPARISONS.items():
        c = old["paired"][name]
        a, b = (OUTCOMES[x] for x in name.split(" < "))
        raw = {
            "a": a,
            "b": b,
            "seeds": seeds,
            "success_gap_per_seed": c["gap_per_seed"],
            "p_mcnemar_per_seed": None,  # the old table kept only the pooled counts
            "only_a": c["only_a"],
            "only_b": c["only_b"],
            "episodes": c["episodes"],
        }
        comparisons[cid] = derive(raw, outcomes)
    hp = old["grpo_heldout_paired"]
    values = {}
    for k, v in old["grpo_heldout"].items():
        values[k.removeprefix("grpo heldout ")] = {str(s): x for s, x in zip(seeds, v["values"], strict=True)}
    from embodied_rft.study.paper import _derive

    section = _derive(
        {
            "arm": "pipeline",
            "values": values,
            "paired": {
                "prompts": hp["prompts"],
                "reward_up": hp["reward_up"],
                "reward_down": hp["reward_down"],
                "only_before": hp["accuracy_full_only_before"],
                "only_after": hp["accuracy_full_only_after"],
            },
            "reward_mean_diff": {str(s): x for s, x in zip(seeds, hp["reward_mean_diff_per_seed"], strict=True)},
        }
    )
    return finish(study.name, seeds, outcomes, comparisons, {"grpo_heldout": section}, study)
