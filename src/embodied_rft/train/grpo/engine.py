"""The embedded GRPO engine (``grpo.backend=local``): torch on CPU or one GPU.

Inputs: a policy checkpoint (``models/sft``: a causal LM + tokenizer, or a VLM + processor, loaded with
``embodied_rft.models.load_model``), decomposed train/val samples (``data/decomposed/{train,val}.jsonl``:
chat ``prompt``, JSON ``label``, optional ``image``), a :class:`GRPOConfig`. Outputs: the trained policy
(``out_dir``, written atomically, tokenizer/processor included), ``metrics_path`` (final values, held-out
before/after, filter counters, timings and the per-update ``history``), ``plots_path`` (one row per update
for ``dvc plots``), optional W&B run, resumable checkpoints in ``work_dir``.

The loop (paper §3.2-3.3, docs/facts.md §1.5-1.6):
1. take the next ``rollout_batch_size`` prompts (a fixed-seed shuffle per episode; with ``rollout_fill``, as
   many as should fill the buffer at the acceptance rate so far) and sample G responses each (``ray_workers``:
   in-process or Ray actors; ``workers``: worker processes on shared weights);
2. score every response with ``embodied_rft.reward`` and offer each group to the online filter
   (``embodied_rft.filtering.GroupBuffer``: keep iff lower ≤ C_x ≤ upper; zero-variance groups dropped);
   an accepted group gets its sampling-time log-probs (and the reference's when β > 0) right away — no
   update happens between sampling and that forward pass, so they are exactly π_old;
3. when N_B groups are held, run K_2 updates on them (``loss``: group-normalised advantages, clipped
   ratio, k3 KL, token- or sequence-mean aggregation, grad clipping, AdamW), then refresh rollout workers
   and checkpoint when due;
4. stop at ``max_updates`` or when ``num_episodes`` passes over the prompts are done (a partial buffer is
   then flushed or dropped per ``filter.on_stall``), or when the filter stalls with nothing to train on.
Greedy held-out evaluation runs before and after (``heldout``).

Departures from the paper (engine details the paper does not fix, or CPU necessities): transformers
``generate`` instead of vLLM; the optimiser walks the buffer in ``train_batch_size`` minibatches for exactly
K_2 updates (OpenRLHF: max_epochs whole passes — the same thing when K_2 is a multiple of
N_B·G / train_batch_size); the LR schedule is planned over ``max_updates`` when it is set.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import get_scheduler

from embodied_rft.core.vision import freeze_vision, is_vision_model
from embodied_rft.filtering import BufferBatch, GroupBuffer
from embodied_rft.reward import BoundReward, RewardConfig
from embodied_rft.schema import read_samples
from embodied_rft.train.grpo.checkpoint import (
    EngineState,
    load_checkpoint,
    load_weights,
    register_state_types,
    save_checkpoint,
    set_rng_state,
)
from embodied_rft.train.grpo.config import METERS, GRPOConfig
from embodied_rft.train.grpo.heldout import evaluate_greedy
from embodied_rft.train.grpo.log import RolloutStats as _RolloutStats
from embodied_rft.train.grpo.log import RunTracker
from embodied_rft.train.grpo.loss import group_advantages
from embodied_rft.train.grpo.rollout import EncodedPrompt, PolicyIO, make_sampler, sequence_logprobs
from embodied_rft.train.grpo.update import Group, shared_prompt_lm, update_step

log = logging.getLogger(__name__)

# the buffer holds groups of encoded prompts: the checkpoint's pickle-free loader may build these (checkpoint.py)
register_state_types(Group, EncodedPrompt)


@dataclass
class UpdateInfo:
    """What one optimiser update trained on (passed to ``hooks['on_update']``)."""

    update: int
    groups: tuple[Group, ...]  # the buffer's groups
    advantages: torch.Tensor  # [n_groups, G]
    rows: list[tuple[int, int]]  # (group, response) pairs of this update's minibatch
    stats: dict[str, float] = field(default_factory=dict)


# Plug-in points of the engine, by name: ``on_update(UpdateInfo)`` after every optimiser update; ``reward(engine)``
# returns the scorer of the rollouts and held-out checks in place of the ``reward:`` config's (an object with
# ``score(response_text, label, sample) -> RewardBreakdown``), e.g. a reward served elsewhere.
Hooks = dict[str, Callable[..., Any]]


def _read_samples(path: str | Path, what: str) -> list[dict]:
    # checked up front (fields, and every image file present): a missing frame must not surface as a
    # FileNotFoundError hours into training, when the rollout first reaches that prompt
    return read_samples(path, what=what)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@contextmanager
def _timed(state: EngineState, phase: str):
    t0 = time.perf_counter()
    try:
        yield
    finally:
        state.seconds[phase] = state.seconds.get(phase, 0.0) + time.perf_counter() - t0


class GRPOEngine:
    """The local engine's state and steps; :func:`~embodied_rft.train.grpo.driver.run_grpo_local` drives it."""

    def __init__(
        self,
        cfg: GRPOConfig,
        policy_dir: str | Path,
        train_samples: list[dict],
        val_samples: list[dict],
        work_dir: str | Path,
        reward: RewardConfig,
        image_root: Path,
        fp: str,
        hooks: Hooks | None = None,
        executor: Any = None,
        anchors: Any = None,
    ) -> None:
        from embodied_rft.models import load_model

        self.cfg, self.work_dir, self.fp = cfg, Path(work_dir), fp
        self.hooks = hooks or {}
        self.policy_dir = str(policy_dir)
        self.device = _device(cfg.device)
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        model, tok = load_model(self.policy_dir, for_training=True)
        dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
        self.model = model.to(self.device, dtype)
        self.tokenizer = tok
        self.vision = is_vision_model(self.model)
        self.io = PolicyIO(tok, cfg.max_prompt_tokens, image_root)
        self.io.add_model_eos(self.model)
        # an extension's variant may count the policy's tokens or execute a response (regrpo: docs/regrpo.md §5)
        self.reward = BoundReward(reward, self.count_tokens, executor)
        if "reward" in self.hooks:
            self.reward = self.hooks["reward"](self)
        # a meter of each response (config.METERS), turned on by the reward variant or a field of the train samples
        names = [reward.variant, *sorted({k for s in train_samples for k in s})]
        meter = next((m for m in (METERS.find(n, "grpo") for n in names) if m is not None), None)
        self.meter = meter(self.count_tokens) if meter is not None else None
        self.log_reflection = self.meter is not None
        if self.vision and cfg.freeze_vision:
            log.info("froze %d vision parameters", freeze_vision(self.model))
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
            if hasattr(self.model.config, "use_cache"):
                self.model.config.use_cache = True  # generation still uses the KV cache
        self.model.train()
        self.ref = None
        if cfg.kl_coef > 0:  # β = 0 (the paper): no reference model at all
            ref, _ = load_model(self.policy_dir, for_training=False)
            self.ref = ref.to(self.device, dtype).eval().requires_grad_(False)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.adam_betas, weight_decay=cfg.weight_decay)
        self.planned_updates = self._planned_updates(len(train_samples))
        # the same factory and arguments OpenRLHF's DeepSpeed strategy uses, so both engines share a schedule
        self.scheduler = get_scheduler(
            cfg.lr_scheduler,
            self.optimizer,
            num_warmup_steps=math.ceil(cfg.warmup_ratio * self.planned_updates),
            num_training_steps=self.planned_updates,
            scheduler_specific_kwargs={"min_lr_rate": cfg.min_lr_ratio}
            if cfg.lr_scheduler == "cosine_with_min_lr"
            else {},
        )
        self.train_samples = train_samples
        self._encoded: dict[int, EncodedPrompt] = {}
        # grpo.anchors: a group's constructed members (config.GROUP_MEMBERS), token ids per prompt
        self.anchors = anchors if cfg.anchors else None
        if cfg.anchors and anchors is None:
            raise ValueError("grpo.anchors is set but no writer of the constructed members was given to the engine")
        self._anchor_ids: dict[int, list[list[int]]] = {}
        self.val_prompts = [self.io.encode(s, i) for i, s in enumerate(val_samples)]
        self.state = EngineState()
        self.buffer: GroupBuffer[Group] = GroupBuffer(cfg.filter, cfg.group_size)
        self.rollout: Any = None
        # the fast sampler (held-out evaluation, in-process rollouts) and the shared-prompt update forward
        self.sampler = make_sampler(self.model, cfg.sampler, cfg.sampler_max_rows)
        self.eval_sampler: Any = self.sampler  # the worker pool's, when rollouts run in processes
        self.shared_lm = shared_prompt_lm(self.model, cfg.update_forward)
        log.info(
            "sampler: %s; update forward: %s",
            "fast" if self.sampler else "hf (generate)",
            "shared_prompt" if self.shared_lm else "padded",
        )

    # ---------------------------------------------------------------- bookkeeping
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in the policy's tokenizer (e.g. the regrpo reward's reflection cost)."""
        return len(self.io.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _planned_updates(self, n_prompts: int) -> int:
        cfg = self.cfg
        if cfg.max_updates:
            return cfg.max_updates
        buffers = max(1, cfg.num_episodes * n_prompts // cfg.filter.buffer_size)
        return buffers * cfg.filter.updates_per_buffer

    def resume(self) -> bool:
        found = load_checkpoint(self.work_dir, self.fp)
        if found is None:
            return False
        folder, blob = found
        load_weights(folder, self.model)
        self.optimizer.load_state_dict(blob["optimizer"])
        self.scheduler.load_state_dict(blob["scheduler"])
        self.state = blob["state"]
        self.buffer = blob["buffer"]
        set_rng_state(blob["rng"])
        log.info(
            "resumed from %s at update %d (episode %d, prompt %d)",
            folder,
            self.state.updates,
            self.state.episode,
            self.state.cursor,
        )
        return True

    def checkpoint(self) -> None:
        with _timed(self.state, "checkpoint"):
            self.state.last_saved = self.state.updates
            save_checkpoint(self.work_dir, self.fp, self.model, self.optimizer, self.scheduler, self.state, self.buffer)

    def _order(self, episode: int) -> list[int]:
        order = list(range(len(self.train_samples)))
        random.Random(self.cfg.seed * 7919 + episode).shuffle(order)
        return order

    def call_size(self) -> int:
        """Prompts for the next generation call: ``rollout_batch_size``, or with ``rollout_fill`` the groups the
        buffer still misses over the acceptance rate seen so far (a pure function of the checkpointed buffer,
        so a resumed run makes the same calls)."""
        cfg = self.cfg
        if not cfg.rollout_fill:
            return cfg.rollout_batch_size
        missing = max(1, cfg.filter.buffer_size - len(self.buffer))
        s = self.buffer.stats
        rate = (s.accepted + 1) / (s.seen + 2)
        return max(cfg.rollout_batch_size, min(8 * cfg.filter.buffer_size, math.ceil(missing / rate)))

    def next_prompts(self) -> list[EncodedPrompt]:
        """The next rollout batch of prompts (fewer at the end of the last episode; [] when done)."""
        st, out = self.state, []
        size = self.call_size()
        while len(out) < size and st.episode < self.cfg.num_episodes:
            order = self._order(st.episode)
            while st.cursor < len(order) and len(out) < size:
                i = order[st.cursor]
                st.cursor += 1
                if i not in self._encoded:
                    enc = self.io.encode(self.train_samples[i], i)
                    st.prompts_truncated += int(enc.truncated)
                    self._encoded[i] = enc
                out.append(self._encoded[i])
            if st.cursor >= len(order):
                st.episode, st.cursor = st.episode + 1, 0
        if not out:
            st.exhausted = True
        return out

    # ---------------------------------------------------------------- rollout
    def rollout_step(self, stats: _RolloutStats) -> bool:
        """Sample, score and filter one batch of prompts; False when the prompts are used up."""
        cfg, st = self.cfg, self.state
        prompts = self.next_prompts()
        if not prompts:
            return False
        with _timed(st, "generate"):
            rollout = self.rollout.sample(
                prompts,
                cfg.group_size,
                seed=cfg.seed * 1_000_003 + st.calls,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
            )
        st.calls += 1
        st.row_steps += rollout.row_steps
        accepted: list[Group] = []
        eos = set(self.io.eos_ids)
        anchored: dict[int, int] = {}  # id(group) -> its constructed members (the last ones)
        with _timed(st, "reward"):
            for j, (p, responses) in enumerate(zip(prompts, rollout.responses, strict=True)):
                sample = self.train_samples[p.index]
                k = self._anchor_count(sample)
                # the last k samples make way for the constructed members (sampled ones stay first); the sampler
                # still decoded them: one call samples n per prompt, and the switch is off by default
                if k:
                    responses = [*responses[: len(responses) - k], *self._anchors_for(sample, p.index)]
                texts = [self.io.decode(r) for r in responses]
                parts = [self.reward.score(t, p.label, sample) for t in texts]
                n_sampled = len(responses) - k
                for r, b, t in zip(responses[:n_sampled], parts, texts):
                    measured = self.meter(sample, t) if self.meter is not None else (0, True, False)
                    stats.add(b, len(r), not r or r[-1] not in eos, *measured)
                    st.response_tokens += len(r)
                group = Group(p, responses, [b.total for b in parts], [b.accuracy_full for b in parts])
                if rollout.logprobs is not None:  # the sampler's own log-probs: exactly π_old, no second pass
                    group.old_logp = list(rollout.logprobs[j])
                st.prompts_sampled += 1
                st.responses_sampled += n_sampled
                st.anchored_groups += int(k > 0)
                if self.buffer.offer(group, group.accuracy_full, group.rewards):
                    accepted.append(group)
                    if k:
                        anchored[id(group)] = k
        need_old = rollout.logprobs is None
        if anchored and not need_old:
            # the constructed members were not sampled: their π_old comes from a forward of the same weights
            with _timed(st, "logprob"):
                rows = [(g.prompt, r) for g in accepted if id(g) in anchored for r in g.responses[-anchored[id(g)] :]]
                lp = iter(
                    sequence_logprobs(self.model, rows, self.io, cfg.temperature, cfg.micro_batch_size, self.device)
                )
                for g in accepted:
                    k = anchored.get(id(g), 0)
                    if k and g.old_logp is not None:
                        g.old_logp[-k:] = [next(lp) for _ in range(k)]
        if accepted and (need_old or self.ref is not None):
            with _timed(st, "logprob"):
                rows = [(g.prompt, r) for g in accepted for r in g.responses]
                mb = cfg.micro_batch_size
                old = (
                    sequence_logprobs(self.model, rows, self.io, cfg.temperature, mb, self.device) if need_old else None
                )
                ref = (
                    sequence_logprobs(self.ref, rows, self.io, cfg.temperature, mb, self.device)
                    if self.ref is not None
                    else None
                )
            G = cfg.group_size
            for j, g in enumerate(accepted):
                if old is not None:
                    g.old_logp = old[j * G : (j + 1) * G]
                g.ref_logp = ref[j * G : (j + 1) * G] if ref is not None else None
        return True

    def _anchor_count(self, sample: dict) -> int:
        return len(self.cfg.anchors) if self.anchors is not None and self.anchors.applies(sample) else 0

    def _anchors_for(self, sample: dict, index: int) -> list[list[int]]:
        """The constructed members' token ids for train prompt ``index`` (``grpo.anchors``; built once)."""
        ids = self._anchor_ids.get(index)
        if ids is None:
            ids = [self.io.response_ids(sample, text) for _, text in self.anchors.answers(sample)]
            self._anchor_ids[index] = ids
        return ids

    # ---------------------------------------------------------------- optimisation
    def train_on(self, batch: BufferBatch, rollout_row: dict[str, float], tracker: RunTracker, pbar: Any) -> None:
        """K_2 updates on one buffer (fewer if max_updates is reached first)."""
        cfg, st = self.cfg, self.state
        groups = batch.groups
        G = cfg.group_size
        adv = group_advantages(torch.tensor([g.rewards for g in groups]), cfg.adv_eps, cfg.advantage)
        zero = [bool((adv[i].abs() < 1e-8).all()) for i in range(len(groups))]
        st.groups_trained += len(groups)
        st.zero_adv_groups_trained += sum(zero)
        rows = [(gi, ri) for gi in range(len(groups)) for ri in range(G)]
        tb = min(cfg.update_batch, len(rows))
        rng = random.Random(cfg.seed * 104729 + st.buffers)
        order: list[tuple[int, int]] = []
        buf_row = {
            "buffer_reward_mean": float(torch.tensor([g.rewards for g in groups]).mean()),
            "buffer_accuracy_full_rate": float(torch.tensor([g.accuracy_full for g in groups]).mean()),
            "buffer_groups": len(groups),
        }
        for _ in range(batch.updates):
            if cfg.max_updates and st.updates >= cfg.max_updates:
                break
            if len(order) < tb:  # a new shuffled pass over the buffer
                if cfg.minibatch == "groups":
                    gs = list(range(len(groups)))
                    rng.shuffle(gs)
                    fresh = [(gi, ri) for gi in gs for ri in range(G)]
                else:
                    fresh = rows[:]
                    rng.shuffle(fresh)
                order.extend(fresh)
            mb, order = order[:tb], order[tb:]
            with _timed(st, "update"):
                stats = self._update(groups, adv, mb)
            st.updates += 1
            info = UpdateInfo(st.updates, groups, adv, mb, stats)
            if "on_update" in self.hooks:
                self.hooks["on_update"](info)
            f = self.buffer.stats
            row = {
                "update": st.updates,
                "buffer": st.buffers + 1,
                "episode": st.episode,
                **stats,
                **rollout_row,
                **buf_row,
                "filter_pass_rate": f.pass_rate,
                "filter_seen": f.seen,
                "rejected_all_wrong": f.rejected_all_wrong,
                "rejected_all_right": f.rejected_all_right,
                "rejected_other": f.rejected_other,
                "rejected_zero_variance": f.rejected_zero_variance,
                "zero_adv_groups_trained": st.zero_adv_groups_trained,
                "elapsed_s": sum(st.seconds.values()),
            }
            tracker.log(row)
            pbar.update(1)
            pbar.set_postfix(
                {
                    "reward": f"{rollout_row['reward_mean']:.3f}",
                    "acc": f"{rollout_row['accuracy_full_rate']:.2f}",
                    "pass": f"{f.pass_rate:.2f}",
                    "kl": f"{stats['approx_kl']:.4f}",
                }
            )
        st.buffers += 1

    def _update(self, groups: tuple[Group, ...], adv: torch.Tensor, mb: list[tuple[int, int]]) -> dict[str, float]:
        return update_step(
            self.cfg,
            self.model,
            self.optimizer,
            self.scheduler,
            self.io,
            groups,
            adv,
            mb,
            device=self.device,
            vision=self.vision,
            use_ref=self.ref is not None,
            shared=self.shared_lm,
        )

    # ---------------------------------------------------------------- evaluation
    def evaluate(self) -> dict[str, float]:
        cfg = self.cfg
        with _timed(self.state, "eval"):
            return evaluate_greedy(
                self.model,
                self.io,
                self.val_prompts,
                self.reward,
                max_new_tokens=cfg.eval_max_new_tokens or cfg.max_new_tokens,
                batch_size=cfg.eval_batch_size,
                device=self.device,
                sampler=self.eval_sampler,
            )


__all__ = ["GRPOEngine", "Group", "UpdateInfo"]
