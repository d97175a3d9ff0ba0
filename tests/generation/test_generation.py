"""The generation backends: message/image normalisation, the registry, and the transformers backend on tiny
checkpoints (batching with left padding, greedy vs sampling, finish reasons, images for the VL model)."""

from __future__ import annotations

import pytest
from PIL import Image

from embodied_rft.config import ConfigError, build
from embodied_rft.generation import (
    GenerationConfig,
    backend_class,
    content_parts,
    make_generator,
    text_only,
)
from embodied_rft.generation.hf import HFGenerator
from tests.helpers import tiny_checkpoints as tc


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with tc.one_thread():
        yield


RED = Image.new("RGB", (32, 32), (255, 0, 0))
BLUE = Image.new("RGB", (32, 32), (0, 0, 255))


# ---- pure helpers ---------------------------------------------------------------------------------
def test_placeholder_becomes_an_image_part_in_place():
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Task: x\nObservation: <image>\nPlan."}]
    out, imgs = content_parts(msgs, [RED])
    assert out[0] == {"role": "system", "content": [{"type": "text", "text": "sys"}]}
    assert out[1]["content"] == [
        {"type": "text", "text": "Task: x\nObservation: "},
        {"type": "image"},
        {"type": "text", "text": "\nPlan."},
    ]
    assert imgs == [RED]


def test_explicit_parts_keep_their_images_and_leftovers_go_first_in_last_user_message():
    msgs = [
        {"role": "user", "content": [{"type": "image", "image": RED}, {"type": "text", "text": "a"}]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "b"},
    ]
    out, imgs = content_parts(msgs, [BLUE])
    assert imgs == [RED, BLUE]
    assert out[0]["content"] == [{"type": "image"}, {"type": "text", "text": "a"}]
    assert out[2]["content"] == [{"type": "image"}, {"type": "text", "text": "b"}]  # EB puts the frame first


def test_more_placeholders_than_images_is_an_error():
    with pytest.raises(ValueError, match="placeholders"):
        content_parts([{"role": "user", "content": "<image> and <image>"}], [RED])


def test_text_only_joins_text_parts_and_rejects_images():
    assert text_only([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]) == [
        {"role": "user", "content": "ab"}
    ]
    with pytest.raises(ValueError, match="no image processor"):
        text_only([{"role": "user", "content": [{"type": "image"}]}])


def test_registry_and_config_checks():
    assert backend_class("hf") is HFGenerator
    with pytest.raises(ValueError, match=r"unknown backend 'tgi'.*\['fast', 'hf', 'vllm'\]"):
        backend_class("tgi")
    with pytest.raises(ConfigError, match=r"^evaluate\.generation\.temperature: must be in \[0, 5\]"):
        build(GenerationConfig, {"temperature": -1}, "evaluate.generation")
    with pytest.raises(ConfigError, match=r"^evaluate\.generation\.backend: 'tgi' is not one of"):
        build(GenerationConfig, {"backend": "tgi"}, "evaluate.generation")
    assert build(GenerationConfig, {"max_new_tokens": 7}, "g").greedy


# ---- transformers backend -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def text_gen():
    return make_generator(tc.text_model(), GenerationConfig(max_new_tokens=12, batch_size=2, device="cpu"))


def _prompts():
    eps = tc.episodes()
    return [tc.first_prompt(eps[0]), [{"role": "user", "content": "find a Apple"}], tc.first_prompt(eps[1])]


def test_greedy_batched_with_left_padding_equals_one_by_one(text_gen):
    prompts = _prompts()
    batched = text_gen.complete(prompts)
    single = [text_gen.complete([p])[0] for p in prompts]
    assert [c[0].text for c in batched] == [c[0].text for c in single]
    assert [c[0].prompt_tokens for c in batched] == [c[0].prompt_tokens for c in single]
    # the short prompt really was padded inside a batch with a long one
    assert batched[1][0].prompt_tokens < batched[0][0].prompt_tokens


def test_untrained_model_runs_to_the_token_limit(text_gen):
    ((c,),) = text_gen.complete([_prompts()[1]], max_new_tokens=5)
    assert (c.finish_reason, c.completion_tokens) == ("length", 5)


def test_greedy_n_copies_and_seeded_sampling(text_gen):
    p = [_prompts()[1]]
    greedy = text_gen.generate(p, n=3)[0]
    assert len(greedy) == 3 and len(set(greedy)) == 1
    a = text_gen.generate(p, temperature=1.0, n=4, seed=11)[0]
    b = text_gen.generate(p, temperature=1.0, n=4, seed=11)[0]
    c = text_gen.generate(p, temperature=1.0, n=4, seed=12)[0]
    assert a == b
    assert a != c
    assert len(set(a)) > 1  # an untrained model's samples differ from each other


def test_bad_call_arguments(text_gen):
    with pytest.raises(ValueError, match="n must be >= 1"):
        text_gen.generate([_prompts()[1]], n=0)
    with pytest.raises(ValueError, match="one entry per conversation"):
        text_gen.generate(_prompts(), images=[None])
    with pytest.raises(ValueError, match="cannot take images"):
        text_gen.generate([_prompts()[1]], images=[RED])


def test_fitted_model_reproduces_the_expert_answer_and_stops():
    gen = make_generator(tc.fitted_model(), GenerationConfig(max_new_tokens=300, device="cpu"))
    ep = tc.episodes()[0]
    ((c,),) = gen.complete([tc.first_prompt(ep)])
    assert c.text == tc.expert_response(ep)
    assert c.finish_reason == "stop"
    assert c.completion_tokens < 300


def test_vision_model_takes_images_through_the_processor():
    gen = make_generator(tc.vl_model(), GenerationConfig(max_new_tokens=4, device="cpu"))
    assert gen.supports_images
    msgs = [{"role": "user", "content": "Observation: <image>\nPlan the remaining actions."}]
    ((with_img,),) = gen.complete([msgs], images=[RED])
    ((without,),) = gen.complete([[{"role": "user", "content": "Observation: \nPlan the remaining actions."}]])
    # the image became vision tokens in the prompt (112x112 max -> at most 16 merged tokens + 2 markers)
    assert with_img.prompt_tokens > without.prompt_tokens
    assert with_img.completion_tokens == 4
    # a mixed batch (images of two sizes, one prompt without) is left-padded like a text batch
    convs = [
        msgs,
        [{"role": "system", "content": "A longer system prompt, so the rows differ in length."}, *msgs],
        [{"role": "user", "content": "no image here"}],
    ]
    imgs = [RED, Image.new("RGB", (100, 60), (0, 0, 255)), None]
    batched = gen.complete(convs, images=imgs)
    single = [gen.complete([c], images=None if i is None else [i])[0] for c, i in zip(convs, imgs, strict=True)]
    assert [(c[0].text, c[0].prompt_tokens) for c in batched] == [(c[0].text, c[0].prompt_tokens) for c in single]
    assert len({c[0].prompt_tokens for c in batched}) == 3
