"""Running the local GRPO engine to the end: resume, the update loop, held-out checks, the final metrics.

:func:`run_grpo_local` is what the ``grpo`` stage calls with ``grpo.backend=local``. It builds a
:class:`~embodied_rft.train.grpo.engine.GRPOEngine`, resumes from the newest matching checkpoint in
``work_dir``, runs the greedy held-out check before training, loops rollout → filter → update until
``grpo.max_updates`` (or the prompt stream ends), checkpointing every ``grpo.save_every`` updates, runs the
held-out check again and writes the policy (atomically), ``metrics/grpo.json`` (before/after held-out metrics
and their paired gain, throughput, the share of time per phase) and the per-update plot rows.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from embodied_rft.config import as_dict
from embodied_rft.core.digest import path_identity
from embodied_rft.core.integrity import save_pretrained_atomic
from embodied_rft.core.metrics import write_metrics
from embodied_rft.core.subset import seeded_subset
from embodied_rft.data.decompose import is_recovery
from embodied_rft.data.jsonl import DataError
from embodied_rft.reward import RewardConfig
from embodied_rft.train.grpo.checkpoint import fingerprint
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.grpo.engine import GRPOEngine, Hooks, _read_samples, _RolloutStats
from embodied_rft.train.grpo.heldout import HELDOUT_HEADLINE, heldout_block, heldout_means
from embodied_rft.train.grpo.log import RunTracker
from embodied_rft.train.grpo.onpolicy import mix_prompts
from embodied_rft.train.grpo.ray_workers import LocalRollout, RayRollout
from embodied_rft.train.grpo.workers import ProcessRollout

log = logging.getLogger(__name__)


def run_grpo_local(
    cfg: GRPOConfig,
    policy_dir: str | Path,
    train_samples_path: str | Path,
    val_samples_path: str | Path,
    out_dir: str | Path,
    metrics_path: str | Path,
    plots_path: str | Path,
    work_dir: str | Path,
    *,
    reward: RewardConfig | None = None,
    hooks: Hooks | None = None,
    states: tuple[list[dict], dict[str, Any]] | None = None,
    executor: Any = None,
    anchors: Any = None,
) -> dict[str, Any]:
    """Run GRPO with the local engine; returns the metrics written to ``metrics_path``.

    ``reward`` is the ``reward:`` config section (default: the paper's reward). ``hooks`` are the engine's plug-in
    points (:data:`~embodied_rft.train.grpo.engine.Hooks`): ``on_update`` is called with an :class:`UpdateInfo` after
    every optimiser update, ``reward`` replaces the scorer.
    ``states`` (samples, summary), from :mod:`.onpolicy`, are mixed into the training prompts as
    ``cfg.onpolicy.fraction`` says. ``executor`` runs a response from its sample's state for a reward variant that
    executes it (``RewardConfig.executor``: the regrpo reward's executed success). ``anchors`` (the writer
    ``config.GROUP_MEMBERS`` gives, needed when ``cfg.anchors`` is set) writes a group's constructed members. Resumes
    from ``work_dir`` when a checkpoint of the same config and inputs is there.
    """
    reward = reward or RewardConfig()
    t_start = time.perf_counter()
    threads = torch.get_num_threads()
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        return _run(
            cfg,
            policy_dir,
            train_samples_path,
            val_samples_path,
            out_dir,
            metrics_path,
            plots_path,
            work_dir,
            reward,
            hooks,
            t_start,
            states,
            executor,
            anchors,
        )
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(was_deterministic)


def _run(
    cfg: GRPOConfig,
    policy_dir: str | Path,
    train_samples_path: str | Path,
    val_samples_path: str | Path,
    out_dir: str | Path,
    metrics_path: str | Path,
    plots_path: str | Path,
    work_dir: str | Path,
    reward: RewardConfig,
    hooks: Hooks | None,
    t_start: float,
    states: tuple[list[dict], dict[str, Any]] | None = None,
    executor: Any = None,
    anchors: Any = None,
) -> dict[str, Any]:
    train = select_decomposed(_read_samples(train_samples_path, "train"), cfg.decomposed_prompts, train_samples_path)
    train = seeded_subset(train, cfg.max_train_prompts, cfg.seed)
    if states is not None:
        train = mix_prompts(train, states[0], cfg.onpolicy.fraction, cfg.seed)
    val = (
        seeded_subset(_read_samples(val_samples_path, "val"), cfg.eval_max_samples, cfg.seed)
        if cfg.eval_max_samples
        else []
    )
    fp = run_key(
        cfg,
        reward,
        path_identity(policy_dir),
        path_identity(train_samples_path),
        states[0] if states is not None else None,
    )
    eng = GRPOEngine(
        cfg, policy_dir, train, val, work_dir, reward, Path(train_samples_path).parent, fp, hooks, executor, anchors
    )
    resumed = eng.resume()
    if cfg.rollout_processes > 0:  # the pool also decodes the held-out checks, so it starts first
        eng.rollout = ProcessRollout(eng.model, eng.io.eos_ids, cfg.rollout_processes, max_rows=cfg.sampler_max_rows)
        eng.eval_sampler = eng.rollout.as_sampler()
    elif cfg.num_rollout_workers > 0:
        eng.rollout = RayRollout(
            cfg.num_rollout_workers, eng.policy_dir, cfg.max_prompt_tokens, eng.model, cfg.ray_num_cpus, cfg.sampler
        )
    else:
        eng.rollout = LocalRollout(eng.model, eng.io, eng.device, eng.sampler)
    try:
        return _loop(cfg, eng, resumed, work_dir, out_dir, metrics_path, plots_path, t_start, states, len(train))
    finally:
        eng.rollout.close()


def _loop(
    cfg: GRPOConfig,
    eng: GRPOEngine,
    resumed: bool,
    work_dir: str | Path,
    out_dir: str | Path,
    metrics_path: str | Path,
    plots_path: str | Path,
    t_start: float,
    states: tuple[list[dict], dict[str, Any]] | None,
    n_train: int,
) -> dict[str, Any]:
    from tqdm import tqdm

    st = eng.state
    if cfg.eval_max_samples and st.eval_before is None:
        st.eval_before = eng.evaluate()
        log.info("held-out before GRPO: %s", heldout_means(st.eval_before))
    tracker = RunTracker(
        cfg.report_to, cfg.wandb_mode, cfg.wandb_project, Path(work_dir), as_dict(cfg), st.history, st.wandb_id
    )
    st.wandb_id = tracker.run_id
    pbar = tqdm(total=eng.planned_updates, initial=st.updates, desc="grpo", unit="update", dynamic_ncols=True)
    stop_reason = "max_updates"
    try:
        stats = _RolloutStats(eng.log_reflection)
        while not (cfg.max_updates and st.updates >= cfg.max_updates):
            if eng.buffer.should_stop:
                stop_reason = "filter_stalled"
                break
            if not eng.rollout_step(stats):
                stop_reason = "episodes_done"
                last = eng.buffer.finish()
                if last is not None:
                    eng.train_on(last, stats.row(), tracker, pbar)
                break
            if not eng.buffer.ready():
                continue
            row = stats.row()  # the rollouts that filled this buffer (and any taken with it)
            stats = _RolloutStats(eng.log_reflection)
            while eng.buffer.ready() and not (cfg.max_updates and st.updates >= cfg.max_updates):
                eng.train_on(eng.buffer.take(), row, tracker, pbar)
            eng.rollout.refresh(eng.model)
            if cfg.save_every and st.updates - st.last_saved >= cfg.save_every:
                eng.checkpoint()
    finally:
        pbar.close()
    if st.updates == 0:
        log.warning(
            "GRPO made no update (%s): the filter kept %d of %d groups; the policy is saved unchanged",
            stop_reason,
            eng.buffer.stats.accepted,
            eng.buffer.stats.seen,
        )
    eval_after = eng.evaluate() if cfg.eval_max_samples else None
    if eval_after is not None:
        log.info("held-out after GRPO: %s", heldout_means(eval_after))
    save_pretrained_atomic(eng.model, eng.tokenizer, out_dir)
    if cfg.save_every:
        eng.checkpoint()  # the finished state: a rerun with the same inputs resumes straight to the end
    metrics = _metrics(cfg, eng, stop_reason, resumed, eval_after, time.perf_counter() - t_start)
    if states is not None:
        metrics["onpolicy"] = {**states[1], "prompts": n_train, "fraction": cfg.onpolicy.fraction}
    write_metrics(metrics_path, metrics, GRPO_HEADLINE)
    tracker.write_plots(plots_path)
    tracker.summary({k: v for k, v in metrics["final"].items() if isinstance(v, (int, float))})
    tracker.close()
    return metrics


# what metrics/grpo.json shows (the rest — config, per-update history, counters, seconds — is in
# metrics/grpo.details.json)
GRPO_HEADLINE = {
    # local | openrlhf (train/openrlhf/logs.py's headline), so no number is credited to the wrong engine
    "backend": True,
    "updates": True,
    "heldout": HELDOUT_HEADLINE,
    "filter": {"pass_rate": True},
    "throughput": {"generated_tokens_per_s": True},
    # where the stage's time went: generate, reward, logprob (old-policy pass; 0 with the fast sampler), update,
    # eval (held-out checks), checkpoint
    "time_share": True,
}


def select_decomposed(samples: list[dict], which: str, where: object) -> list[dict]:
    """The decomposed train samples GRPO prompts with (``grpo.decomposed_prompts``): all, or only the recovery
    samples (ids ending ``:recover``; with ``decompose.rot`` the RoT states)."""
    if which == "all":
        return samples
    kept = [s for s in samples if is_recovery(s)]
    if not kept:
        raise DataError(
            f"{where}: no recovery samples for grpo.decomposed_prompts=recovery; set decompose.recovery_per_episode"
        )
    return kept


def run_key(cfg: GRPOConfig, reward: RewardConfig, policy: Any, train: Any, states: list[dict] | None) -> str:
    """The digest of a GRPO run's inputs: config, reward, the policy's and train samples' identities
    (``core.digest.path_identity``) and the on-policy states mixed in. It names the local engine's checkpoints and
    the cluster job's folder (``train/openrlhf/cluster.py``), so a rerun with the same inputs resumes either."""
    return fingerprint(
        {
            "config": config_identity(cfg),
            "reward": reward.identity(),
            "policy": policy,
            "train": train,
            "states": fingerprint([(s["sample_id"], s["label"]) for s in states]) if states is not None else None,
        }
    )


def config_identity(cfg: GRPOConfig) -> dict:
    """``cfg`` for the checkpoint fingerprint, without the ReGRPO prompt options at their defaults, so runs from
    before they existed still resume."""
    d = as_dict(cfg)
    if d.get("decomposed_prompts") == "all":
        d.pop("decomposed_prompts")
    if not d["onpolicy"].get("failed_only"):
        d["onpolicy"].pop("failed_only", None)
    if not d.get("anchors"):
        d.pop("anchors", None)
    return d


def _metrics(
    cfg: GRPOConfig, eng: GRPOEngine, stop_reason: str, resumed: bool, eval_after: dict | None, wall: float
) -> dict:
    st = eng.state
    # prompt by prompt, with a bootstrap interval and exact tests
    heldout = heldout_block(st.eval_before, eval_after, cfg.seed)
    gen_s = st.seconds.get("generate", 0.0)
    total_s = sum(st.seconds.values())
    final = dict(st.history[-1]) if st.history else {}
    return {
        "backend": "local",
        "stop_reason": stop_reason,
        "resumed": resumed,
        "updates": st.updates,
        "buffers": st.buffers,
        "episodes_done": st.episode,
        "heldout": heldout,
        "final": final,
        "filter": eng.buffer.stats.as_dict(),
        "counters": {
            "prompts_sampled": st.prompts_sampled,
            "responses_sampled": st.responses_sampled,
            "response_tokens": st.response_tokens,
            "prompts_truncated": st.prompts_truncated,
            "groups_trained": st.groups_trained,
            "zero_adv_groups_trained": st.zero_adv_groups_trained,
        }
        | ({"anchored_groups": st.anchored_groups} if cfg.anchors else {}),
        "time_s": {k: round(v, 3) for k, v in st.seconds.items()} | {"wall_this_process": round(wall, 3)},
        # each phase's share of the engine's timed seconds (generate, reward, logprob, update, eval, checkpoint)
        "time_share": {k: round(v / total_s, 4) for k, v in st.seconds.items()} if total_s else {},
        "throughput": {
            "responses_per_s": round(st.responses_sampled / total_s, 4) if total_s else 0.0,
            "generated_tokens_per_s": round(st.response_tokens / gen_s, 2) if gen_s else 0.0,
            # rows decoded per generated token: 1.0 = no finished row was decoded (fast sampler only)
            "row_steps_per_token": round(st.row_steps / st.response_tokens, 4)
            if st.row_steps and st.response_tokens
            else None,
        },
        "sampler": "fast" if eng.sampler is not None else "hf",
        "update_forward": "shared_prompt" if eng.shared_lm is not None else "padded",
        "config": as_dict(cfg),
        "history": st.history,
    }


__all__ = ["run_grpo_local"]
