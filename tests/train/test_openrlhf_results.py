"""The cluster path's pieces without a Ray head: the job's entrypoint as a real process, OpenRLHF's log lines and
our reward records read back into rollout batches, the reward file's records under concurrent calls, and the stage's
copy of inputs that are not on the shared root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from embodied_rft.config import ConfigError
from embodied_rft.data.jsonl import DataError
from embodied_rft.filtering import FilterConfig, openrlhf_keep, openrlhf_range
from embodied_rft.reward import RewardConfig
from embodied_rft.train.grpo.config import GRPOConfig, OpenRLHFConfig
from embodied_rft.train.openrlhf import cluster, logs
from tests.helpers.grpo_fixtures import gold_response, grpo_samples, sft_policy, write_jsonl

# ------------------------------------------------------------------------------------------- OpenRLHF's step lines

RAY_LINE = (
    "(PPOTrainer pid=2231, ip=10.0.0.5) INFO 12-07 14:09:54 ppo_trainer.py:551] ✨ Global step 3: "
    "{'policy_loss': -0.0123, 'actor_lr': 1e-06, 'reward': 0.75, 'kl': nan, 'ppo_kl': -inf, 'entropy_loss': None, "
    "'timing/generation': 12.5, 'dynamic_filtering_pass_rate': 400.0, 'is_filter_ratio': -2}"
)


def test_a_global_step_line_is_read_with_or_without_rays_prefix():
    step, values = logs.parse_step(RAY_LINE)
    assert step == 3
    assert values == {
        "policy_loss": -0.0123,
        "actor_lr": 1e-06,
        "reward": 0.75,
        "kl": None,  # non-finite numbers become None (JSON has no NaN)
        "ppo_kl": None,
        "entropy_loss": None,
        "timing/generation": 12.5,
        "dynamic_filtering_pass_rate": 400.0,
        "is_filter_ratio": -2,
    }
    assert logs.parse_step("INFO ppo_trainer_async.py:244] Global step 7: {'reward': 1.0}") == (7, {"reward": 1.0})
    for other in ("Sample: ['x', 0.5]", "✨ Global step 3: {'a': __import__('os')}", "Global step x: {}", ""):
        assert logs.parse_step(other) is None


def test_read_steps_orders_steps_and_keeps_a_relogged_steps_last_line(tmp_path):
    log = tmp_path / "trainer.log"
    log.write_text(
        "noise\n"
        + "✨ Global step 2: {'reward': 0.2}\n"
        + "✨ Global step 1: {'reward': 0.1}\n"
        + "✨ Global step 2: {'reward': 0.25}\n"  # a resumed job logs step 2 again
    )
    assert logs.read_steps(log) == [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.25}]


# ------------------------------------------------------------------------------------------- reward records


def _rec(t: float, prompt: str, score: float, reward: float | None = None) -> dict:
    r = reward if reward is not None else 0.5 + score
    return {"t": t, "prompt": prompt, "reward": r, "score": score, "structure": 0.125, "valid": 0.1, "match": 0.1}


def test_records_regroup_into_rollout_batches_as_openrlhf_fills_them():
    # G = 2, N_B = 2, the paper's filter on G = 2: keep 1 <= C_x <= 1 (OpenRLHF's range (0.25, 0.75))
    lo, hi = openrlhf_range(2, 1, 1)
    seq = [
        ("a", 1), ("b", 1), ("a", 0),  # a completes first: mixed -> kept
        ("b", 1),  # b: all right -> rejected
        ("c", 0), ("c", 0),  # c: all wrong -> rejected
        ("d", 0), ("d", 1),  # d: kept -> batch 1 = a, b, c, d (2 kept of 4)
        ("e", 1), ("e", 0),  # e: kept; the run ends: a partial batch
        ("f", 1),  # f never completes its group
    ]  # fmt: skip
    records = [_rec(t, p, s) for t, (p, s) in enumerate(seq)]
    batches, summary = logs.rollout_batches(records, 2, 2, lambda sc: openrlhf_keep(sc, lo, hi))
    assert [(b["groups"], b["accepted"], b["pass_rate"]) for b in batches] == [(4, 2, 0.5), (1, 1, 1.0)]
    assert batches[1]["partial"] and "partial" not in batches[0]
    assert batches[0]["samples"] == 8 and batches[0]["accuracy_full_rate"] == 0.5
    assert batches[0]["reward_mean"] == 1.0 and batches[0]["reward_structure"] == 0.125
    assert summary == {
        "samples": 11,
        "groups_seen": 5,
        "groups_accepted": 3,
        "pass_rate": 0.6,
        "batches": 2,
        "incomplete_groups": 1,
        "reward_mean": 1.0,
        "accuracy_full_rate": 0.5,
    }
    # the filter off: every N_B groups make a batch
    off, _ = logs.rollout_batches(records, 2, 2, None)
    assert [(b["groups"], b["accepted"]) for b in off] == [(2, 2), (2, 2), (1, 1)]


def test_reward_records_are_read_in_time_order_and_a_cut_last_line_is_skipped(tmp_path):
    (tmp_path / "h-1.jsonl").write_text(json.dumps(_rec(2.0, "a", 1)) + "\n" + '{"t": 5.0, "prom')
    (tmp_path / "h-2.jsonl").write_text(json.dumps(_rec(1.0, "a", 0)) + "\n")
    assert [r["t"] for r in logs.read_reward_records(tmp_path)] == [1.0, 2.0]
    (tmp_path / "h-3.jsonl").write_text('{"t": 1}\n' + json.dumps(_rec(3.0, "b", 1)) + "\n")
    with pytest.raises(DataError, match=r"h-3.jsonl:1: not a reward record"):
        logs.read_reward_records(tmp_path)


def test_the_reward_file_records_every_sample_from_concurrent_threads(tmp_path, monkeypatch):
    """OpenRLHF calls reward_func from threads of each vLLM engine actor: every call must land as one whole line."""
    from embodied_rft.train.openrlhf import reward as shim

    monkeypatch.setenv("EMBODIED_RFT_REWARD_LOG", str(tmp_path / "rewards"))
    sample = grpo_samples()[0]
    prompt = "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    right = prompt + gold_response(sample, full=True) + "<|im_end|>"

    def calls(k: int) -> None:
        for i in range(25):
            out = shim.reward_func([right if i % 2 else prompt + "??"], [f"{prompt}{k % 3}"], [sample["label"]])
            assert float(out["scores"][0]) == float(i % 2)

    threads = [threading.Thread(target=calls, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = logs.read_reward_records(tmp_path / "rewards")
    assert len(records) == 200 and len({r["prompt"] for r in records}) == 3
    assert sum(r["score"] for r in records) == 8 * 12 and all(r["reward"] == 1.5 for r in records if r["score"])
    assert len(list((tmp_path / "rewards").glob("*.jsonl"))) == 1  # one file per process


# ------------------------------------------------------------------------------------------- the entrypoint


def _entry(job_dir: Path, inputs: dict[str, str], trainer: list[str]) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        "-m",
        "embodied_rft.train.openrlhf.entry",
        "--job-dir",
        str(job_dir),
        "--submission-id",
        "s1",
    ]
    for k, v in inputs.items():
        argv += ["--input", f"{k}={v}"]
    return subprocess.run([*argv, "--env", "EMBODIED_X=7", "--", *trainer], capture_output=True, text=True, timeout=120)


def test_the_entrypoint_refuses_an_input_it_cannot_see_before_running_anything(tmp_path):
    ran = tmp_path / "ran"
    trainer = [sys.executable, "-c", f"open({str(ran)!r}, 'w')"]
    r = _entry(tmp_path, {"policy": str(tmp_path / "models" / "sft")}, trainer)
    assert r.returncode == 2 and not ran.exists() and not (tmp_path / "job.json").exists()
    line = r.stderr.strip()
    assert line.startswith(f"error: input 'policy': {tmp_path / 'models' / 'sft'} not found from host ")
    assert "grpo.openrlhf.shared_root" in line
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": [], "images": [str(tmp_path / "f.png")]}) + "\n")
    r = _entry(tmp_path, {"prompts": str(prompts)}, trainer)
    assert r.returncode == 2 and f"prompts.jsonl:1 names image {tmp_path / 'f.png'}, not found" in r.stderr
    r = _entry(tmp_path, {"policy": "models/sft"}, trainer)
    assert r.returncode == 2 and "is relative" in r.stderr
    r = _entry(tmp_path / "nowhere", {}, trainer)
    assert r.returncode == 2 and f"the job folder {tmp_path / 'nowhere'} is not found" in r.stderr
    assert not ran.exists()


def test_the_entrypoint_records_the_job_and_checks_the_model_it_wrote(tmp_path):
    out = tmp_path / "model"
    write = (
        "import os, pathlib, sys; o = pathlib.Path(sys.argv[2]); o.mkdir(); (o / 'config.json').write_text('{}'); "
        "print('✨ Global step 1: {\"reward\": 1.0}'); print('env', os.environ['EMBODIED_X'])"
    )
    if_weights = (
        "; import torch; from safetensors.torch import save_file; save_file({'w': torch.zeros(2)}, o / 'model.safetensors')"
        "; (o / 'tokenizer.json').write_text('{}')"
    )
    r = _entry(tmp_path, {"job": str(tmp_path)}, [sys.executable, "-c", write, "--ckpt.output_dir", str(out)])
    assert r.returncode == 1 and "holds no checkpoint" in r.stderr  # exit 0 without weights fails the job
    assert json.loads((tmp_path / "job.json").read_text())["returncode"] == 1
    out.rename(tmp_path / "half")
    r = _entry(
        tmp_path, {"job": str(tmp_path)}, [sys.executable, "-c", write + if_weights, "--ckpt.output_dir", str(out)]
    )
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "job.json").read_text())
    assert rec["returncode"] == 0 and rec["submission_id"] == "s1" and rec["trainer"] == sys.executable
    assert rec["openrlhf_version"] == "0.11.2" and rec["inputs"] == {"job": str(tmp_path)} and rec["finished"]
    assert "env 7" in r.stdout and logs.read_steps(tmp_path / "trainer.log") == [{"step": 1, "reward": 1.0}]
    r = _entry(tmp_path, {}, [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"])
    assert r.returncode == 3 and json.loads((tmp_path / "job.json").read_text())["returncode"] == 3
    assert (tmp_path / "trainer.log").read_text() == "boom\n"


# ------------------------------------------------------------------------------------------- the stage's plan


def _gcfg(root: Path, copy: bool) -> GRPOConfig:
    o = OpenRLHFConfig(num_nodes=1, gpus_per_node=1, vllm_num_engines=1, shared_root=str(root), copy_inputs=copy)
    return GRPOConfig(
        backend="openrlhf", group_size=4, train_batch_size=8, filter=FilterConfig(buffer_size=2), openrlhf=o
    )


def test_an_input_off_the_shared_root_is_copied_there_once(tmp_path):
    ws, shared = tmp_path / "ws", tmp_path / "shared"
    policy = ws / "models" / "sft"
    policy.parent.mkdir(parents=True)
    shutil.copytree(sft_policy(), policy)
    train = write_jsonl(ws / "data" / "decomposed" / "train.jsonl", grpo_samples())
    kw = dict(policy_dir="models/sft", policy_key="paths.sft_model", train_path="data/decomposed/train.jsonl")
    with pytest.raises(ConfigError, match=r"^grpo.openrlhf.shared_root: .* and models/ is not uploaded with the job"):
        cluster.plan_job(
            _gcfg(shared, False), RewardConfig(), **kw, image_root=None, work_dir=".cache/work", workspace=ws
        )
    plan = cluster.plan_job(
        _gcfg(shared, True), RewardConfig(), **kw, image_root=None, work_dir=".cache/work", workspace=ws
    )
    copied = plan.layout.inputs / "policy"
    assert plan.copies == {"policy": policy} and plan.inputs["policy"] == copied
    assert plan.layout.dir.is_relative_to(shared) and plan.train[
        plan.train.index("--actor.model_name_or_path") + 1
    ] == str(copied)
    cluster.prepare_job(plan)
    assert sorted(p.name for p in copied.iterdir()) == sorted(p.name for p in policy.iterdir())
    # a second attempt keeps the copy and the checkpoint, and clears what the previous attempt wrote
    (plan.layout.ckpt / "_actor").mkdir(parents=True)
    (plan.layout.model).mkdir()
    plan.layout.record.write_text("{}")
    stamp = os.stat(copied / "config.json").st_mtime_ns
    cluster.prepare_job(plan)
    assert os.stat(copied / "config.json").st_mtime_ns == stamp
    assert (plan.layout.ckpt / "_actor").is_dir() and not plan.layout.model.exists() and not plan.layout.record.exists()
    assert train.is_file()


def test_history_rows_put_each_step_beside_its_rollout_batch():
    steps = [{"step": 1, "policy_loss": 0.1, "reward": 0.9}, {"step": 2, "policy_loss": 0.2, "reward": 1.0}]
    batches = [
        {"batch": 1, "groups": 4, "accepted": 2, "pass_rate": 0.5, "samples": 8, "reward_mean": 0.9},
        {"batch": 2, "groups": 2, "accepted": 2, "pass_rate": 1.0, "samples": 4, "reward_mean": 1.0},
        {"batch": 3, "groups": 1, "accepted": 0, "pass_rate": 0.0, "samples": 2, "reward_mean": 0.0, "partial": True},
    ]
    rows = logs.history_rows(steps, batches)
    assert rows == [
        {"update": 1, "policy_loss": 0.1, "reward": 0.9, "groups": 4, "accepted": 2, "samples": 8, "reward_mean": 0.9, "filter_pass_rate": 0.5},
        {"update": 2, "policy_loss": 0.2, "reward": 1.0, "groups": 2, "accepted": 2, "samples": 4, "reward_mean": 1.0, "filter_pass_rate": 1.0},
    ]  # fmt: skip
    assert [r["update"] for r in logs.history_rows([], batches)] == [1, 2, 3]
