"""The fast sampler held against transformers: greedy outputs token-identical to ``generate`` (tiny Qwen2 and
tiny Llama, mixed prompt lengths, early EOS), sampled-token log-probs equal to a full forward's, sampled
frequencies equal to the temperature + top-p distribution (chi-square), seeding, row dropping, and the
``fast`` backend against the ``hf`` backend on the project's own tiny checkpoints."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import GenerationConfig as HFGenConfig
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from embodied_rft.generation import GenerationConfig, backend_class, make_generator
from embodied_rft.generation.decoder import DecoderLM, supports, unsupported_reason
from embodied_rft.generation.fast import FastGenerator
from embodied_rft.generation.sampler import FastSampler, draw, nucleus_probs
from tests.helpers import tiny_checkpoints as tc

EOS = [5, 6, 7, 8, 9]  # several end tokens, so some rows stop early and others run to the cap


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with tc.one_thread():
        yield


def _sharpen(model):
    # random init at std 0.02 gives nearly flat logits; scaled weights give real preferences (no near-ties)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(3.0)
    return model.eval()


def _tiny(family: str, layers: int = 2):
    torch.manual_seed(0)
    common = dict(
        vocab_size=97,
        hidden_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        max_position_embeddings=256,
    )
    if family == "qwen2":
        return _sharpen(Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=True)))
    return _sharpen(LlamaForCausalLM(LlamaConfig(**common, rope_theta=50000.0, tie_word_embeddings=False)))


def _prompts(n: int = 7, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [3, 21, 9, 1, 14, 30, 6][:n]
    return [torch.randint(10, 97, (k,), generator=g).tolist() for k in lengths]


def _hf_generate(model, prompts, max_new_tokens, eos):
    width = max(map(len, prompts))
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    cfg = HFGenConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=0)
    with torch.no_grad():
        new = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, width:].tolist()
    out = []
    for row in new:
        stop = next((j for j, t in enumerate(row) if t in eos), None)
        out.append(row if stop is None else row[: stop + 1])
    return out


def _early_eos(model, prompts, cap):
    """End tokens that stop some greedy rows early and leave at least one row running to the cap."""
    free = _hf_generate(model, prompts, cap, [0])  # token 0 is never a prompt token; rows rarely emit it
    for row in range(len(free)):
        for pos in range(3, cap // 2):
            eos = [free[row][pos]]
            if any(eos[0] not in f for f in free):
                return eos
    raise AssertionError("no end token found that stops only some rows")


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_greedy_is_token_identical_to_generate(family):
    model = _tiny(family)
    prompts = _prompts()
    eos = _early_eos(model, prompts, 40)
    expected = _hf_generate(model, prompts, 40, eos)
    got = FastSampler(DecoderLM(model)).sample(prompts, 3, max_new_tokens=40, temperature=0.0, eos_ids=eos)
    lengths = [len(e) for e in expected]
    assert min(lengths) < 40 and max(lengths) == 40, lengths  # early EOS and a row at the cap: both paths ran
    for p in range(len(prompts)):
        assert got.tokens[p] == [expected[p]] * 3  # n greedy copies, all identical to generate


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_sampled_logprobs_equal_a_full_forward(family):
    model = _tiny(family)
    prompts = _prompts()
    temp = 0.7
    out = FastSampler(DecoderLM(model)).sample(
        prompts, 4, max_new_tokens=30, temperature=temp, top_p=0.9, eos_ids=EOS, seed=3
    )
    worst, n = 0.0, 0
    for p, group, lps in zip(prompts, out.tokens, out.logprobs):
        for r, lp in zip(group, lps):
            assert len(r) == len(lp) >= 1
            with torch.no_grad():
                logits = model(torch.tensor([p + r])).logits[0, len(p) - 1 : -1].float() / temp
            ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(r)[:, None])[:, 0]
            worst = max(worst, float((ref - lp).abs().max()))
            n += len(r)
    assert n > 100
    assert worst < 1e-4


def _chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    keep = probs > 0
    exp = probs[keep] * counts.sum()
    stat = float(((counts[keep] - exp) ** 2 / exp).sum())
    dof = int(keep.sum()) - 1
    return float(
        torch.special.gammaincc(
            torch.tensor(dof / 2.0, dtype=torch.float64), torch.tensor(stat / 2.0, dtype=torch.float64)
        )
    )


def _warped(logits: torch.Tensor, temp: float, top_p: float) -> torch.Tensor:
    """transformers' own temperature + top-p warpers, then softmax: the distribution to match."""
    x = TemperatureLogitsWarper(temp)(None, logits.clone().unsqueeze(0))
    x = TopPLogitsWarper(top_p)(None, x)
    return torch.softmax(x, -1)[0]


def test_draws_follow_temperature_and_top_p_exactly():
    logits = torch.tensor([2.0, 1.5, 1.4, 0.3, 0.0, -0.5, -1.0, -3.0, 0.9, 1.1])
    temp, top_p, n = 0.7, 0.8, 60_000
    target = _warped(logits, temp, top_p)
    assert 0 < int((target == 0).sum()) < len(logits) - 2  # the nucleus cuts some tokens and keeps several
    probs = nucleus_probs(torch.softmax(logits / temp, -1).expand(n, -1).contiguous(), top_p)
    u = torch.rand(n, generator=torch.Generator().manual_seed(0))
    tok = draw(probs, u)
    counts = torch.bincount(tok, minlength=len(logits)).double()
    assert counts[target == 0].sum() == 0  # nothing outside the nucleus
    assert _chi_square_p(counts, target.double()) > 1e-3
    # the test can fail: the same counts against the untruncated softmax are rejected
    assert _chi_square_p(counts, torch.softmax(logits / temp, -1).double()) < 1e-6


def test_sampler_first_tokens_follow_the_model_distribution():
    # a model with no layers: the next-token distribution depends on the last token only, so n samples of one
    # prompt's first token are n independent draws from one known distribution
    model = _tiny("qwen2", layers=0)
    prompt = [42]
    temp, top_p, n = 1.3, 0.9, 30_000
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1].float()
    target = _warped(logits, temp, top_p)
    out = FastSampler(DecoderLM(model)).sample(
        [prompt], n, max_new_tokens=1, temperature=temp, top_p=top_p, eos_ids=[0], seed=5
    )
    first = torch.tensor([r[0] for r in out.tokens[0]])
    counts = torch.bincount(first, minlength=logits.shape[0]).double()
    assert counts[target == 0].sum() == 0
    assert int((counts > 0).sum()) > 5
    assert _chi_square_p(counts, target.double()) > 1e-3


def test_seeded_and_independent_of_when_rows_are_dropped():
    model = _tiny("llama")
    prompts = _prompts(5)
    kw = dict(max_new_tokens=25, temperature=0.9, top_p=1.0, eos_ids=EOS)
    lm = DecoderLM(model)
    a = FastSampler(lm, compact_at=1.0).sample(prompts, 4, seed=11, **kw)  # drop finished rows at once
    b = FastSampler(lm, compact_at=0.01).sample(prompts, 4, seed=11, **kw)  # (almost) never drop them
    c = FastSampler(lm).sample(prompts, 4, seed=12, **kw)
    assert a.tokens == b.tokens
    # the same draws; their log-probs agree to float32 rounding (dropping rows changes the batch shape, and with it
    # the kernels' summation order on some CPUs: 4.8e-7 on an AMD EPYC here, bitwise equal on others)
    assert all(
        torch.allclose(x, y, rtol=0, atol=1e-5) for ga, gb in zip(a.logprobs, b.logprobs) for x, y in zip(ga, gb)
    )
    assert a.tokens != c.tokens
    lengths = [len(r) for g in a.tokens for r in g]
    assert min(lengths) < 25
    # dropped rows are not decoded: fewer row-steps than the batch times the steps
    assert a.row_steps < b.row_steps == b.steps * 20
    assert a.row_steps == sum(lengths) - len(lengths)  # exactly one row-step per token after the first


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_continuous_batching_is_token_identical_to_generate(family):
    # at most 2 live rows of 7 prompts: each prompt waits, is admitted when a row finishes, and attends only to
    # its own tokens of a cache whose columns other rows filled before it came in
    model = _tiny(family)
    prompts = _prompts()
    eos = _early_eos(model, prompts, 40)
    expected = _hf_generate(model, prompts, 40, eos)
    out = FastSampler(DecoderLM(model), max_rows=2).sample(prompts, 2, max_new_tokens=40, temperature=0.0, eos_ids=eos)
    assert [g[0] for g in out.tokens] == expected
    assert out.steps > 80  # rows ran one after another: more steps than the longest answer (the window slid)


def test_continuous_batching_samples_what_one_batch_samples():
    model = _tiny("llama")
    prompts = _prompts()
    kw = dict(max_new_tokens=25, temperature=0.9, top_p=0.9, eos_ids=EOS, seed=21)
    lm = DecoderLM(model)
    whole = FastSampler(lm).sample(prompts, 4, **kw)
    for max_rows in (4, 9, 12):  # one, two (9 -> 8 rows) and three prompts live at a time
        streamed = FastSampler(lm, max_rows=max_rows).sample(prompts, 4, **kw)
        assert streamed.tokens == whole.tokens, max_rows
        for ga, gb in zip(streamed.logprobs, whole.logprobs):
            assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(ga, gb))
        assert streamed.steps > whole.steps
    lengths = [len(r) for g in whole.tokens for r in g]
    assert min(lengths) < 25 == max(lengths)  # rows that stop early and rows at the cap
    # each prompt's own seeded stream: the same prompt sampled in another call, at another position, draws the same
    alone = FastSampler(lm).sample(prompts[:1], 4, **kw)
    assert alone.tokens[0] == whole.tokens[0]


def test_cache_admission_and_compaction_keep_each_rows_tokens():
    lm = DecoderLM(_tiny("qwen2"))
    cache = lm.gen_cache(6, 8, 2)
    cache.extend(torch.tensor([0, 1]))
    for step in range(3):  # two rows write columns 0..2
        for t in (*cache.k, *cache.v):  # views of the per-layer K/V tensor
            t[:2, :, step] = float(step + 1)
        cache.length += 1
    cache.extend(torch.tensor([2, 3]))  # two rows admitted: their tokens start at column 3
    assert cache.start.tolist() == [0, 0, 3, 3] and cache.mixed and cache.lo == 0
    bias = cache.own_bias()
    assert bias.shape == (4, 1, 1, 4)
    assert torch.isinf(bias[2:, 0, 0, :3]).all() and (bias[2:, 0, 0, 3] == 0).all() and (bias[:2] == 0).all()
    for t in (*cache.k, *cache.v):
        t[:4, :, 3] = 9.0
    cache.length += 1
    cache.keep(torch.tensor([2, 3]), torch.tensor([0, 1]))  # the first rows finished: the others move to column 0
    assert cache.rows == 2 and cache.length == 1 and cache.start.tolist() == [0, 0] and not cache.mixed
    assert all(bool((t[:2, :, 0] == 9.0).all()) for t in cache.k)
    with pytest.raises(ValueError, match="holds 6 rows"):
        cache.extend(torch.arange(5))


def test_weights_are_read_at_call_time():
    model = _tiny("qwen2")
    sampler = FastSampler(DecoderLM(model))
    prompts = _prompts(3)
    before = sampler.sample(prompts, 1, max_new_tokens=10, temperature=0.0, eos_ids=EOS).tokens
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # an in-place optimiser-like change (tied embeddings flip too)
    after = sampler.sample(prompts, 1, max_new_tokens=10, temperature=0.0, eos_ids=EOS).tokens
    assert after == [[e] for e in _hf_generate(model, prompts, 10, EOS)]
    assert after != before


def test_unsupported_models_are_named():
    assert supports(_tiny("qwen2")) and supports(_tiny("llama"))

    class Cfg:
        model_type = "gpt2"

    class M:
        config = Cfg()

    assert "model_type 'gpt2'" in unsupported_reason(M())
    with pytest.raises(ValueError, match="fast sampler: model_type 'gpt2'"):
        DecoderLM(M())


# ---- the generation backend ---------------------------------------------------------------------------
def _conversations():
    eps = tc.episodes()
    return [
        tc.first_prompt(eps[0]),
        [{"role": "user", "content": "find a Apple"}],
        tc.first_prompt(eps[3]),
        tc.first_prompt(eps[1]),
    ]


@pytest.mark.parametrize("which", ["fitted", "untrained"])
def test_fast_backend_equals_hf_backend_greedy(which):
    path = tc.fitted_model() if which == "fitted" else tc.text_model()
    cfg = dict(max_new_tokens=60 if which == "untrained" else 300, batch_size=3, device="cpu")
    hf = make_generator(path, GenerationConfig(backend="hf", **cfg)).complete(_conversations(), n=2)
    fast = make_generator(path, GenerationConfig(backend="fast", **cfg)).complete(_conversations(), n=2)
    assert fast == hf
    if which == "fitted":  # the fitted model writes a whole plan and stops: the stop path is compared too
        assert hf[0][0].finish_reason == "stop" and hf[0][0].completion_tokens > 20


def test_fast_backend_samples_reproducibly_and_rejects_vision_models():
    assert backend_class("fast") is FastGenerator
    gen = make_generator(
        tc.text_model(), GenerationConfig(backend="fast", max_new_tokens=20, batch_size=2, device="cpu")
    )
    a = gen.complete(_conversations(), temperature=0.8, n=3, seed=4)
    b = gen.complete(_conversations(), temperature=0.8, n=3, seed=4)
    assert a == b
    assert len({c.text for cs in a for c in cs}) > 3  # samples differ from each other
    assert all(c.completion_tokens <= 20 and c.prompt_tokens > 0 for cs in a for c in cs)
    with pytest.raises(ValueError, match="generation.backend=fast"):
        make_generator(tc.vl_model(), GenerationConfig(backend="fast", max_new_tokens=4, device="cpu"))


def test_chi_square_helper_rejects_a_wrong_distribution():
    counts = torch.tensor([500.0, 500.0])
    assert _chi_square_p(counts, torch.tensor([0.5, 0.5], dtype=torch.float64)) == pytest.approx(1.0)
    assert _chi_square_p(counts, torch.tensor([0.6, 0.4], dtype=torch.float64)) < 1e-6
    assert math.isfinite(
        _chi_square_p(torch.tensor([3.0, 1.0, 0.0]), torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))
    )


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_decode_step_shortcuts_are_bit_identical_to_the_module_path(family):
    """The fused RMSNorm, the rotary lookup table and the sign-folded rotation compute what transformers'
    modules compute, bit for bit (float32): not merely close, so greedy decoding cannot drift."""
    from embodied_rft.generation.decoder import _rms, _rope, _rope_swapped

    model = _tiny(family)
    lm = DecoderLM(model)
    norm = model.model.layers[0].input_layernorm
    x = torch.randn(5, 7, model.config.hidden_size, generator=torch.Generator().manual_seed(3)) * 4
    assert torch.equal(_rms(x, norm), norm(x))
    table = lm.rope_table(40)
    assert table is not None and table.size == 40
    pos = torch.tensor([[0, 3, 17, 39]])
    cos, sin = model.model.rotary_emb(x, pos)
    assert torch.equal(table.cos[pos[0]], cos[0])
    q = torch.randn(4, 6, lm.head_dim, generator=torch.Generator().manual_seed(4))
    c, s = cos[0].unsqueeze(1), sin[0].unsqueeze(1)
    assert torch.equal(_rope_swapped(q, c, table.sin_signed[pos[0]].unsqueeze(1)), _rope(q, c, s))
    # a length-dependent rotary module has no table: decode_step then calls the module every step
    model.model.rotary_emb.rope_type = "dynamic"
    assert lm.rope_table(40) is None
