"""The `grpo` stage's logic: models/sft + data/decomposed -> models/grpo, metrics/grpo.json, plots/grpo.csv.

`grpo.backend=local` runs the embedded engine here (CPU or one GPU). With `grpo.onpolicy.episodes > 0` the
initial policy first plays that many training episodes (data/episodes/train.jsonl) and the states it reaches
join the prompts (:mod:`.onpolicy`; both backends). `grpo.backend=openrlhf` runs OpenRLHF as a Ray job on the
cluster and writes the same outputs from what the job brought back (:mod:`embodied_rft.train.openrlhf.cluster`).
"""

from pathlib import Path

from embodied_rft.config import as_dict, build
from embodied_rft.core.digest import path_identity
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.evaluate.config import EpisodeLimits
from embodied_rft.reward import RewardConfig
from embodied_rft.train.grpo.checkpoint import fingerprint
from embodied_rft.train.grpo.config import GROUP_MEMBERS, GRPOConfig
from embodied_rft.train.grpo.driver import run_grpo_local
from embodied_rft.train.grpo.onpolicy import (
    choose_episodes,
    collect_with_model,
    load_or_collect,
    select_states,
)
from embodied_rft.train.openrlhf.cluster import OpenRLHFStage


def run_grpo_stage(ctx) -> None:
    """The ``grpo`` stage for a :func:`~embodied_rft.pipeline.stage_context` (its ``grpo``, ``reward`` and
    ``prompt`` sections and paths)."""
    p = ctx.paths
    gcfg = build(GRPOConfig, ctx.section("grpo"), "grpo")
    reward = build(RewardConfig, ctx.section("reward"), "reward")
    train, val = Path(p.decomposed_dir) / "train.jsonl", Path(p.decomposed_dir) / "val.jsonl"
    policy_dir = getattr(p, f"{gcfg.init}_model")
    # the cluster path checks its inputs before any work (the on-policy play included)
    cluster = OpenRLHFStage(gcfg, reward, p, f"paths.{gcfg.init}_model") if gcfg.backend == "openrlhf" else None
    states = _onpolicy_states(ctx, gcfg, policy_dir) if gcfg.onpolicy.episodes else None
    if states is not None:
        states = select_states(states, gcfg.onpolicy.failed_only)
    if cluster is None:
        run_grpo_local(
            gcfg,
            policy_dir,
            train,
            val,
            p.grpo_model,
            p.metrics("grpo"),
            p.plot("grpo.csv"),
            Path(p.work_dir) / "grpo",
            reward=reward,
            states=states,
            executor=reward.executor(Path(p.episodes_dir) / "train.jsonl"),
            anchors=_anchors(ctx, gcfg),
        )
        return
    cluster.run(states)


def _anchors(ctx, gcfg: GRPOConfig):
    """The writer of a group's constructed members (``grpo.anchors``, ``config.GROUP_MEMBERS``), None when the
    option is off."""
    return GROUP_MEMBERS.lookup("anchors", "grpo.anchors")(gcfg.anchors, ctx, gcfg) if gcfg.anchors else None


def _onpolicy_states(ctx, gcfg: GRPOConfig, policy_dir: str) -> tuple[list[dict], dict]:
    """The states the initial policy reaches in ``grpo.onpolicy.episodes`` training episodes (greedy, EB's
    limits), collected once per inputs and kept in the work dir so a resumed run reuses them."""
    p, oc = ctx.paths, gcfg.onpolicy
    prompt_cfg = build(PromptConfig, ctx.section("prompt"), "prompt")
    episodes_path = Path(p.episodes_dir) / "train.jsonl"
    limits = EpisodeLimits()
    max_new_tokens = oc.max_new_tokens or gcfg.max_new_tokens
    key = fingerprint(
        {
            "onpolicy": [oc.episodes, oc.batch_size, max_new_tokens, oc.seed],
            "prompt": as_dict(prompt_cfg),
            "limits": [limits.max_env_steps, limits.max_invalid_actions, limits.max_planner_calls],
            "policy": path_identity(policy_dir),
            "episodes": path_identity(episodes_path),
        }
    )

    def collect() -> tuple[list[dict], dict]:
        if gcfg.num_threads:
            import torch

            torch.set_num_threads(gcfg.num_threads)
        episodes = choose_episodes(episodes_path, oc.episodes, oc.seed)
        return collect_with_model(
            policy_dir,
            episodes,
            prompt_cfg,
            limits,
            oc.batch_size,
            max_new_tokens,
            gcfg.seed,
            inflight=oc.inflight,
            workers=oc.workers,
            fast=gcfg.sampler != "hf",
        )

    return load_or_collect(Path(p.work_dir) / "grpo_states" / "states.jsonl", key, collect)
