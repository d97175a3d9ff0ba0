"""The fast GRPO engine parts: the shared-prompt update against the padded one (loss and every gradient), the
sampler's log-probs as π_old (the first update's ratio is exactly 1), the fast and hf samplers inside the engine,
and the shared-memory rollout processes (same samples as in-process, the trainer's updates seen at once)."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from embodied_rft.config import ConfigError, build
from embodied_rft.filtering import FilterConfig
from embodied_rft.models import load_model
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.grpo.rollout import PolicyIO, make_sampler, sample_groups
from embodied_rft.train.grpo.update import Group, shared_prompt_lm, update_step
from embodied_rft.train.grpo.workers import ProcessRollout
from tests.helpers.grpo import _weights, kill_at_3_and_resume, run, tiny_cfg
from tests.helpers.grpo_fixtures import grpo_samples, sft_policy, write_jsonl

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "decomposed" / "train.jsonl", grpo_samples())


def _policy():
    model, tok = load_model(sft_policy(), for_training=True)
    io = PolicyIO(tok, 256)
    io.add_model_eos(model)
    return model.float(), io


def _groups(model, io, G=4):
    prompts = [io.encode(s, i) for i, s in enumerate(grpo_samples()[:5])]
    out = sample_groups(
        model,
        io,
        prompts,
        G,
        sampler=make_sampler(model, "fast"),
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=40,
        seed=7,
    )
    g = torch.Generator().manual_seed(0)
    groups = [
        Group(p, rs, [0.0] * G, [0.0] * G, lps, [lp - 0.05 * torch.rand(len(lp), generator=g) for lp in lps])
        for p, rs, lps in zip(prompts, out.responses, out.logprobs)
    ]
    lengths = {len(r) for grp in groups for r in grp.responses}
    assert len(lengths) > 3  # responses of many lengths: the padding and sorting paths are exercised
    return groups, torch.randn(len(groups), G, generator=g)


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean_token_mean"])
def test_shared_prompt_update_has_the_padded_update_loss_and_gradient(loss_agg):
    model, io = _policy()
    groups, adv = _groups(model, io)
    rows = [(gi, ri) for gi in range(len(groups)) for ri in range(4)]
    random.Random(1).shuffle(rows)
    mb = rows[:14]
    cfg = GRPOConfig(
        group_size=4,
        micro_batch_size=5,
        train_batch_size=14,
        kl_coef=0.1,
        loss_agg=loss_agg,
        filter=FilterConfig(buffer_size=5, updates_per_buffer=1),
    )
    stats, grads = {}, {}
    for mode in ("padded", "shared_prompt"):
        m = copy.deepcopy(model).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.0)
        sch = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        stats[mode] = update_step(
            cfg,
            m,
            opt,
            sch,
            io,
            groups,
            adv,
            mb,
            device="cpu",
            vision=False,
            use_ref=True,
            shared=shared_prompt_lm(m, mode),
        )
        grads[mode] = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    a, b = stats["padded"], stats["shared_prompt"]
    for k in ("loss", "policy_loss", "approx_kl", "entropy", "kl_ref", "ratio_mean", "grad_norm", "clip_frac"):
        assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-6), k
    assert a["update_tokens"] == b["update_tokens"] > 0
    assert grads["padded"].keys() == grads["shared_prompt"].keys() and len(grads["padded"]) > 10
    for n, g in grads["padded"].items():
        assert float(g.abs().max()) > 0 or "bias" in n
        assert torch.allclose(grads["shared_prompt"][n], g, atol=1e-5, rtol=1e-4), n


def test_prompts_in_length_buckets_give_the_one_batch_states_and_gradients():
    """Prompts of very different lengths run in length buckets (less padding); the responses' logits and every
    parameter's gradient equal those of one left-padded batch."""
    from embodied_rft.generation.decoder import DecoderLM, length_buckets

    model, _ = _policy()
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 300, (n,), generator=g).tolist() for n in (4, 170, 9, 160, 60, 6)]
    assert len(length_buckets([len(p) for p in prompts], 3)) == 3
    responses = [torch.randint(10, 300, (n,), generator=g).tolist() for n in (5, 12, 3, 8, 7, 9, 11)]
    owner = [0, 1, 2, 3, 4, 5, 1]
    out = {}
    for buckets in (1, 3):
        m = copy.deepcopy(model).train()
        lm = DecoderLM(m)
        logits, _, valid = lm.response_logits(lm.prompt_states(prompts, max_buckets=buckets), responses, owner)
        w = torch.linspace(-1, 1, logits.shape[-1])
        torch.log_softmax(logits, -1).mul(w).sum(-1)[valid].mean().backward()
        out[buckets] = (logits.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    (l1, g1), (l3, g3) = out[1], out[3]
    assert torch.allclose(l3, l1, atol=1e-5)
    assert g1.keys() == g3.keys() and len(g1) > 10
    for n, grad in g1.items():
        assert torch.allclose(g3[n], grad, atol=1e-5, rtol=1e-4), n


def test_shared_prompt_forward_requires_a_supported_model():
    with pytest.raises(ValueError, match="grpo.update_forward=shared_prompt"):
        shared_prompt_lm(torch.nn.Linear(2, 2), "shared_prompt")
    assert shared_prompt_lm(torch.nn.Linear(2, 2), "auto") is None
    with pytest.raises(ConfigError, match="grpo.update_forward"):
        build(GRPOConfig, {"update_forward": "packed"}, "grpo")
    with pytest.raises(ConfigError, match="grpo.rollout_processes"):
        build(GRPOConfig, {"rollout_processes": 2, "num_rollout_workers": 2}, "grpo")


def test_fast_engine_needs_no_old_logprob_pass_and_decodes_like_generate(data, tmp_path):
    cfg = dict(max_updates=2, eval_max_samples=6)
    fast = run(tiny_cfg(sampler="fast", **cfg), sft_policy(), data, tmp_path / "fast")
    hf = run(tiny_cfg(sampler="hf", update_forward="padded", **cfg), sft_policy(), data, tmp_path / "hf")
    assert (fast["sampler"], fast["update_forward"]) == ("fast", "shared_prompt")
    assert (hf["sampler"], hf["update_forward"]) == ("hf", "padded")
    # greedy held-out decoding is token-identical, so the before-GRPO check is the same to the last digit
    assert fast["heldout"]["before"] == hf["heldout"]["before"]
    assert fast["time_s"]["logprob"] == 0.0 < hf["time_s"]["logprob"]
    # π_old is the sampler's own log-prob: before the first optimiser step the ratio is exactly 1
    first = fast["history"][0]
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert first["approx_kl"] == pytest.approx(0.0, abs=1e-5) and first["clip_frac"] == 0.0
    # finished rows leave the batch once a quarter of it is done: at most 1/0.75 row-steps per generated token
    assert 0.9 <= fast["throughput"]["row_steps_per_token"] <= 1 / 0.75
    assert set(fast["time_share"]) >= {"generate", "update"}
    assert sum(fast["time_share"].values()) == pytest.approx(1.0, abs=1e-3)


def test_rollout_processes_sample_like_the_in_process_sampler_and_see_each_update():
    model, io = _policy()
    prompts = [io.encode(s, i).ids for i, s in enumerate(grpo_samples())]
    assert len(prompts) >= 4
    kw = dict(max_new_tokens=30, temperature=1.0, top_p=0.9, eos_ids=io.eos_ids)
    local = make_sampler(model, "fast")
    pool = ProcessRollout(model, io.eos_ids, 2)
    try:
        got = pool.sample_ids(prompts, 3, seed=4, **kw)
        half = -(-len(prompts) // 2)  # the pool's contiguous chunks, chunk j seeded seed·1009 + j
        want0 = local.sample(prompts[:half], 3, seed=4 * 1009, **kw)
        want1 = local.sample(prompts[half:], 3, seed=4 * 1009 + 1, **kw)
        assert got.tokens == want0.tokens + want1.tokens
        for g, w in zip(got.logprobs, want0.logprobs + want1.logprobs):
            assert all(torch.equal(x, y) for x, y in zip(g, w))
        # and every returned log-prob is the trainer's own model's, at the rollout temperature
        worst = 0.0
        for p, group, lps in zip(prompts, got.tokens, got.logprobs):
            for r, lp in zip(group, lps):
                with torch.no_grad():
                    logits = model(torch.tensor([p + r])).logits[0, len(p) - 1 : -1].float()
                ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(r)[:, None])[:, 0]
                worst = max(worst, float((ref - lp).abs().max()))
        assert worst < 1e-4
        # an in-place change of the trainer's parameters (what AdamW does) is what the workers sample from next
        greedy = dict(max_new_tokens=20, temperature=0.0, eos_ids=io.eos_ids)
        before = pool.sample_ids(prompts, 1, **greedy).tokens
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        after = pool.sample_ids(prompts, 1, **greedy).tokens
        assert after == local.sample(prompts, 1, **greedy).tokens
        assert after != before
        with pytest.raises(RuntimeError, match="every prompt needs at least one token"):
            pool.sample_ids([[]], 1, **greedy)
    finally:
        pool.close()


def test_engine_with_rollout_processes_trains(data, tmp_path):
    cfg = tiny_cfg(max_updates=2, eval_max_samples=4, rollout_processes=2)
    m = run(cfg, sft_policy(), data, tmp_path / "procs")
    ref = run(tiny_cfg(max_updates=2, eval_max_samples=4), sft_policy(), data, tmp_path / "local")
    assert m["updates"] == 2 and m["time_s"]["logprob"] == 0.0
    assert m["heldout"]["before"] == ref["heldout"]["before"]  # greedy through the pool = greedy in process
    assert m["history"][0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)


def test_kill_and_resume_with_rollout_processes_reaches_the_uninterrupted_weights(data, tmp_path):
    cfg = tiny_cfg(max_updates=4, save_every=2, eval_max_samples=0, rollout_processes=2, temperature=0.8, top_p=0.95)
    ref, again, root = kill_at_3_and_resume(cfg, data, tmp_path)
    assert again["resumed"] is True and again["updates"] == 4
    assert again["counters"] == ref["counters"]  # the same responses were sampled after the resume
    resumed, uninterrupted = _weights(root / "out"), _weights(tmp_path / "ref" / "out")
    for k, v in resumed.items():
        assert torch.allclose(v, uninterrupted[k], atol=1e-6), k


def test_rollout_fill_sizes_calls_to_the_acceptance_rate():
    from types import SimpleNamespace

    from embodied_rft.filtering import GroupBuffer
    from embodied_rft.train.grpo.engine import GRPOEngine

    cfg = tiny_cfg(
        group_size=4, rollout_batch_size=2, rollout_fill=True, filter=FilterConfig(buffer_size=4, updates_per_buffer=1)
    )
    buf = GroupBuffer(cfg.filter, 4)
    eng = SimpleNamespace(cfg=cfg, buffer=buf)
    assert GRPOEngine.call_size(eng) == 8  # nothing seen yet: rate 1/2, 4 groups missing
    for right in (1, 0, 0, 4, 0, 0, 0, 2):  # 2 of 8 groups pass (one right answer, then two)
        buf.offer(object(), [1] * right + [0] * (4 - right), [float(right)] + [0.0] * 3)
    assert len(buf) == 2 and buf.stats.seen == 8
    assert GRPOEngine.call_size(eng) == 7  # 2 missing at rate (2 + 1) / (8 + 2): ceil(6.67)
    for _ in range(100):
        buf.offer(object(), [0] * 4, [0.0] * 4)
    assert GRPOEngine.call_size(eng) == 8 * 4  # 2 / (3 / 110) = 74 prompts, capped at 8 x buffer_size
    assert GRPOEngine.call_size(SimpleNamespace(cfg=tiny_cfg(rollout_batch_size=3), buffer=buf)) == 3  # off: fixed size


def test_kill_and_resume_with_rollout_fill_reaches_the_uninterrupted_weights(data, tmp_path):
    cfg = tiny_cfg(max_updates=4, save_every=2, eval_max_samples=0, rollout_fill=True, rollout_batch_size=1)
    ref, again, root = kill_at_3_and_resume(cfg, data, tmp_path)
    assert again["resumed"] is True and again["updates"] == 4
    assert again["counters"] == ref["counters"]
    resumed, uninterrupted = _weights(root / "out"), _weights(tmp_path / "ref" / "out")
    for k, v in resumed.items():
        assert torch.allclose(v, uninterrupted[k], atol=1e-6), k


def test_rollout_processes_with_continuous_batching_sample_what_one_batch_samples():
    # grpo.sampler_max_rows reaches the worker processes: at most 3 rows live there, and the same samples
    model, io = _policy()
    prompts = [io.encode(s, i).ids for i, s in enumerate(grpo_samples())]
    kw = dict(max_new_tokens=20, temperature=1.0, top_p=0.9, eos_ids=io.eos_ids, seed=5)
    whole = ProcessRollout(model, io.eos_ids, 2)
    try:
        want = whole.sample_ids(prompts, 3, **kw)
    finally:
        whole.close()
    streamed = ProcessRollout(model, io.eos_ids, 2, max_rows=3)
    try:
        got = streamed.sample_ids(prompts, 3, **kw)
    finally:
        streamed.close()
    assert got.tokens == want.tokens
    for g, w in zip(got.logprobs, want.logprobs):
        assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(g, w))
