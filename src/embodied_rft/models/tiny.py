"""Build the tiny models from scratch: ``tiny`` (Qwen2 causal LM) and ``tiny_vl`` (Qwen2.5-VL).

Input: a :class:`ModelConfig` of kind ``tiny`` or ``tiny_vl`` and the corpus (prompts and responses) the
tokenizer is trained on. Output: ``(model, tokenizer_or_processor)``, randomly initialised with
``cfg.seed``; :func:`embodied_rft.models.build_base_model` saves them.

Both use the paper's architecture family at toy scale, so every code path a Qwen2.5-VL-7B run takes (chat
template, rotary positions, image tokens, the vision tower, ``generate``) is exercised on a CPU. The VL
model's images go through ``Qwen2VLImageProcessorPil`` (pure PIL/numpy; the torchvision-backed processor is
not usable here) with a small ``image_max_pixels``, so a frame costs ~16 language tokens instead of the
7B's hundreds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from .chat_template import END_OF_TEXT, IM_END, IMAGE_PAD, VIDEO_PAD, VISION_END, VISION_START
from .config import ModelConfig, TextArch
from .tokenizer import train_tokenizer

log = logging.getLogger(__name__)


def _text_kwargs(arch: TextArch, tok: Any) -> dict:
    return {
        "vocab_size": len(tok),
        "hidden_size": arch.hidden_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads,
        "intermediate_size": arch.intermediate_size,
        "max_position_embeddings": arch.max_position_embeddings,
        "rope_parameters": {"rope_type": "default", "rope_theta": arch.rope_theta},
        "tie_word_embeddings": arch.tie_word_embeddings,
        "bos_token_id": None,
        "eos_token_id": tok.convert_tokens_to_ids(IM_END),
        "pad_token_id": tok.convert_tokens_to_ids(END_OF_TEXT),
    }


def _generation_config(tok: Any):
    from transformers import GenerationConfig

    # Stop on either end token, as Qwen2.5-Instruct's generation_config does.
    return GenerationConfig(
        eos_token_id=[tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(END_OF_TEXT)],
        pad_token_id=tok.convert_tokens_to_ids(END_OF_TEXT),
        bos_token_id=None,
    )


def _mrope_section(head_dim: int) -> list[int]:
    # Qwen2.5-VL splits the rotary half-width into (time, height, width) sections 1/4 : 3/8 : 3/8
    # ([16, 24, 24] for its head width 128); the same proportions at any head width.
    half = head_dim // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


def build_tiny(cfg: ModelConfig, corpus: Iterable[str]) -> tuple[Any, Any]:
    """A freshly initialised tiny model and its tokenizer (``tiny``) or processor (``tiny_vl``)."""
    import torch

    if cfg.kind not in ("tiny", "tiny_vl"):
        raise ValueError(f"model.kind: build_tiny builds tiny and tiny_vl, got {cfg.kind!r}")
    vision = cfg.kind == "tiny_vl"
    tok = train_tokenizer(
        corpus,
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        pre_split=cfg.pre_split,
        vision=vision,
        max_length=cfg.text.max_position_embeddings,
    )
    torch.manual_seed(cfg.seed)
    if not vision:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        config = Qwen2Config(**_text_kwargs(cfg.text, tok), attention_dropout=0.0, use_sliding_window=False)
        config._attn_implementation = cfg.attn_implementation
        model = Qwen2ForCausalLM(config)
        model.generation_config = _generation_config(tok)
        log.info("built tiny Qwen2: %.2fM parameters, vocab %d", model.num_parameters() / 1e6, len(tok))
        return model, tok

    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLImageProcessorPil,
    )

    from .processor import ImageOnlyQwen2_5_VLProcessor

    v, t = cfg.vision, cfg.text
    text = _text_kwargs(t, tok)
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": _mrope_section(t.hidden_size // t.num_heads)}
    tie = text.pop("tie_word_embeddings")
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config={
            "depth": v.depth,
            "hidden_size": v.hidden_size,
            "num_heads": v.num_heads,
            "intermediate_size": v.intermediate_size,
            "patch_size": v.patch_size,
            "spatial_merge_size": v.spatial_merge_size,
            "temporal_patch_size": v.temporal_patch_size,
            "window_size": v.window_size,
            "out_hidden_size": t.hidden_size,
            # full attention in the last block, windowed before it, as in the 7B's block pattern
            "fullatt_block_indexes": [v.depth - 1],
        },
        image_token_id=tok.convert_tokens_to_ids(IMAGE_PAD),
        video_token_id=tok.convert_tokens_to_ids(VIDEO_PAD),
        vision_start_token_id=tok.convert_tokens_to_ids(VISION_START),
        vision_end_token_id=tok.convert_tokens_to_ids(VISION_END),
        tie_word_embeddings=tie,
    )
    config._attn_implementation = cfg.attn_implementation
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config = _generation_config(tok)
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=cfg.image_min_pixels,
        max_pixels=cfg.image_max_pixels,
        patch_size=v.patch_size,
        temporal_patch_size=v.temporal_patch_size,
        merge_size=v.spatial_merge_size,
    )
    processor = ImageOnlyQwen2_5_VLProcessor(
        image_processor=image_processor, tokenizer=tok, chat_template=tok.chat_template
    )
    n_vis = sum(p.numel() for n, p in model.named_parameters() if "visual" in n)
    log.info(
        "built tiny Qwen2.5-VL: %.2fM parameters (vision %.2fM), vocab %d",
        model.num_parameters() / 1e6,
        n_vis / 1e6,
        len(tok),
    )
    return model, processor
