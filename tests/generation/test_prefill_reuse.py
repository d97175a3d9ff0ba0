"""The fast sampler's prefill shortcuts held against one padded prefill and transformers' ``generate``: length
buckets (``DecoderLM.prefill(max_buckets > 1)``), a prompt run from a stored prefix (``DecoderLM.prefill_extend``)
and the prefix store across calls (``generation/prefix.py``): values to float rounding, greedy answers token for
token, nothing reused after the weights changed in place."""

from __future__ import annotations

import pytest
import torch

from embodied_rft.generation import GenerationConfig, make_generator
from embodied_rft.generation.decoder import DecoderLM, length_buckets
from embodied_rft.generation.prefix import PrefixCache
from embodied_rft.generation.sampler import FastSampler
from tests.generation.test_fast_sampler import _early_eos, _hf_generate, _tiny
from tests.helpers import tiny_checkpoints as tc


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with tc.one_thread():
        yield


def _random(lengths: list[int], seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(10, 97, (k,), generator=g).tolist() for k in lengths]


def _real(kv, li: int, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``row``'s keys [kv_heads, head_dim, n] and values [kv_heads, n, head_dim] over its real columns."""
    cols = torch.isfinite(kv.bias[row]).nonzero().squeeze(1)
    return kv.k_t[li][row][..., cols], kv.v[li][row][:, cols]


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_bucketed_prefill_equals_one_padded_batch(family):
    lm = DecoderLM(_tiny(family))
    prompts = _random([3, 60, 9, 58, 2, 31, 7, 59], seed=2)
    assert len(length_buckets([len(p) for p in prompts], 3)) >= 2  # the shortcut really runs
    with torch.inference_mode():
        ref_logits, ref_kv, ref_lens = lm.prefill(prompts)
        logits, kv, lens = lm.prefill(prompts, max_buckets=3)
    assert torch.equal(lens, ref_lens) and kv.width == ref_kv.width == 60
    assert torch.allclose(logits, ref_logits, atol=1e-5, rtol=0)
    assert torch.equal(logits.argmax(-1), ref_logits.argmax(-1))
    for li in range(len(lm.layers)):
        for row in range(len(prompts)):
            for got, ref in zip(_real(kv, li, row), _real(ref_kv, li, row), strict=True):
                assert got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_a_prompt_run_from_its_stored_prefix_equals_a_full_prefill(family):
    lm = DecoderLM(_tiny(family))
    prompts = _random([40, 25, 61, 33], seed=3)
    cut = [30, 1, 47, 20]  # prefix tokens already prefilled; the suffixes have 10, 24, 14, 13 tokens
    with torch.inference_mode():
        ref_logits, ref_kv, ref_lens = lm.prefill(prompts)
        _, pre_kv, _ = lm.prefill([p[:c] for p, c in zip(prompts, cut, strict=True)])  # left-padded to 47
        pre_k = [t.transpose(-1, -2) for t in pre_kv.k_t]  # right-aligned prefixes, as prefill_extend takes them
        logits, kv, lens = lm.prefill_extend(
            pre_k, pre_kv.v, torch.tensor(cut), [p[c:] for p, c in zip(prompts, cut, strict=True)]
        )
    assert lens.tolist() == ref_lens.tolist() == [40, 25, 61, 33]
    assert torch.allclose(logits, ref_logits, atol=1e-5, rtol=0)
    for li in range(len(lm.layers)):
        for row in range(len(prompts)):
            for got, ref in zip(_real(kv, li, row), _real(ref_kv, li, row), strict=True):
                assert got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5, rtol=0)


def _rounds(seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """Prompts, then each prompt extended by new tokens (an episode's next planner prompt), plus a new one."""
    first = _random([40, 52, 35, 64], seed)
    more = _random([6, 17, 1, 9, 45], seed + 1)
    return first, [p + m for p, m in zip(first, more, strict=False)] + [more[-1]]


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_greedy_rounds_through_the_prefix_store_equal_generate(family):
    model = _tiny(family)
    sampler = FastSampler(DecoderLM(model), prefill_buckets=2)
    store = PrefixCache()
    first, second = _rounds(seed=4)
    eos = _early_eos(model, second, 30)
    for prompts in (first, second):
        store.next_call()
        got = sampler.sample(prompts, 1, max_new_tokens=30, temperature=0.0, eos_ids=eos, prefix=store)
        assert [g[0] for g in got.tokens] == _hf_generate(model, prompts, 30, eos)
    # the four extended prompts reused their whole first-round prompt; the new one nothing
    assert store.reused_tokens == sum(len(p) for p in first)
    assert store.prompt_tokens == sum(len(p) for p in first + second)


def test_the_prefix_store_reuses_nothing_after_the_weights_change_in_place():
    model = _tiny("qwen2")
    sampler = FastSampler(DecoderLM(model))
    store = PrefixCache()
    first, second = _rounds(seed=5)
    sampler.sample(first, 1, max_new_tokens=8, temperature=0.0, eos_ids=[0], prefix=store)
    with torch.no_grad():  # an optimiser step: the same tensors, new values
        for p in model.parameters():
            p.mul_(1.05)
    store.next_call()
    got = sampler.sample(second, 1, max_new_tokens=20, temperature=0.0, eos_ids=[0], prefix=store)
    assert store.reused_tokens == 0
    assert [g[0] for g in got.tokens] == _hf_generate(model, second, 20, [0])


def test_the_fast_backend_with_the_prefix_store_answers_as_without_it():
    eps = tc.episodes(n=4)
    first = [tc.first_prompt(ep) for ep in eps]
    # the next planner call's prompt extends the first (the same conversation, one more turn's worth of text)
    extra = "\nfind a Apple failed: no Apple here."
    second = [[*m[:-1], {**m[-1], "content": m[-1]["content"] + extra}] for m in first]
    cfg = dict(backend="fast", max_new_tokens=40, batch_size=4, device="cpu", prefill_buckets=2)
    plain = make_generator(tc.text_model(), GenerationConfig(**cfg))
    reuse = make_generator(tc.text_model(), GenerationConfig(**cfg, prefix_cache=True))
    for convs in (first, second):
        got, ref = reuse.complete(convs), plain.complete(convs)
        assert [[(c.text, c.finish_reason, c.completion_tokens) for c in cs] for cs in got] == [
            [(c.text, c.finish_reason, c.completion_tokens) for c in cs] for cs in ref
        ]
        assert [c.logprob for cs in got for c in cs] == pytest.approx([c.logprob for cs in ref for c in cs], abs=1e-3)
    assert reuse.prefix.reused_tokens > 0 and plain.prefix is None
