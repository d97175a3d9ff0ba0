"""The GRPO objective, as pure tensor functions (no model, no I/O).

Inputs: per-token log-probabilities of the current policy, of the sampling ("old") policy and, when the KL
term is on, of the frozen reference; a response mask (1 on generated tokens, 0 on prompt and padding); one
scalar advantage per sequence. Output: a scalar loss and a dict of diagnostics (clip fraction, KL, ...).

What it computes (paper §3.2, docs/facts.md §1.5; the same formulas as OpenRLHF 0.11.2's ``group_norm`` estimator,
``PolicyLoss`` and ``compute_approx_kl``, so the local and the cluster engine optimise one objective):

* advantages A_i = (r_i − mean_g r) / (std_g r + eps) over each group of G responses; std is the unbiased
  (n − 1) estimate as in OpenRLHF and TRL (``torch.std``), and a group of one has std 0.
* per token, ratio ρ = exp(log π − log π_old) and the clipped surrogate −min(ρA, clip(ρ, 1−ε, 1+ε)A);
* the KL penalty is a *loss* (GRPO style, not a reward shaping): β · k3, with
  k3 = exp(log π_ref − log π) − 1 − (log π_ref − log π) ≥ 0 (Schulman's estimator; clamped to [−10, 10]
  as OpenRLHF does), and skipped entirely when β = 0 (the paper's setting);
* aggregation over the tokens of one *optimiser step* (which may span several micro-batches):
  ``token_mean`` — every response token of the step weighs the same (OpenRLHF ``token-mean``, the default);
  ``seq_mean_token_mean`` — each sequence's token mean, then the mean over sequences (the GRPO paper's
  1/G Σ 1/|o_i| Σ_t; OpenRLHF ``seq-mean-token-mean``). Weights are computed once per step by
  :func:`token_weights`, so splitting a step into micro-batches does not change the gradient.
"""

from __future__ import annotations

from typing import Literal

import torch

LossAgg = Literal["token_mean", "seq_mean_token_mean"]

# OpenRLHF bounds the log-ratio before exp() so one wild token cannot overflow the loss.
_LOG_RATIO_CLAMP = 20.0
_KL_CLAMP = 10.0
# group advantage estimators (OpenRLHF's names): group_norm = (r − mean) / std, dr_grpo = r − mean
ADVANTAGE_ESTIMATORS = ("group_norm", "dr_grpo")


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6, estimator: str = "group_norm") -> torch.Tensor:
    """A = (r − mean) / (std + eps) within each row of ``rewards`` [n_groups, G] (unbiased std): ``group_norm``, the
    paper's GRPO; ``dr_grpo`` keeps A = r − mean (Dr. GRPO: no std division, so a reward term of a few hundredths,
    such as ReGRPO's reflection cost, stays that size instead of becoming a unit advantage when it is a group's only
    difference). The names are OpenRLHF's ``--algo.advantage.estimator`` values."""
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"group_advantages: estimator must be one of {ADVANTAGE_ESTIMATORS}, got {estimator!r}")
    if rewards.dim() != 2:
        raise ValueError(f"group_advantages: rewards must be [n_groups, G], got shape {tuple(rewards.shape)}")
    r = rewards.float()
    mean = r.mean(dim=1, keepdim=True)
    if estimator == "dr_grpo":
        return r - mean
    std = r.std(dim=1, keepdim=True) if r.shape[1] > 1 else torch.zeros_like(mean)
    return (r - mean) / (std + eps)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log π(target_t | prefix) from ``logits`` [B, T, V] that already predict ``targets`` [B, T].

    The logits are divided by the sampling temperature first, so the log-probs describe the distribution
    the rollout actually sampled from (OpenRLHF's Actor does the same; top-p truncation is not modelled).
    """
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy (nats) of the temperature-scaled next-token distribution at each position [B, T]."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π ‖ π_ref): exp(q − p) − 1 − (q − p), p = log π, q = log π_ref."""
    log_ratio = (logp.float() - ref_logp.float()).clamp(min=-_KL_CLAMP)
    return ((-log_ratio).exp() - 1 + log_ratio).clamp(min=-_KL_CLAMP, max=_KL_CLAMP)


def token_weights(
    mask: torch.Tensor, mode: LossAgg, n_tokens: float | None = None, n_seqs: float | None = None
) -> torch.Tensor:
    """Per-token weights w with Σ w·ℓ the aggregated loss of one optimiser step.

    ``mask`` [B, T] marks the response tokens of this micro-batch; ``n_tokens`` / ``n_seqs`` are the totals
    over the whole optimiser step (default: this micro-batch alone). Sequences with no response token
    (an immediate EOS is still one token, so only a truncated-to-zero response) weigh nothing.
    """
    mask = mask.float()
    if mode == "token_mean":
        total = float(mask.sum()) if n_tokens is None else float(n_tokens)
        return mask / max(total, 1.0)
    if mode == "seq_mean_token_mean":
        per_seq = mask.sum(dim=1, keepdim=True)
        seqs = float((per_seq > 0).sum()) if n_seqs is None else float(n_seqs)
        return mask / per_seq.clamp(min=1.0) / max(seqs, 1.0)
    raise ValueError(f"token_weights: unknown loss aggregation {mode!r}; use token_mean or seq_mean_token_mean")


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    eps_clip: float,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped GRPO loss of one micro-batch, weighted by :func:`token_weights`.

    Shapes: ``logp``, ``old_logp``, ``ref_logp``, ``mask``, ``weights`` are [B, T]; ``advantages`` is [B]
    (one value per sequence, broadcast over its tokens). Returns ``(loss, stats)``; ``stats`` holds
    detached sums over the masked tokens (``tokens``, ``clipped``, ``kl``, ``ratio``, ``policy_loss``) so
    the caller can average them over a whole optimiser step.
    """
    if kl_coef > 0 and ref_logp is None:
        raise ValueError("grpo_loss: kl_coef > 0 needs the reference log-probs (ref_logp)")
    mask = mask.float()
    adv = advantages.float().unsqueeze(-1)
    log_ratio = (logp - old_logp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    surr1 = ratio * adv
    surr2 = ratio.clamp(1.0 - eps_clip, 1.0 + eps_clip) * adv
    per_token = -torch.min(surr1, surr2)
    policy_loss = (per_token * weights).sum()
    loss = policy_loss
    stats = {
        "tokens": mask.sum().detach(),
        # a token is "clipped" when the clipped branch is the one taken (it carries no gradient)
        "clipped": ((surr2 < surr1).float() * mask).sum().detach(),
        "ratio": (ratio.detach() * mask).sum(),
        "policy_loss": policy_loss.detach(),
    }
    if kl_coef > 0:
        kl = k3_kl(logp, ref_logp)
        kl_loss = (kl * weights).sum()
        loss = loss + kl_coef * kl_loss
        stats["kl"] = (kl.detach() * mask).sum()
        stats["kl_loss"] = kl_loss.detach()
    return loss, stats


__all__ = ["LossAgg", "grpo_loss", "group_advantages", "k3_kl", "token_entropy", "token_logprobs", "token_weights"]
