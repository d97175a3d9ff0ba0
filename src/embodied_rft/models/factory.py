"""The model factory: build the base policy checkpoint, and load any checkpoint for training or inference.

Inputs: a :class:`ModelConfig` (``conf/model/<name>.yaml``) and, for the tiny kinds, the corpus of prompts
and responses the tokenizer learns from. Outputs: :func:`build_base_model` writes a Hugging Face checkpoint
folder (weights, config, generation config, tokenizer or processor, chat template, and
``embodied_rft_model.json`` describing where it came from), atomically; :func:`load_model` returns
``(model, tokenizer)`` for a causal LM or ``(model, processor)`` for a vision-language model.

Every later stage (SFT, GRPO, evaluation, serving) loads through :func:`load_model`, so text and VL
checkpoints, tiny and 7B, look the same to them. Loading never touches the network: hub ids resolve from the
local cache only (set ``HF_HUB_OFFLINE=1`` to make transformers itself refuse too).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from embodied_rft.core.atomic import atomic_directory
from embodied_rft.core.integrity import seal_folder

from ..config import as_dict
from .chat_template import END_OF_TEXT, chatml_template
from .config import ModelConfig
from .integrity import check_checkpoint
from .pretrained import copy_checkpoint, load_gguf, resolve_checkpoint
from .processor import load_processor
from .tiny import build_tiny
from .tokenizer import forget_load_kwargs

log = logging.getLogger(__name__)

CARD = "embodied_rft_model.json"


def is_vision_checkpoint(path: str | Path) -> bool:
    """Whether the checkpoint in ``path`` is a vision-language model (its config has a vision tower)."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    return "vision_config" in cfg


def _tokenizer_of(tok_or_proc: Any) -> Any:
    return getattr(tok_or_proc, "tokenizer", tok_or_proc)


def _apply_template(tok_or_proc: Any, cfg: ModelConfig, vision: bool) -> None:
    """Install the project's ChatML template (``chat_template: chatml``) on the tokenizer and processor."""
    if cfg.chat_template != "chatml":
        return
    template = chatml_template(vision=vision, default_system=cfg.default_system)
    tok_or_proc.chat_template = template
    _tokenizer_of(tok_or_proc).chat_template = template


def _set_image_pixels(processor: Any, cfg: ModelConfig) -> None:
    """Bound the image size (pixels) the processor resizes to; the paper capped it at 262144."""
    size = dict(processor.image_processor.size)
    size["shortest_edge"], size["longest_edge"] = cfg.image_min_pixels, cfg.image_max_pixels
    processor.image_processor.size = size
    for attr, v in (("min_pixels", cfg.image_min_pixels), ("max_pixels", cfg.image_max_pixels)):
        if hasattr(processor.image_processor, attr):
            setattr(processor.image_processor, attr, v)


def _set_pad_token(model: Any, tok: Any) -> None:
    """Give checkpoints that pad with their end token a distinct pad token when the vocabulary has one:
    padding with ``<|im_end|>`` would hide the end of every answer from a loss that masks padding by id."""
    if tok.pad_token is None or tok.pad_token == tok.eos_token:
        if END_OF_TEXT in tok.get_vocab() and tok.eos_token != END_OF_TEXT:
            tok.pad_token = END_OF_TEXT
        elif tok.pad_token is None:
            tok.pad_token = tok.eos_token
    model.config.pad_token_id = tok.pad_token_id
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tok.pad_token_id


def _write_card(out: Path, cfg: ModelConfig, model: Any | None, source: str) -> None:
    card = {
        "model": as_dict(cfg),
        "source": source,
        "parameters": model.num_parameters() if model is not None else None,
        "vision": is_vision_checkpoint(out),
    }
    (out / CARD).write_text(json.dumps(card, indent=2) + "\n")


def build_base_model(model_cfg: ModelConfig, corpus: Iterable[str], out_dir: str | Path) -> Path:
    """Write the base (untrained-by-us) checkpoint for ``model_cfg`` into ``out_dir``; returns ``out_dir``.

    tiny / tiny_vl: train the tokenizer on ``corpus`` and initialise the model with ``model_cfg.seed``.
    gguf: de-quantise and save. pretrained: copy (weights hard-linked) the local checkpoint, then install
    the chat template if ``chat_template: chatml`` and, for vision models, the image pixel bounds.
    ``corpus`` is only read by the tiny kinds.
    """
    cfg = model_cfg
    out_dir = Path(out_dir)
    with atomic_directory(out_dir) as tmp:
        if cfg.kind in ("tiny", "tiny_vl"):
            model, tok = build_tiny(cfg, corpus)
            source = "initialised from scratch"
        elif cfg.kind == "gguf":
            model, tok = load_gguf(cfg)
            _apply_template(tok, cfg, vision=False)
            _set_pad_token(model, tok)
            source = f"de-quantised from GGUF {cfg.gguf_file}"
        else:  # pretrained: copy the files as they are, no load/save round trip of a 16 GB model
            src = resolve_checkpoint(str(cfg.path))
            copy_checkpoint(src, tmp)
            vision = is_vision_checkpoint(tmp)
            if vision or cfg.chat_template == "chatml":
                tok = (
                    load_processor(tmp, trust_remote_code=cfg.trust_remote_code) if vision else load_tokenizer(tmp, cfg)
                )
                _apply_template(tok, cfg, vision)
                if vision:
                    _set_image_pixels(tok, cfg)
                tok.save_pretrained(tmp)
            _write_card(tmp, cfg, None, f"copied from {src}")
            seal_folder(tmp)
            log.info("copied %s into %s", src, out_dir)
            return out_dir
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        _write_card(tmp, cfg, model, source)
        seal_folder(tmp)  # checksums.sha256: check_checkpoint verifies it on every load
        log.info("wrote base model %s (%s) to %s", cfg.name, source, out_dir)
    return out_dir


def load_tokenizer(path: Path, cfg: ModelConfig | None = None) -> Any:
    """The checkpoint's tokenizer, with the pipeline its ``tokenizer.json`` declares.

    transformers 5 maps ``model_type: qwen2`` to ``Qwen2Tokenizer`` even when ``tokenizer_config.json`` names
    ``TokenizersBackend``, and that class rebuilds Qwen2's own pre-tokenizer, silently replacing the one the
    tiny models' BPE was trained with (their merges then never apply across a phrase). A checkpoint saved as
    ``TokenizersBackend`` (every tiny model) is therefore loaded as exactly that.
    """
    from transformers import AutoTokenizer

    declared = None
    config_file = Path(path) / "tokenizer_config.json"
    if config_file.is_file():
        try:
            declared = json.loads(config_file.read_text(encoding="utf-8")).get("tokenizer_class")
        except (OSError, ValueError) as exc:
            raise ValueError(f"{config_file}: not a readable tokenizer config: {exc}") from exc
    if declared == "TokenizersBackend":
        from transformers import TokenizersBackend

        return forget_load_kwargs(TokenizersBackend.from_pretrained(path))
    return forget_load_kwargs(
        AutoTokenizer.from_pretrained(path, trust_remote_code=bool(cfg and cfg.trust_remote_code))
    )


def _finish(model: Any, for_training: bool) -> Any:
    if for_training:
        model.train()
        model.requires_grad_(True)
    else:
        model.eval()
        model.requires_grad_(False)
    return model


def load_model(
    path_or_cfg: str | Path | ModelConfig,
    for_training: bool = False,
    *,
    dtype: str | None = None,
    attn_implementation: str | None = None,
) -> tuple[Any, Any]:
    """``(model, tokenizer_or_processor)`` from a checkpoint folder, a hub id, or a :class:`ModelConfig`.

    ``for_training``: train mode with gradients on every parameter (freezing is the trainer's business);
    otherwise eval mode with gradients off. ``dtype``: "float32" | "bfloat16" | "float16" | "auto" (as
    saved; the default for folders) — a config's own ``dtype`` is used for configs.
    A tiny-kind config has no checkpoint until :func:`build_base_model` made one: pass that folder.
    """
    if isinstance(path_or_cfg, ModelConfig):
        cfg = path_or_cfg
        if cfg.kind in ("tiny", "tiny_vl"):
            raise ValueError(
                f"model.kind={cfg.kind}: a tiny model exists only after build_base_model(cfg, corpus, out_dir) "
                "has trained its tokenizer; load that folder instead"
            )
        if cfg.kind == "gguf":
            model, tok = load_gguf(cfg)
            _apply_template(tok, cfg, vision=False)
            _set_pad_token(model, tok)
            return _finish(model, for_training), tok
        path = resolve_checkpoint(str(cfg.path))
        check_checkpoint(path)
        model, tok = _load_folder(
            path, dtype or cfg.dtype, attn_implementation or cfg.attn_implementation, cfg.trust_remote_code
        )
        vision = is_vision_checkpoint(path)
        _apply_template(tok, cfg, vision)
        if vision:
            _set_image_pixels(tok, cfg)
        return _finish(model, for_training), tok
    path = resolve_checkpoint(str(path_or_cfg))
    check_checkpoint(path)  # a cut-short file fails here, named, instead of deep inside transformers
    model, tok = _load_folder(path, dtype or "auto", attn_implementation or "sdpa", False)
    return _finish(model, for_training), tok


def _load_folder(path: Path, dtype: str, attn: str, trust_remote_code: bool) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    kwargs = {"dtype": dtype, "attn_implementation": attn, "trust_remote_code": trust_remote_code}
    if is_vision_checkpoint(path):
        model = AutoModelForImageTextToText.from_pretrained(path, **kwargs)
        tok = load_processor(path, trust_remote_code=trust_remote_code)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        tok = load_tokenizer(path)
    log.info("loaded %s (%s, %.1fM parameters)", path, type(model).__name__, model.num_parameters() / 1e6)
    return model, tok
