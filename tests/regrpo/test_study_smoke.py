"""A ReGRPO study end to end on the micro configuration, from a clean clone (slow: ~4 min on 2 cores).

`python -m embodied_rft.study run` on a study of ReGRPO's arms (conf/study/arms/regrpo.yaml): the recipe's data and
its valid_seen samples, the plain and RoT SFT arms and a ReGRPO GRPO arm from the RoT one, each evaluated, the
held-out per-step reflection and the SFT arms' near-miss answers (ReGRPO's study adapter's tasks), then the table with
its sections and checks; a second run finds every stage up to date.
"""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from embodied_rft.regrpo.study import REFLECTION
from tests.helpers.clones import run_ok, working_tree_clone

# on-policy states off: the micro policy's two episodes have no failed action, and the arm keeps failed states only
SMOKE = """\
description: ReGRPO's arms on micro (tests/regrpo/test_study_smoke.py)
seeds: [0]
overrides: [grpo.onpolicy.episodes=0]
plugins: [embodied_rft.regrpo.study]
include: [arms/regrpo]
run: [plain, rot, regrpo]
modes: [free]
comparisons:
  - {id: plain_to_rot_free, a: plain/free, b: rot/free}
  - {id: rot_to_regrpo_free, a: rot/free, b: regrpo/free}
checks:
  - {id: rot_success_not_lower_than_3pts, fn: paired_gain, clause: sft_success,
     args: {comparison: plain_to_rot_free, points: -3}}
  - {id: regrpo_success_+3pts_or_recovery_+5pts, fn: rl_gain, clause: rl_gain, args: {comparison: rot_to_regrpo_free}}
sections: [steps, heldout_rot]
clauses:
  sft_success: "RoT-SFT vs plain recovery SFT: success not lower by more than 3 points"
  rl_gain: "ReGRPO vs paper-reward GRPO: success +3 points pooled or recovered +5"
"""
STAGES = (
    "regrpo_data-prepare",
    "regrpo_data-decompose",
    "regrpo_data-decompose-valid_seen",
    "plain-distill",
    "plain-base",
    "plain-sft",
    "plain-evaluate",
    "plain-heldout-rot",
    "rot-distill",
    "rot-base",
    "rot-sft",
    "rot-evaluate",
    "rot-steps-valid_unseen",
    "rot-steps-valid_seen",
    "rot-heldout-rot",
    "regrpo-grpo",
    "regrpo-evaluate",
    "regrpo-steps-valid_unseen",
    "regrpo-steps-valid_seen",
)


@pytest.mark.slow
def test_a_regrpo_study_runs_on_micro_and_a_second_run_does_nothing(tmp_path, repo_root):
    clone = tmp_path / "clone"
    env = working_tree_clone(repo_root, clone)
    (clone / "conf" / "study" / "regrpo_smoke.yaml").write_text(SMOKE)
    cmd = [sys.executable, "-m", "embodied_rft.study", "run", "regrpo_smoke", "-o", "experiment=micro"]
    r = run_ok(cmd, clone, env)
    for stage in (*(f"{s}@0" for s in STAGES), "table"):
        assert f"Running stage 'studies/regrpo_smoke/dvc.yaml:{stage}'" in r.stdout, stage
    t = json.loads((clone / "results" / "regrpo_smoke" / "table.json").read_text())
    assert list(t["outcomes"]) == ["plain/free", "rot/free", "regrpo/free"] and t["seeds"] == [0]
    row = t["outcomes"]["regrpo/free"]["per_seed"][0]
    assert set(row["reflection"]) == set(REFLECTION) and row["reflection"]["calls"] > 0  # the free mode counts them
    c = t["comparisons"]["rot_to_regrpo_free"]
    assert (
        c["seeds"] == [0] and c["episodes"] == row["episodes"] == t["outcomes"]["rot/free"]["per_seed"][0]["episodes"]
    )
    assert t["checks"]["regrpo_success_+3pts_or_recovery_+5pts"]["clause"] == "rl_gain"
    assert t["checks"]["rot_success_not_lower_than_3pts"]["holds"] is not None
    steps = t["sections"]["steps"]
    assert set(steps) == {"valid_seen", "valid_unseen"} and all(set(d) == {"regrpo", "rot"} for d in steps.values())
    assert list(t["sections"]["heldout_rot"]) == ["plain", "rot"]
    assert t["sections"]["heldout_rot"]["rot"]["pooled"]["after_failure"]["calls"] > 0
    measured = json.loads((clone / "runs/regrpo_smoke/seed-0/regrpo/metrics/steps-valid_seen.json").read_text())
    assert measured["model"] == "runs/regrpo_smoke/seed-0/regrpo/models/grpo"
    lock = yaml.safe_load((clone / "studies" / "regrpo_smoke" / "dvc.lock").read_text())["stages"]
    grpo_deps = [d["path"] for d in lock["regrpo-grpo@0"]["deps"]]
    assert "runs/regrpo_smoke/seed-0/rot/models/sft" in grpo_deps  # the RL arm starts from the RoT-SFT policy
    again = run_ok(cmd, clone, env)
    assert "Running stage" not in again.stdout and "nothing to run" in again.stdout
