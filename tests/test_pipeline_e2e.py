"""The whole DVC pipeline on a micro configuration, from a clean clone (slow: ~5 min on 2 cores).

Checks the wiring the unit tests cannot: every stage runs under `dvc repro` reading the generated params.yaml,
every declared output and metric exists, metrics/eval.json compares base, SFT and GRPO with lineage from
dvc.lock, a second `dvc repro` does nothing, and `dvc exp run -S` reaches a stage through DVC's Hydra composition.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.helpers.clones import run_ok, tree_digest, working_tree_clone

MICRO = ["experiment=micro"]


@pytest.mark.slow
def test_micro_pipeline_runs_end_to_end_and_is_cached(tmp_path, repo_root):
    clone = tmp_path / "clone"
    env = working_tree_clone(repo_root, clone)
    run_ok([sys.executable, "-m", "embodied_rft.params", *MICRO], clone, env)
    r = run_ok([sys.executable, "-m", "dvc", "repro"], clone, env)
    for stage in ("prepare", "decompose", "distill", "base", "sft", "grpo", "evaluate"):
        assert f"Running stage '{stage}'" in r.stdout
    m = json.loads((clone / "metrics" / "eval.details.json").read_text())
    assert set(m["models"]) >= {"base", "sft", "grpo", "expert", "random"}
    assert m["models"]["expert"]["interactive"]["overall"]["success_rate"] == 100.0
    assert {"prepare", "decompose", "distill", "base", "sft", "grpo"} <= set(m["lineage"]["stages"])
    assert m["lineage"]["stages"]["sft"]["outs"]["models/sft"].endswith(".dir")
    assert (clone / "reports" / "eval.md").read_text().count("proxy") >= 1
    for f in ("prepare", "decompose", "distill", "base", "sft", "grpo"):
        assert (clone / "metrics" / f"{f}.json").exists()
    assert "Data and pipelines are up to date" in run_ok([sys.executable, "-m", "dvc", "repro"], clone, env).stdout
    # a bad value hand-edited into params.yaml: the stage refuses it and every output stays where it was
    # (outputs are persist: DVC does not delete them before the stage runs)
    before = {
        p: tree_digest(clone / p) for p in ("models/sft", "metrics/sft.json", "plots/sft_loss.csv", "models/grpo")
    }
    good = (clone / "params.yaml").read_text()
    params = yaml.safe_load(good)
    params["sft"]["lr"] = -1.0
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    bad = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "-s", "sft"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode != 0 and "sft.lr: must be > 0" in bad.stdout + bad.stderr
    assert {p: tree_digest(clone / p) for p in before} == before
    (clone / "params.yaml").write_text(good)
    # DVC's Hydra composition: -S recomposes params.yaml from conf/ and the change reaches only the stages below it
    run_ok(["git", "add", "-A"], clone, env)
    run_ok(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "micro"], clone, env)
    r = run_ok(
        [sys.executable, "-m", "dvc", "exp", "run", "-S", "experiment=micro", "-S", "evaluate.max_episodes=1"],
        clone,
        env,
    )
    assert "Running stage 'evaluate'" in r.stdout and "Running stage 'sft'" not in r.stdout
