"""The cluster path through DVC, from a clean clone (default tier: ~2.5 min on 2 cores).

``experiment=micro`` up to SFT, then ``grpo=openrlhf`` on a real local Ray head: ``dvc repro grpo`` submits the
stage's job (the CPU stand-in trainer of tests/helpers/openrlhf_standin.py in place of OpenRLHF's CUDA trainer),
writes ``models/grpo`` and metrics naming the job, and ``dvc repro evaluate`` plays the job's checkpoint. Then a
failing job and a wrong shared root: ``dvc repro grpo`` exits non-zero and every output of the stage stays
byte-identical (they are ``persist`` outputs, replaced only by a successful run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.clones import tree_digest, working_tree_clone

pytest.importorskip("ray")
pytest.importorskip("openrlhf")

OUTPUTS = ("models/grpo", "metrics/grpo.json", "metrics/grpo.details.json", "plots/grpo.csv")
CLUSTER = [
    "experiment=micro",
    "grpo=openrlhf",
    "grpo.openrlhf.trainer=tests.helpers.openrlhf_standin",
    "grpo.openrlhf.gpus_per_node=1",
    "grpo.openrlhf.vllm_num_engines=1",
    "grpo.openrlhf.micro_rollout_batch_size=1",
    "grpo.openrlhf.save_steps=-1",
    "+grpo.openrlhf.env.EMBODIED_RFT_STANDIN_UPDATES='1'",
    # evaluation in Ray actors on the same head, one episode per task so that both actors play
    "evaluate.workers=2",
    "evaluate.parallel=ray",
    "evaluate.episodes_per_task=1",
]


def _run(cmd: list[str], cwd: Path, env: dict, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if ok:
        assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


def test_dvc_repro_grpo_runs_the_stage_as_a_ray_job(tmp_path, repo_root):
    from ray.job_submission import JobSubmissionClient
    from ray.util.state import list_actors

    from tests.helpers.ray_head import ray_head

    clone = tmp_path / "clone"
    env = working_tree_clone(repo_root, clone, extra=("tests",))  # the stand-in trainer runs from the clone
    py, dvc = sys.executable, [sys.executable, "-m", "dvc"]
    _run([py, "-m", "embodied_rft.params", "experiment=micro"], clone, env)
    _run([*dvc, "repro", "sft"], clone, env)
    with ray_head(env={"PYTHONPATH": str(clone / "src")}) as head:
        env.update(RAY_ADDRESS=head.address, RAY_AUTH_MODE=head.env["RAY_AUTH_MODE"])
        client = JobSubmissionClient(head.address)

        def submitted() -> list:  # `ray job submit` jobs (a driver joining with ray.init is a job too)
            return [j for j in client.list_jobs() if j.type.value == "SUBMISSION"]

        _run([py, "-m", "embodied_rft.params", *CLUSTER], clone, env)
        r = _run([*dvc, "repro", "grpo"], clone, env)
        assert "Running stage 'grpo'" in r.stdout
        m = json.loads((clone / "metrics" / "grpo.json").read_text())
        (job,) = submitted()
        assert m["backend"] == "openrlhf" and m["job"]["submission_id"] == job.submission_id
        assert m["job"]["trainer"] == "tests.helpers.openrlhf_standin" and m["job"]["openrlhf_version"] == "0.11.2"
        assert m["steps"] == 1 and m["heldout"]["after"]["samples"] == 2
        details = json.loads((clone / "metrics" / "grpo.details.json").read_text())
        assert details["onpolicy"]["episodes"] == 2  # the stage played its states before submitting
        assert details["job"]["inputs"]["policy"] == str(clone / "models" / "sft")
        lock = yaml.safe_load((clone / "dvc.lock").read_text())
        assert lock["stages"]["grpo"]["params"]["params.yaml"]["grpo"]["backend"] == "openrlhf"

        # the actors join the cluster RAY_ADDRESS names (its GCS: the job server's http address is not one)
        r = _run([*dvc, "repro", "evaluate"], clone, {**env, "RAY_ADDRESS": head.gcs})
        assert "Running stage 'evaluate'" in r.stdout
        ev = json.loads((clone / "metrics" / "eval.details.json").read_text())
        assert {"base", "sft", "grpo", "expert", "random"} <= set(ev["models"])
        actors = list_actors(address=head.address, filters=[("class_name", "=", "_RayWorker")])
        assert len(actors) == 2 * len(ev["models"])  # every policy played in two actors of the head
        grpo_out = next(o for o in lock["stages"]["grpo"]["outs"] if o["path"] == "models/grpo")
        assert ev["lineage"]["stages"]["grpo"]["outs"]["models/grpo"] == grpo_out["md5"]

        before = {p: tree_digest(clone / p) for p in OUTPUTS}
        # a job that fails mid-save: the stage fails, the outputs stay
        _run(
            [py, "-m", "embodied_rft.params", *CLUSTER, "+grpo.openrlhf.env.EMBODIED_RFT_STANDIN_FAIL='1'"], clone, env
        )
        bad = _run([*dvc, "repro", "grpo"], clone, env, ok=False)
        out = bad.stdout + bad.stderr
        assert bad.returncode != 0 and "ended FAILED" in out and "failing on purpose" in out
        assert {p: tree_digest(clone / p) for p in OUTPUTS} == before
        assert len(submitted()) == 2
        # a shared root that does not hold the policy: refused before any job or play, naming the key and the path
        _run(
            [py, "-m", "embodied_rft.params", *CLUSTER, f"grpo.openrlhf.shared_root={tmp_path / 'shared'}"], clone, env
        )
        bad = _run([*dvc, "repro", "grpo"], clone, env, ok=False)
        out = bad.stdout + bad.stderr
        assert (
            bad.returncode != 0 and "grpo.openrlhf.shared_root: the job's policy (paths.sft_model = models/sft" in out
        )
        assert f"not under the shared root {tmp_path / 'shared'}" in out
        assert {p: tree_digest(clone / p) for p in OUTPUTS} == before
        assert len(submitted()) == 2
