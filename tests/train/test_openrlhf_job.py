"""The ``grpo`` stage's cluster path as a real Ray job on a local head (``ray start --head`` on loopback).

The stage's own ``ray job submit`` command uploads this repository as the job's working dir; the job's entrypoint
(train/openrlhf/entry.py) runs in that uploaded copy and reads every input by absolute path on the shared root; the
trainer is the CPU stand-in for ``openrlhf.cli.train_ppo_ray`` (tests/helpers/openrlhf_standin.py: OpenRLHF's own
parser, dataset loader, reward-file loader and logger, the local engine's updates), because OpenRLHF's trainer
needs CUDA and vLLM. What comes back is read by the stage exactly as it would read OpenRLHF's.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from embodied_rft.config import ConfigError, StageFailed
from embodied_rft.filtering import FilterConfig
from embodied_rft.models import load_model
from embodied_rft.pipeline import Paths
from embodied_rft.reward import RewardConfig
from embodied_rft.train.grpo.config import GRPOConfig, OpenRLHFConfig
from embodied_rft.train.openrlhf import cluster
from tests.helpers.clones import tree_digest
from tests.helpers.grpo_fixtures import grpo_samples, sft_policy, write_jsonl

ray = pytest.importorskip("ray")
pytest.importorskip("openrlhf")

STANDIN = "tests.helpers.openrlhf_standin"


@pytest.fixture(scope="module")
def head():
    from tests.helpers.ray_head import ray_head

    with ray_head(num_cpus=2) as h:
        yield h


def _cfg(shared_root: Path, address: str = "", **env) -> GRPOConfig:
    """G = 4, N_B = 2 prompts, one update per rollout batch; one GPU's worth of placement (the stand-in ignores it)."""
    return GRPOConfig(
        backend="openrlhf",
        group_size=4,
        max_new_tokens=48,
        max_prompt_tokens=256,
        lr=1e-4,
        filter=FilterConfig(buffer_size=2, updates_per_buffer=1),
        train_batch_size=8,
        eval_max_samples=4,
        eval_batch_size=4,
        report_to=(),
        openrlhf=OpenRLHFConfig(
            num_nodes=1,
            gpus_per_node=1,
            vllm_num_engines=1,
            micro_rollout_batch_size=1,
            ray_address=address,
            shared_root=str(shared_root),
            trainer=STANDIN,
            env={"TOKENIZERS_PARALLELISM": "false", "EMBODIED_RFT_STANDIN_UPDATES": "2", **env},
        ),
    )


def _workspace(root: Path) -> Paths:
    """A pipeline workspace under ``root`` (the shared root): an SFT policy and decomposed samples."""
    shutil.copytree(sft_policy(), root / "models" / "sft")
    write_jsonl(root / "data" / "decomposed" / "train.jsonl", grpo_samples())
    write_jsonl(root / "data" / "decomposed" / "val.jsonl", grpo_samples())
    return Paths(
        decomposed_dir=str(root / "data" / "decomposed"),
        sft_model=str(root / "models" / "sft"),
        grpo_model=str(root / "models" / "grpo"),
        metrics_dir=str(root / "metrics"),
        plots_dir=str(root / "plots"),
        work_dir=str(root / ".cache" / "work"),
    )


def _previous_outputs(p: Paths) -> dict[str, str]:
    """Outputs of an earlier run, to check a failed job leaves them byte-identical."""
    shutil.copytree(sft_policy(), p.grpo_model)
    for f, text in ((p.metrics("grpo"), '{"backend": "local"}\n'), (p.plot("grpo.csv"), "update\n1\n")):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return {str(f): tree_digest(Path(f)) for f in (p.grpo_model, p.metrics("grpo"), p.plot("grpo.csv"))}


@pytest.fixture
def repo_cwd(repo_root, monkeypatch):
    """The stage runs at the repository root, as DVC runs it: Ray uploads that folder as the job's working dir."""
    monkeypatch.chdir(repo_root)


def test_the_stage_trains_through_a_ray_job_and_owns_its_outputs(head, tmp_path, repo_cwd):
    p = _workspace(tmp_path)
    gcfg = _cfg(tmp_path, head.address)
    m = cluster.OpenRLHFStage(gcfg, RewardConfig(), p, "paths.sft_model").run(None)

    # the job ran the stand-in in Ray's uploaded copy of the repository, and found every input from there
    job = m["job"]
    assert m["backend"] == "openrlhf" and job["status"] == "SUCCEEDED"
    assert job["submission_id"].startswith("embodied-rft-grpo-") and job["trainer"] == STANDIN
    assert job["openrlhf_version"] == "0.11.2"
    assert "working_dir_files" in job["cwd"] and Path(job["cwd"]) != Path.cwd()
    assert job["inputs"]["policy"] == p.sft_model and job["inputs"]["prompts"].startswith(str(tmp_path))
    # OpenRLHF's per-step lines, parsed back, and our reward file's records, one rollout batch per step
    assert m["steps"] == 2 and [r["update"] for r in m["history"]] == [1, 2]
    first = m["history"][0]
    assert {"policy_loss", "actor_lr", "reward", "dynamic_filtering_pass_rate"} <= set(first)
    assert first["actor_lr"] == pytest.approx(1e-4)
    rewards, batches = m["rewards"], m["rollout_batches"]
    assert rewards["samples"] == 4 * rewards["groups_seen"] and rewards["incomplete_groups"] == 0
    assert [b["accepted"] for b in batches[:2]] == [2, 2] and all(b.get("partial") for b in batches[2:])
    assert rewards["groups_accepted"] == sum(b["accepted"] for b in batches) >= 4
    assert m["filter"]["pass_rate"] == pytest.approx(rewards["groups_accepted"] / rewards["groups_seen"])
    assert [r["filter_pass_rate"] for r in m["history"]] == [b["pass_rate"] for b in batches[:2]]
    # the rate OpenRLHF logs counts samples kept per prompt consumed (×100): divided by G it is a rate again
    assert 0 < m["filter"]["openrlhf_logged_pass_rate"] <= 1
    # the held-out check of the local engine, before (the SFT policy) and after (the job's model)
    assert m["heldout"]["before"]["samples"] == m["heldout"]["after"]["samples"] == 4
    assert m["heldout"]["paired"]["n"] == 4

    # the outputs: the job's model in paths.grpo_model (trained: not the SFT weights), metrics naming the job
    trained, _ = load_model(p.grpo_model)
    start, _ = load_model(p.sft_model)
    assert any((a - b).abs().max() > 0 for a, b in zip(trained.parameters(), start.parameters()))
    head_json = json.loads(Path(p.metrics("grpo")).read_text())
    assert head_json["backend"] == "openrlhf" and head_json["job"]["submission_id"] == job["submission_id"]
    assert head_json["job"]["openrlhf_version"] == "0.11.2"
    details = json.loads(Path(p.metrics("grpo")).with_name("grpo.details.json").read_text())
    assert details["history"] == m["history"]
    rows = list(csv.DictReader(Path(p.plot("grpo.csv")).open()))
    assert [r["update"] for r in rows] == ["1", "2"]
    assert {"reward_mean", "accuracy_full_rate", "filter_pass_rate", "policy_loss"} <= set(rows[0])


def test_an_input_the_job_cannot_see_fails_the_stage_naming_it(head, tmp_path, repo_cwd):
    """A node without the shared root: the stage saw the policy, the job does not. The job's first act finds it
    missing, before any training; the stage fails naming the path, and leaves the previous outputs alone."""
    p = _workspace(tmp_path)
    before = _previous_outputs(p)
    gcfg = _cfg(tmp_path, head.address)
    plan = cluster.OpenRLHFStage(gcfg, RewardConfig(), p, "paths.sft_model").prepare(None)
    os.rename(p.sft_model, p.sft_model + ".elsewhere")  # what a node that does not mount the shared root sees
    with pytest.raises(StageFailed) as err:
        cluster.submit_and_wait(plan, (p.grpo_model,))
    msg = str(err.value)
    assert plan.submission_id in msg and "FAILED" in msg
    assert f"input 'policy': {p.sft_model} not found from host" in msg and "grpo.openrlhf.shared_root" in msg
    assert not plan.layout.record.exists()  # nothing ran: the check comes before the trainer
    assert {f: tree_digest(Path(f)) for f in before} == before


def test_a_failing_trainer_fails_the_stage_and_leaves_the_outputs(head, tmp_path, repo_cwd):
    p = _workspace(tmp_path)
    before = _previous_outputs(p)
    gcfg = _cfg(tmp_path, head.address, EMBODIED_RFT_STANDIN_FAIL="1")
    with pytest.raises(StageFailed, match=r"ended FAILED .*failing on purpose.*are unchanged"):
        cluster.OpenRLHFStage(gcfg, RewardConfig(), p, "paths.sft_model").run(None)
    assert {f: tree_digest(Path(f)) for f in before} == before


def test_an_interrupted_stage_stops_its_job(head, tmp_path, repo_cwd):
    """Ctrl-C in the stage while its job trains: the stage stops the job on the cluster instead of leaving it
    running after the stage has gone."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    p = _workspace(tmp_path)
    gcfg = _cfg(tmp_path, head.address, EMBODIED_RFT_STANDIN_SLEEP="300")
    plan = cluster.OpenRLHFStage(gcfg, RewardConfig(), p, "paths.sft_model").prepare(None)
    client = JobSubmissionClient(head.address)

    def interrupt_once_training() -> None:  # the entrypoint wrote its record: the trainer is running
        deadline = time.time() + 120
        while time.time() < deadline and not plan.layout.record.exists():
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_training, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        cluster.submit_and_wait(plan, ())
    assert plan.layout.record.exists()
    deadline = time.time() + 60
    while time.time() < deadline and not client.get_job_status(plan.submission_id).is_terminal():
        time.sleep(0.5)
    assert client.get_job_status(plan.submission_id) == JobStatus.STOPPED


def test_an_input_outside_the_shared_root_is_refused_before_submitting(tmp_path, repo_cwd):
    p = _workspace(tmp_path / "ws")
    (tmp_path / "shared").mkdir()
    gcfg = _cfg(tmp_path / "shared")
    with pytest.raises(ConfigError) as err:
        cluster.OpenRLHFStage(gcfg, RewardConfig(), p, "paths.sft_model")
    msg = str(err.value)
    assert msg.startswith("grpo.openrlhf.shared_root: the job's policy (paths.sft_model = ")
    assert f"is not under the shared root {tmp_path / 'shared'}" in msg and "copy_inputs=true" in msg
