"""Rollout layout of the local engine (grpo_rollout) for text and vision models, and the VLM engine path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from embodied_rft.core.padding import left_pad
from embodied_rft.core.vision import freeze_vision
from embodied_rft.filtering import FilterConfig
from embodied_rft.models import load_model
from embodied_rft.train.grpo.driver import run_grpo_local
from embodied_rft.train.grpo.rollout import PolicyIO, _cat_mm, _token_mm, sample_responses, sequence_logprobs
from tests.helpers.grpo import tiny_cfg
from tests.helpers.grpo_fixtures import grpo_samples, sft_policy, vl_data

pytestmark = pytest.mark.usefixtures("one_thread")


def _generate_with_logits(model, io, prompts, n_new, temperature):
    """HF's own incremental decoding: greedy tokens and the temperature-scaled log-prob of each."""
    ids, mask = left_pad([p.ids for p in prompts], io.pad_id)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        **_cat_mm([p.mm for p in prompts], "cpu"),
        **_token_mm(prompts),
        do_sample=False,
        max_new_tokens=n_new,
        min_new_tokens=n_new,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=io.pad_id,
        eos_token_id=None,
    )
    new = out.sequences[:, ids.shape[1] :]
    logits = torch.stack(out.logits, dim=1).float() / temperature
    logp = torch.log_softmax(logits, -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    return new.tolist(), logp


@pytest.mark.parametrize("kind", ["text", "vision"])
def test_training_layout_reproduces_generation_logprobs(kind):
    torch.manual_seed(0)
    if kind == "text":
        model, tok = load_model(sft_policy())
        io = PolicyIO(tok, 256)
        samples = grpo_samples()
    else:
        policy, path = vl_data()
        model, tok = load_model(policy)
        io = PolicyIO(tok, 512, image_root=path.parent)
        samples = [json.loads(line) for line in path.read_text().splitlines()]
    # prompts of different lengths, so left padding and position ids matter
    prompts = [io.encode(samples[0], 0), io.encode(samples[3], 3)]
    assert len(prompts[0].ids) != len(prompts[1].ids)
    if kind == "vision":
        assert set(prompts[0].mm) >= {"pixel_values", "image_grid_thw"}
    new, ref = _generate_with_logits(model, io, prompts, 12, temperature=0.7)
    got = sequence_logprobs(model, list(zip(prompts, new)), io, 0.7, micro_batch_size=2, device="cpu")
    for i in range(2):
        assert torch.allclose(got[i], ref[i], atol=2e-4), (got[i] - ref[i]).abs().max()


def test_sampling_is_seeded_and_cut_at_the_end_token():
    model, tok = load_model(sft_policy())
    io = PolicyIO(tok, 256)
    io.add_model_eos(model)
    prompts = [io.encode(s, i) for i, s in enumerate(grpo_samples()[:2])]
    a = sample_responses(model, io, prompts, 3, temperature=1.0, top_p=0.95, max_new_tokens=60, seed=7)
    b = sample_responses(model, io, prompts, 3, temperature=1.0, top_p=0.95, max_new_tokens=60, seed=7)
    assert a == b and len(a) == 2 and all(len(g) == 3 for g in a)
    eos = set(io.eos_ids)
    for group in a:
        for r in group:
            # an end token, if any, is the last token kept; nothing after it
            assert all(t not in eos for t in r[:-1])


def test_vision_tower_is_frozen():
    policy, _ = vl_data()
    model, _ = load_model(policy, for_training=True)
    n = freeze_vision(model)
    frozen = {k for k, p in model.named_parameters() if not p.requires_grad}
    assert n > 0 and frozen and all("visual" in k for k in frozen)
    assert any(p.requires_grad for k, p in model.named_parameters() if "language_model" in k or "lm_head" in k)


def test_vision_model_runs_through_the_engine(tmp_path: Path):
    policy, path = vl_data()
    cfg = tiny_cfg(
        group_size=2,
        max_new_tokens=6,
        max_prompt_tokens=512,
        filter=FilterConfig(enabled=False, drop_zero_variance=False, buffer_size=2, updates_per_buffer=1),
        micro_batch_size=2,
        max_updates=1,
        num_episodes=1,
        eval_max_samples=2,
        eval_batch_size=2,
    )
    m = run_grpo_local(
        cfg, policy, path, path, tmp_path / "out", tmp_path / "m.json", tmp_path / "p.json", tmp_path / "w"
    )
    assert m["updates"] == 1 and m["heldout"]["before"]["samples"] == 2
    row = m["history"][0]
    assert row["update_sequences"] == 4 and row["update_tokens"] > 0
    assert row["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    # the processor (not just the tokenizer) was saved with the model
    assert (tmp_path / "out" / "preprocessor_config.json").exists() or (
        tmp_path / "out" / "processor_config.json"
    ).exists()
    assert json.loads((tmp_path / "p.json").read_text())[0]["update"] == 1
