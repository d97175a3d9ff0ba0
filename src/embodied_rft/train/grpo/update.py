"""One GRPO optimiser update of the local engine, on a minibatch of buffered groups.

Inputs: the policy and its optimiser/scheduler, the buffered :class:`Group` s (prompt, G sampled responses,
rewards, sampling-time log-probs, reference log-probs when β > 0), their group-normalised advantages and
the (group, response) pairs of this update's minibatch. Output: the optimiser step taken, and a dict of
diagnostics averaged over the minibatch's response tokens (loss, clip fraction, ratio, KL estimates,
entropy, grad norm, LR).

The minibatch is split into micro-batches of ``micro_batch_size`` sequences whose gradients accumulate;
the loss weights come from :func:`loss.token_weights` with the *minibatch* totals, so the step is the
same however it is split. Gradients are clipped to ``max_grad_norm`` before AdamW steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from embodied_rft.generation.decoder import DecoderLM, decoder_for
from embodied_rft.generation.kvcache import PromptStates
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.grpo.loss import grpo_loss, token_entropy, token_logprobs, token_weights
from embodied_rft.train.grpo.rollout import EncodedPrompt, PolicyIO, batch_logprobs, build_batch


@dataclass
class Group:
    """One prompt's G sampled responses with their rewards (what the filter buffers)."""

    prompt: EncodedPrompt
    responses: list[list[int]]
    rewards: list[float]
    accuracy_full: list[float]
    old_logp: list[torch.Tensor] | None = None  # log π_old per response token, from the sampling policy
    ref_logp: list[torch.Tensor] | None = None  # log π_ref per response token (β > 0 only)


def shared_prompt_lm(model: Any, mode: str) -> DecoderLM | None:
    """The functional model for the shared-prompt update forward (``grpo.update_forward``), or None (padded)."""
    return decoder_for(model, mode, key="grpo.update_forward", on="shared_prompt", off="padded")


@dataclass
class _MicroBatch:
    """What the loss needs of one micro-batch: per-token log π (with grad), entropy, targets' mask."""

    logp: torch.Tensor  # [B, R]
    entropy: torch.Tensor  # [B, R], detached
    mask: torch.Tensor  # [B, R] (long, 1 on response tokens)


def _forward_padded(
    model: Any,
    io: PolicyIO,
    rows: Sequence[tuple[EncodedPrompt, Sequence[int]]],
    device: Any,
    vision: bool,
    temperature: float,
) -> _MicroBatch:
    batch = build_batch(rows, io, device, vision)
    logp, entropy = batch_logprobs(model, batch, temperature, with_entropy=True)
    return _MicroBatch(logp, entropy, batch.mask)


def _forward_shared(
    lm: DecoderLM,
    states: PromptStates,
    slot: dict[int, int],
    rows: Sequence[tuple[EncodedPrompt, Sequence[int]]],
    temperature: float,
) -> _MicroBatch:
    logits, targets, valid = lm.response_logits(states, [list(r) for _, r in rows], [slot[id(p)] for p, _ in rows])
    logp = token_logprobs(logits, targets, temperature)
    with torch.no_grad():
        entropy = token_entropy(logits.detach(), temperature)
    return _MicroBatch(logp, entropy, valid.long())


def _padded(ts: Sequence[torch.Tensor], width: int, device: Any) -> torch.Tensor:
    out = torch.zeros((len(ts), width), dtype=torch.float32)
    for i, t in enumerate(ts):
        out[i, : len(t)] = t
    return out.to(device)


def update_step(
    cfg: GRPOConfig,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    io: PolicyIO,
    groups: Sequence[Group],
    advantages: torch.Tensor,
    minibatch: Sequence[tuple[int, int]],
    *,
    device: Any,
    vision: bool,
    use_ref: bool,
    shared: DecoderLM | None = None,
) -> dict[str, float]:
    """One optimiser step over ``minibatch`` ((group, response) pairs); returns its diagnostics.

    ``shared`` (:func:`shared_prompt_lm`): each distinct prompt of the minibatch is computed once (forward and
    backward) for all micro-batches, which are cut from the minibatch sorted by response length; None: padded
    rows in minibatch order. The loss weights use the minibatch totals, so both give the same step (tested to
    1e-5)."""
    lens = [len(groups[gi].responses[ri]) for gi, ri in minibatch]
    n_tokens, n_seqs = float(sum(lens)), float(sum(1 for n in lens if n > 0))
    optimizer.zero_grad(set_to_none=True)
    sums = dict.fromkeys(("tokens", "clipped", "ratio", "kl", "entropy", "approx_kl", "loss", "policy_loss"), 0.0)
    rows = list(minibatch)
    states = leaves = None
    if shared is not None:
        # every distinct prompt of the minibatch computed once, for all micro-batches: the response passes
        # accumulate gradients into the prompts' keys/values (leaves), whose own backward then runs once
        slot: dict[int, int] = {}
        prompts: list[list[int]] = []
        for gi, _ in rows:
            p = groups[gi].prompt
            if id(p) not in slot:
                slot[id(p)] = len(prompts)
                prompts.append(p.ids)
        states = shared.prompt_states(prompts)
        leaves = states.detached()
        rows.sort(key=lambda gr: len(groups[gr[0]].responses[gr[1]]))  # similar lengths per micro-batch
    for s in range(0, len(rows), cfg.micro_batch_size):
        chunk = rows[s : s + cfg.micro_batch_size]
        pairs = [(groups[gi].prompt, groups[gi].responses[ri]) for gi, ri in chunk]
        if shared is not None:
            mb = _forward_shared(shared, leaves, slot, pairs, cfg.temperature)
        else:
            mb = _forward_padded(model, io, pairs, device, vision, cfg.temperature)
        logp, entropy = mb.logp, mb.entropy
        width = mb.mask.shape[1]
        old = _padded([groups[gi].old_logp[ri] for gi, ri in chunk], width, device)
        ref = _padded([groups[gi].ref_logp[ri] for gi, ri in chunk], width, device) if use_ref else None
        adv = torch.stack([advantages[gi, ri] for gi, ri in chunk]).to(device)
        weights = token_weights(mb.mask, cfg.loss_agg, n_tokens=n_tokens, n_seqs=n_seqs)
        loss, st = grpo_loss(logp, old, adv, mb.mask, weights, cfg.eps_clip, ref, cfg.kl_coef)
        loss.backward()
        mask = mb.mask.float()
        sums["loss"] += float(loss.detach())
        sums["policy_loss"] += float(st["policy_loss"])
        for k in ("tokens", "clipped", "ratio"):
            sums[k] += float(st[k])
        sums["kl"] += float(st.get("kl", 0.0))
        sums["entropy"] += float((entropy * mask).sum())
        sums["approx_kl"] += float(((old - logp.detach()) * mask).sum())
    if states is not None:
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves.tensors()]
        torch.autograd.backward(states.tensors(), grads)
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
    optimizer.step()
    scheduler.step()
    t = max(sums["tokens"], 1.0)
    out = {
        "loss": sums["loss"],
        "policy_loss": sums["policy_loss"],
        "clip_frac": sums["clipped"] / t,
        "ratio_mean": sums["ratio"] / t,
        "approx_kl": sums["approx_kl"] / t,  # KL(π_old ‖ π) estimate on the sampled tokens
        "entropy": sums["entropy"] / t,
        "grad_norm": grad_norm,
        "lr": scheduler.get_last_lr()[0],
        "update_tokens": sums["tokens"],
        "update_sequences": len(minibatch),
    }
    if use_ref:
        out["kl_ref"] = sums["kl"] / t  # k3 estimate of KL(π ‖ π_ref)
    return out


__all__ = ["Group", "shared_prompt_lm", "update_step"]
