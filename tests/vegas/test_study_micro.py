"""The VeGAS arm (conf/study/arms/vegas.yaml) run through DVC on the micro configuration, from a clean clone (slow:
~3 min on 2 cores): prepare to the verifier, one ``bon`` run for every selector, and the table the study's readers,
sections and checks make of it; a second run finds nothing to do."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers.clones import run_ok, working_tree_clone

MODES = ["greedy", "sample", "sc", "bon_zs", "bon_ft", "bon_oracle"]
# the committed arm with micro's settings; every selector but SmolLM2's (minutes per episode on CPU). A micro run
# plays 2 episodes, maybe no long-horizon one: no comparison on that subset
SMOKE = f"""\
seeds: [0]
plugins: [embodied_rft.vegas.study]
include: [arms/vegas]
run: [vegas]
modes: {json.dumps(MODES)}
overrides: [experiment=micro, "bon.selectors=[{",".join(MODES)}]", "bon.live_verifiers=[]"]
comparisons:
  - {{id: greedy_to_bon_ft, a: vegas/greedy, b: vegas/bon_ft}}
  - {{id: sample_to_bon_ft, a: vegas/sample, b: vegas/bon_ft}}
checks:
  - {{id: bon_ft_gain, fn: paired_gain, args: {{comparison: greedy_to_bon_ft, points: 5.0, p: 0.05}}}}
  - {{id: headroom, fn: coverage_headroom, args: {{k: 2, points: 10.0}}}}
sections:
  - {{section: bon_coverage, arm: vegas}}
  - {{section: bon_live_auroc, arm: vegas}}
  - {{section: bon_within_call, arm: vegas}}
"""


@pytest.mark.slow
def test_the_vegas_arm_runs_on_micro_through_dvc(tmp_path, repo_root):
    clone = tmp_path / "clone"
    env = working_tree_clone(repo_root, clone)
    (clone / "conf/study/vegas_micro.yaml").write_text(SMOKE)
    cmd = [sys.executable, "-m", "embodied_rft.study", "run", "vegas_micro"]
    r = run_ok(cmd, clone, env, timeout=1200)
    for stage in ("prepare", "decompose", "distill", "base", "sft", "synth", "verifier", "bon"):
        assert f"dvc.yaml:vegas-{stage}@0'" in r.stdout, stage
    assert "dvc.yaml:vegas-grpo" not in r.stdout  # bon.policy=sft: no GRPO
    details = json.loads((clone / "runs/vegas_micro/seed-0/vegas/bon/metrics/bon.details.json").read_text())
    assert set(details["selectors"]) == set(MODES)
    assert set(details["episode_subset"]) == set(details["episode_success"]["greedy"])
    t = json.loads((clone / "results/vegas_micro/table.json").read_text())
    assert list(t["outcomes"]) == [f"vegas/{m}" for m in MODES]
    for m in MODES:
        row = t["outcomes"][f"vegas/{m}"]["per_seed"][0]
        assert row["seed"] == 0 and row["episodes"] == 2 and row["counts"]["model_calls_per_call"][1] > 0
    c = t["comparisons"]["sample_to_bon_ft"]
    assert c["episodes"] == 2 and c["only_a"] + c["only_b"] <= 2
    assert list(t["sections"]["bon_coverage"]["per_seed"]) == ["0"]
    assert t["checks"]["headroom"]["holds"] is not None
    # where Best-of-N acts: the run's per-call table, pooled over the study's one seed
    calls = clone / "runs/vegas_micro/seed-0/vegas/bon/reports/bon_calls.csv"
    assert calls.read_text().startswith("episode_id,call,action,count,samples,label,greedy,greedy_label,")
    w = t["sections"]["bon_within_call"]
    assert w["pooled_seeds"] == [0] and w["pooled"]["all"]["calls"] == details["within_call"]["all"]["calls"]
    assert (clone / "results/vegas_micro/table.md").read_text().startswith("# Study `vegas_micro` over seeds [0]")
    again = run_ok(cmd, clone, env, timeout=1200)
    assert "Running stage" not in again.stdout
