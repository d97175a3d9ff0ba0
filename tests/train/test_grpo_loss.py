"""The GRPO objective against hand-computed values (grpo_loss)."""

from __future__ import annotations

import math

import pytest
import torch

from embodied_rft.train.grpo.loss import (
    group_advantages,
    grpo_loss,
    k3_kl,
    token_entropy,
    token_logprobs,
    token_weights,
)


def _one_token(ratio: float, adv: float, eps: float = 0.2):
    """A single response token whose ratio π/π_old is ``ratio``; returns (loss, stats, d loss / d log π)."""
    old = torch.tensor([[math.log(0.4)]])
    logp = (old + math.log(ratio)).clone().requires_grad_(True)
    mask = torch.ones(1, 1)
    loss, st = grpo_loss(logp, old, torch.tensor([adv]), mask, token_weights(mask, "token_mean"), eps)
    loss.backward()
    return float(loss.detach()), st, float(logp.grad[0, 0])


def test_advantages_normalise_each_group_with_unbiased_std():
    a = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.5, 1.5, 1.5]]), eps=1e-6)
    # group 1: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735 -> ±0.866025
    assert a[0].tolist() == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-5)
    # group 2: mean 1.125, std sqrt((1.265625 + 3 * 0.140625) / 3) = 0.75 -> -1.5 and +0.5
    assert a[1].tolist() == pytest.approx([-1.5, 0.5, 0.5, 0.5], abs=1e-5)
    assert a.sum(dim=1).tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_zero_variance_group_has_zero_advantage():
    a = group_advantages(torch.tensor([[0.5, 0.5, 0.5, 0.5]]))
    assert a.abs().max().item() == 0.0


def test_dr_grpo_advantage_keeps_a_small_reward_term_at_its_size():
    # an all-success group that differs only in ReGRPO's reflection cost (0.1 x tokens / 100): 0, 20, 40, 0 tokens
    r = torch.tensor([[1.0, 0.98, 0.96, 1.0]])
    dr = group_advantages(r, estimator="dr_grpo")
    assert dr[0].tolist() == pytest.approx([0.015, -0.005, -0.025, 0.015], abs=1e-6)  # r - mean, mean 0.985
    # the paper's group_norm turns the same 0.04 spread into advantages of order one
    norm = group_advantages(r, estimator="group_norm")
    assert norm[0].tolist() == pytest.approx((dr[0] / dr[0].std()).tolist(), abs=1e-4)
    assert norm.abs().max().item() > 1.0
    # a 0/1 success group: dr_grpo = r - mean, no division
    assert group_advantages(torch.tensor([[1.0, 0.0]]), estimator="dr_grpo")[0].tolist() == [0.5, -0.5]


def test_advantage_estimator_must_be_known():
    with pytest.raises(ValueError, match="estimator"):
        group_advantages(torch.tensor([[1.0, 0.0]]), estimator="whiten")


def test_advantages_reject_wrong_shape():
    with pytest.raises(ValueError, match="n_groups, G"):
        group_advantages(torch.tensor([1.0, 0.0]))


@pytest.mark.parametrize(
    "ratio, adv, loss, clipped, grad",
    [
        # positive advantage: the ratio is capped at 1 + eps above, free below
        (1.5, 1.0, -1.2, True, 0.0),
        (0.5, 1.0, -0.5, False, -0.5),
        # negative advantage: capped at 1 - eps below, free above
        (1.5, -1.0, 1.5, False, 1.5),
        (0.5, -1.0, 0.8, True, 0.0),
        # inside the trust region nothing is clipped
        (1.1, 2.0, -2.2, False, -2.2),
    ],
)
def test_clipped_surrogate_on_both_sides(ratio, adv, loss, clipped, grad):
    got_loss, st, got_grad = _one_token(ratio, adv)
    assert got_loss == pytest.approx(loss, abs=1e-5)
    assert float(st["clipped"]) == (1.0 if clipped else 0.0)
    assert got_grad == pytest.approx(grad, abs=1e-5)
    assert float(st["ratio"]) == pytest.approx(ratio, rel=1e-5)


def test_k3_kl_value_and_zero_at_equality():
    p, q = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    # q - p = log 0.5: exp(log 0.5) - 1 - log 0.5 = 0.5 - 1 + 0.693147
    assert float(k3_kl(p, q)) == pytest.approx(0.193147, abs=1e-6)
    assert float(k3_kl(q, q)) == 0.0
    assert float(k3_kl(q, p)) == pytest.approx(2.0 - 1.0 - math.log(2.0), abs=1e-6)


def test_kl_term_is_added_with_beta_and_needs_reference():
    old = torch.log(torch.tensor([[0.5, 0.5]]))
    logp = old.clone()
    ref = torch.log(torch.tensor([[0.25, 0.5]]))
    mask = torch.ones(1, 2)
    w = token_weights(mask, "token_mean")
    loss, st = grpo_loss(logp, old, torch.tensor([0.0]), mask, w, 0.2, ref, kl_coef=0.1)
    # zero advantage: only β · mean(k3) = 0.1 * (0.193147 + 0) / 2
    assert float(loss) == pytest.approx(0.1 * 0.193147 / 2, abs=1e-6)
    assert float(st["kl"]) == pytest.approx(0.193147, abs=1e-6)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, old, torch.tensor([0.0]), mask, w, 0.2, None, kl_coef=0.1)


def test_padding_and_prompt_tokens_are_masked():
    old = torch.full((2, 4), math.log(0.5))
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    w = token_weights(mask, "token_mean")

    def run(fill: float):
        logp = old.clone()
        logp[mask == 0] = fill  # garbage where there is no response token
        logp.requires_grad_(True)
        loss, st = grpo_loss(logp, old, adv, mask, w, 0.2)
        loss.backward()
        return float(loss.detach()), logp.grad, st

    l1, g1, st = run(0.0)
    l2, g2, _ = run(-30.0)
    # ratio 1 on real tokens: loss = -(2 * 1 + 3 * (-1)) / 5 = 0.2, whatever sits under the mask
    assert l1 == pytest.approx(0.2, abs=1e-6) and l2 == pytest.approx(0.2, abs=1e-6)
    assert (g1[mask == 0] == 0).all() and (g2[mask == 0] == 0).all()
    assert float(st["tokens"]) == 5.0


def test_token_mean_vs_sequence_mean():
    # ratio 1, so each token's loss is -A: sequence 1 has one token of loss 4, sequence 2 three of loss 1
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    old = torch.zeros(2, 3)
    adv = torch.tensor([-4.0, -1.0])
    tok, _ = grpo_loss(old.clone(), old, adv, mask, token_weights(mask, "token_mean"), 0.2)
    seq, _ = grpo_loss(old.clone(), old, adv, mask, token_weights(mask, "seq_mean_token_mean"), 0.2)
    assert float(tok) == pytest.approx((4 + 3) / 4)
    assert float(seq) == pytest.approx((4 + 1) / 2)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean"])
def test_micro_batches_sum_to_the_full_batch(mode):
    torch.manual_seed(0)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    old = torch.randn(4, 3) - 2
    logp = old + 0.3 * torch.randn(4, 3)
    adv = torch.tensor([0.7, -1.2, 0.4, 1.1])
    full, _ = grpo_loss(logp, old, adv, mask, token_weights(mask, mode), 0.2)
    n_tok, n_seq = float(mask.sum()), 4.0
    parts = 0.0
    for s in (slice(0, 1), slice(1, 4)):
        w = token_weights(mask[s], mode, n_tokens=n_tok, n_seqs=n_seq)
        part, _ = grpo_loss(logp[s], old[s], adv[s], mask[s], w, 0.2)
        parts += float(part)
    assert parts == pytest.approx(float(full), abs=1e-6)


def test_token_weights_reject_unknown_mode():
    with pytest.raises(ValueError, match="token_mean or seq_mean_token_mean"):
        token_weights(torch.ones(1, 1), "sum")  # type: ignore[arg-type]


def test_logprobs_and_entropy_use_the_sampling_temperature():
    logits = torch.tensor([[[2.0, 0.0]]])
    # T = 2: logits [1, 0] -> log softmax[0] = 1 - log(e + 1)
    lp = token_logprobs(logits, torch.tensor([[0]]), temperature=2.0)
    assert float(lp) == pytest.approx(1 - math.log(math.e + 1), abs=1e-6)
    assert float(token_logprobs(logits, torch.tensor([[1]]))) == pytest.approx(-math.log(math.exp(2) + 1), abs=1e-6)
    assert float(token_entropy(torch.zeros(1, 1, 4))) == pytest.approx(math.log(4), abs=1e-6)
