"""Rollout workers of the local engine as Ray actors (grpo_ray), on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from embodied_rft.models import load_model
from embodied_rft.train.grpo.driver import run_grpo_local
from embodied_rft.train.grpo.ray_workers import RayRollout
from embodied_rft.train.grpo.rollout import PolicyIO, make_sampler, sample_groups
from tests.helpers.grpo import tiny_cfg
from tests.helpers.grpo_fixtures import grpo_samples, sft_policy, write_jsonl

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow  # starting a local Ray cluster takes 20-40 s on a 2-core machine


@pytest.fixture(scope="module")
def local_ray():
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("sampler", ["fast", "hf"])
def test_actor_samples_what_the_trainer_would(local_ray, sampler):
    torch.set_num_threads(1)
    model, tok = load_model(sft_policy(), for_training=True)
    io = PolicyIO(tok, 256)
    io.add_model_eos(model)
    prompts = [io.encode(s, i) for i, s in enumerate(grpo_samples()[:2])]
    gen = dict(temperature=1.0, top_p=1.0, max_new_tokens=40)
    local_sampler = make_sampler(model, sampler)

    def local():  # what the trainer's own process samples for chunk 0 (seeded seed * 1009)
        return sample_groups(model, io, prompts, 3, sampler=local_sampler, seed=5 * 1009, **gen)

    rollout = RayRollout(1, str(sft_policy()), 256, model, num_cpus=2, sampler=sampler)
    try:
        # one actor takes the whole call as chunk 0
        remote = rollout.sample(prompts, 3, seed=5, **gen)
        want = local()
        assert remote.responses == want.responses
        assert (remote.logprobs is None) == (want.logprobs is None) == (sampler == "hf")
        # after an update the actor must sample from the new weights, not the checkpoint it loaded
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        stale = remote.responses
        rollout.refresh(model)
        fresh = rollout.sample(prompts, 3, seed=5, **gen).responses
        assert fresh == local().responses
        assert fresh != stale
        assert rollout.version == 2
    finally:
        rollout.close()


def test_engine_with_one_rollout_worker(local_ray, tmp_path: Path):
    data = write_jsonl(tmp_path / "d" / "train.jsonl", grpo_samples())
    cfg = tiny_cfg(eval_max_samples=0, num_rollout_workers=1)
    m = run_grpo_local(
        cfg, sft_policy(), data, data, tmp_path / "out", tmp_path / "m.json", tmp_path / "p.csv", tmp_path / "w"
    )
    assert m["updates"] == 4 and m["buffers"] == 2
    assert m["counters"]["zero_adv_groups_trained"] == 0
    assert m["history"][0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
