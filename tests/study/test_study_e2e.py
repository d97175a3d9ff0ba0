"""`make study` from a clean clone (issue 64, slow tier): the seeds study on experiment=micro runs through DVC —
every stage a DVC stage of studies/seeds/dvc.yaml, its table a tracked metric — and a second run is a no-op; then an
arm and a comparison added in a study file alone (no Python) plan and run."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.clones import working_tree_clone

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _make(clone: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    venv = sys.prefix  # this venv, never reinstalled (-o: its stamp counts as current)
    return subprocess.run(
        ["make", "-o", f"{venv}/.installed", "-o", f"{venv}/.smollm2", f"VENV={venv}", *args],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )


def test_make_study_runs_through_dvc_from_a_clean_clone_and_a_new_arm_is_yaml_only(tmp_path):
    clone = tmp_path / "clone"
    env = working_tree_clone(REPO, clone, extra=("Makefile",))
    r = _make(clone, env, "study", "S=seeds", "SEEDS=0", "OVERRIDES=experiment=micro")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "plan: 12 stages to run" in r.stdout
    table = json.loads((clone / "results/seeds/table.json").read_text())
    assert table["seeds"] == [0] and set(table["outcomes"]) == {
        "pipeline/base",
        "pipeline/sft",
        "pipeline/grpo",
        "no_sft/grpo",
    }
    played = table["outcomes"]["pipeline/sft"]["per_seed"][0]["episodes"]
    assert played > 0 and table["comparisons"]["sft_to_grpo"]["episodes"] == played  # the same episodes, paired
    lock = (clone / "studies/seeds/dvc.lock").read_text()
    assert "pipeline-grpo@0" in lock and "results/seeds/table.json" in lock
    shown = subprocess.run(
        [f"{sys.prefix}/bin/dvc", "metrics", "show", "--json"], cwd=clone, env=env, capture_output=True, text=True
    )
    assert "results/seeds/table.json" in shown.stdout
    # the second run finds every stage up to date
    r = _make(clone, env, "study", "S=seeds", "SEEDS=0", "OVERRIDES=experiment=micro")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "plan: nothing to run (every stage is up to date)" in r.stdout
    assert "Data and pipelines are up to date." in r.stdout + r.stderr
    # an arm and a comparison in a study file: GRPO from the pipeline's SFT policy with twice the updates
    (clone / "conf/study/longer.yaml").write_text(
        textwrap.dedent(
            """
            seeds: [0]
            include: [arms/paper]
            arms:
              longer_grpo:
                from: pipeline
                stages: [grpo]
                overrides: [grpo.max_updates=2]
                evals:
                  grpo: {stage: evaluate, read: grpo, overrides: ["evaluate.models=[grpo]", "evaluate.reference_policies=[]"]}
            run: [pipeline, longer_grpo]
            comparisons:
              - {id: longer, a: pipeline/grpo, b: longer_grpo/grpo}
            checks:
              - {id: longer_helps, fn: paired_gain, args: {comparison: longer}}
            """
        )
    )
    r = _make(clone, env, "study-plan", "S=longer", "OVERRIDES=experiment=micro")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "longer_grpo-grpo@0" in r.stdout and "pipeline-prepare@0" in r.stdout
    r = _make(clone, env, "study", "S=longer", "OVERRIDES=experiment=micro")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    longer = json.loads((clone / "results/longer/table.json").read_text())
    assert longer["comparisons"]["longer"]["episodes"] == played
    check, cmp = longer["checks"]["longer_helps"], longer["comparisons"]["longer"]
    assert check["figures"]["gap_pts"] == cmp["success_gap_pooled"] and check["holds"] == (
        cmp["success_gap_pooled"] >= 0
    )
    assert (clone / "runs/longer/seed-0/longer_grpo/models/grpo/checksums.sha256").exists()
