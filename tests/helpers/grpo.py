"""The tiny local-GRPO setup shared by tests/train/test_grpo_local.py, test_grpo_fast.py and test_grpo_states.py:
a config, one run, the weights of a saved policy, and a run killed at update 3 then resumed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from embodied_rft.filtering import FilterConfig
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.grpo.driver import run_grpo_local
from tests.helpers.grpo_fixtures import sft_policy


def tiny_cfg(**kw) -> GRPOConfig:
    """4 prompts, G = 4, N_B = 2 groups, K_2 = 2 updates of 4 sequences each: a few seconds per run."""
    base = dict(
        group_size=4,
        temperature=1.0,
        max_new_tokens=80,
        max_prompt_tokens=256,
        rollout_batch_size=2,
        lr=1e-4,
        lr_scheduler="constant_with_warmup",
        warmup_ratio=0.0,
        filter=FilterConfig(buffer_size=2, updates_per_buffer=2),
        train_batch_size=4,
        micro_batch_size=4,
        max_updates=4,
        num_episodes=20,
        save_every=0,
        report_to=(),
        eval_max_samples=4,
        eval_batch_size=4,
        num_threads=1,
    )
    base.update(kw)
    return GRPOConfig(**base)


def run(cfg: GRPOConfig, policy: Path, data: Path, root: Path, **kw):
    return run_grpo_local(
        cfg, policy, data, data, root / "out", root / "metrics.json", root / "plots.csv", root / "work", **kw
    )


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from embodied_rft.models import load_model

    model, _ = load_model(path)
    return {k: v.clone() for k, v in model.state_dict().items()}


def kill_at_3(cfg: GRPOConfig, data: Path, tmp_path: Path) -> tuple[dict, Path]:
    """The uninterrupted run, and the same run killed at update 3 (checkpoint every 2): (ref, root of the killed)."""
    ref = run(cfg, sft_policy(), data, tmp_path / "ref")

    class Killed(RuntimeError):
        pass

    def at_3(info):
        if info.update == 3:
            raise Killed

    root = tmp_path / "killed"
    with pytest.raises(Killed):
        run(cfg, sft_policy(), data, root, hooks={"on_update": at_3})
    assert (root / "work" / "latest").read_text().strip() == "ckpt-0000002"
    return ref, root


def kill_at_3_and_resume(cfg: GRPOConfig, data: Path, tmp_path: Path) -> tuple[dict, dict, Path]:
    """:func:`kill_at_3`, then the killed run rerun: (ref, again, root)."""
    ref, root = kill_at_3(cfg, data, tmp_path)
    return ref, run(cfg, sft_policy(), data, root), root
