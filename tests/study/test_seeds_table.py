"""The seed table migrated to the study schema (results/seeds/table.json): its pooled figures follow from the
counts it stores, and every number the old ``metrics/seeds.json`` published is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied_rft.study import dvcgen  # noqa: F401 - registers readers, checks and sections
from embodied_rft.study.spec import load
from embodied_rft.study.table import rebuild, render
from tests.helpers.legacy_seeds import COMPARISONS, OUTCOMES, old_table

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "results" / "seeds" / "table.json"


def _roundtrip(x: dict) -> dict:
    return json.loads(json.dumps(x))


def test_pooled_figures_follow_from_the_stored_counts() -> None:
    table = json.loads(TABLE.read_text("utf-8"))
    assert _roundtrip(rebuild(table, load(REPO / "conf/study/seeds.yaml"))) == table
    assert (REPO / "results/seeds/table.md").read_text("utf-8") == render(table)


def test_every_published_number_is_unchanged() -> None:
    old = old_table("metrics/seeds.json", REPO)
    if old is None:
        pytest.skip("git history with commit 9cd6297 (the pre-study tables) is not available in this clone")
    new = json.loads(TABLE.read_text("utf-8"))
    assert new["seeds"] == old["seeds"]
    for label, key in OUTCOMES.items():
        for subset, o in old["success"][label].items():
            n = new["outcomes"][key]["success"] if subset == "overall" else new["outcomes"][key]["subsets"][subset]
            got = [
                r["success"] if subset == "overall" else r["subsets"][subset] for r in new["outcomes"][key]["per_seed"]
            ]
            assert got == o["values"], (label, subset)
            assert (n["mean"], n["sd"], n["min"], n["max"]) == pytest.approx((o["mean"], o["sd"], o["min"], o["max"]))
    for name, cid in COMPARISONS.items():
        o, c = old["paired"][name], new["comparisons"][cid]
        assert c["success_gap_per_seed"] == o["gap_per_seed"]
        assert (c["gap_mean"], c["gap_sd"]) == pytest.approx((o["gap_mean"], o["gap_sd"]))
        assert (c["only_a"], c["only_b"], c["episodes"]) == (o["only_a"], o["only_b"], o["episodes"])
        assert c["p_mcnemar_pooled"] == pytest.approx(o["p_mcnemar"], rel=1e-12)
        ordering = old["ordering"][name]
        check = new["checks"][f"{'sft_beats_base' if cid == 'base_to_sft' else 'grpo_beats_sft'}_beyond_spread"]
        assert check["holds"] == ordering["beyond_spread"]
        assert check["figures"]["gap_of_means"] == pytest.approx(ordering["gap"])
        assert check["figures"]["sum_of_sd"] == pytest.approx(ordering["spread"])
        every = new["checks"][f"{'sft_beats_base' if cid == 'base_to_sft' else 'grpo_beats_sft'}_every_seed"]
        assert every["holds"] == ordering["every_seed"]
    sec, hp = new["sections"]["grpo_heldout"], old["grpo_heldout_paired"]
    for k, v in old["grpo_heldout"].items():
        key = k.removeprefix("grpo heldout ")
        assert list(sec["values"][key].values()) == v["values"]
        assert (sec["spread"][key]["mean"], sec["spread"][key]["sd"]) == pytest.approx((v["mean"], v["sd"]))
    assert sec["paired"] == {
        "prompts": hp["prompts"],
        "reward_up": hp["reward_up"],
        "reward_down": hp["reward_down"],
        "only_before": hp["accuracy_full_only_before"],
        "only_after": hp["accuracy_full_only_after"],
    }
    assert sec["reward_p_sign"] == pytest.approx(hp["reward_p_sign"], rel=1e-12)
    assert sec["accuracy_full_p_mcnemar"] == pytest.approx(hp["accuracy_full_p_mcnemar"], rel=1e-12)
    assert list(sec["reward_mean_diff"].values()) == hp["reward_mean_diff_per_seed"]
