"""The ``sft:`` config section (paper §1.2: supervised fine-tuning on teacher-distilled responses).

Input: the ``sft`` mapping of the composed config, read with ``config.build(SFTConfig, section, "sft")``.
Output: a frozen, self-checking :class:`SFTConfig`.

Defaults are the paper's settings where its released code states them (RR code, LLaMA-Factory
``examples/train_full/qwen2vl_full_sft.yaml``; docs/facts.md §1.2): lr 1e-5, 3 epochs, cosine schedule, warmup 0.1,
cutoff 2048 tokens, per-device batch 1 with 2 accumulation steps (on 4 GPUs: 8 sequences per update), bf16,
DeepSpeed ZeRO-3, vision tower and projector frozen, full fine-tuning, checkpoints every 500 steps. The tiny
CPU run overrides lr, batch and length in ``conf/experiment/tiny.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from embodied_rft.config import check

# Every linear layer of a Qwen2 / Llama decoder block (LLaMA-Factory's `lora_target: all` for these models).
_ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters instead of full fine-tuning (paper: full fine-tuning was slightly better than LoRA).
    The adapters are merged into the weights when saving, so later stages load an ordinary checkpoint."""

    # Train LoRA adapters (true) or every language-model weight (false, the paper's choice).
    enabled: bool = False
    # Adapter rank. RR code's LoRA example: 8.
    r: int = 8
    # Adapter scale numerator (scale = alpha / r). LLaMA-Factory's default: 2 x rank.
    alpha: int = 16
    # Dropout on the adapter input. LLaMA-Factory's default: 0.
    dropout: float = 0.0
    # Module names that get adapters (vision modules are excluded when freeze_vision is on).
    target_modules: tuple[str, ...] = _ALL_LINEAR

    def __post_init__(self) -> None:
        check(self.r >= 1, "sft.lora.r", f"must be >= 1, got {self.r}")
        check(self.alpha >= 1, "sft.lora.alpha", f"must be >= 1, got {self.alpha}")
        check(0.0 <= self.dropout < 1.0, "sft.lora.dropout", f"must be in [0, 1), got {self.dropout}")
        check(len(self.target_modules) > 0, "sft.lora.target_modules", "must name at least one module")


@dataclass(frozen=True)
class ValSettings:
    """Held-out check after training: greedy answers to held-out prompts, parsed as EB responses."""

    # Held-out prompts to answer (first N records of the val file; 0 = skip the check). Each costs a
    # greedy generation of up to max_new_tokens, so keep it small on a CPU.
    max_samples: int = 32
    # New-token cap per answer (a random-init model never stops: docs/calibration.md §3.5).
    max_new_tokens: int = 256
    # Prompts per generation batch.
    batch_size: int = 8
    # Also run the check every N optimiser steps during training (0 = only at the end).
    every_steps: int = 0


@dataclass(frozen=True)
class SFTConfig:
    """Supervised fine-tuning on ``data/distilled/sft.jsonl`` (loss on assistant tokens only)."""

    # Peak learning rate (AdamW). Paper/RR: 1e-5 (full), 1e-4 (LoRA). Tiny from scratch: ~1e-3.
    lr: float = 1e-5
    # Passes over the data. Paper/RR: 3. Ignored when max_steps is set.
    epochs: float = 3.0
    # Stop after this many optimiser steps instead of `epochs` (null = use epochs).
    max_steps: int | None = None
    # Sequences per device per forward pass. RR: 1.
    batch_size: int = 1
    # Forward passes accumulated per optimiser step. RR: 2 (x 4 GPUs = 8 sequences per step).
    grad_accum: int = 2
    # Fraction of the steps spent warming the learning rate up linearly from 0. RR: 0.1.
    warmup_ratio: float = 0.1
    # Learning-rate schedule after warm-up (transformers names). RR: cosine.
    scheduler: Literal["cosine", "linear", "constant_with_warmup", "cosine_with_min_lr"] = "cosine"
    # AdamW weight decay. LLaMA-Factory's default: 0.
    weight_decay: float = 0.0
    # Gradient-norm clip. LLaMA-Factory's default: 1.0.
    max_grad_norm: float = 1.0
    # Token cutoff per example (prompt + response, image tokens included); longer ones are cut at the end.
    # RR: cutoff_len 2048.
    max_len: int = 2048
    # LoRA settings (off = full fine-tuning, the paper's choice).
    lora: LoraSettings = field(default_factory=LoraSettings)
    # Freeze the vision tower and its projector (vision models only). Paper/RR: frozen.
    freeze_vision: bool = True
    # Seed of initial state, data order and dropout.
    seed: int = 0
    # Save a resumable checkpoint every N optimiser steps. RR: 500.
    save_steps: int = 500
    # Checkpoints kept in the work folder (older ones are deleted).
    save_total_limit: int = 2
    # auto: resume from the newest checkpoint in the work folder when one from the same run exists;
    # never: always start over (the work folder is cleared).
    resume: Literal["auto", "never"] = "auto"
    # Keep the work folder (checkpoints) after a successful run; off saves disk (a 7B checkpoint is ~50 GB
    # with optimiser state).
    keep_checkpoints: bool = False
    # Log loss and learning rate every N optimiser steps (one row of the loss-curve plot each). RR: 10.
    logging_steps: int = 10
    # bfloat16 mixed precision (GPU). Paper/RR: bf16.
    bf16: bool = False
    # Recompute activations in backward to save memory (slower; needed for 7B on 40 GB cards).
    gradient_checkpointing: bool = False
    # DeepSpeed config file (JSON or YAML) passed to the trainer; null = none. Paper/RR: ZeRO-3
    # (conf/accelerate/ds_zero3.yaml). With `accelerate launch --config_file conf/accelerate/zero3.yaml` the
    # launcher's DeepSpeed settings are used instead and this stays null.
    deepspeed: str | None = None
    # Where metrics go besides metrics JSON: none | wandb | tensorboard (several allowed). RR: tensorboard.
    report_to: tuple[str, ...] = ()
    # Weights & Biases mode when wandb is in report_to: offline (default; sync later) | online | disabled.
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    # Weights & Biases project name.
    wandb_project: str = "embodied_rft"
    # Batch samples of similar length together (transformers' LengthGroupedSampler: shuffled mega-batches sorted
    # by length), so little of each batch is padding: faster steps on the tiny default, whose samples vary in
    # length (docs/experiments.md). RR/paper: off (LLaMA-Factory packs instead).
    group_by_length: bool = False
    # Data-loader worker processes (0 = load in the training process; VL image decoding may want 2-4).
    dataloader_workers: int = 0
    # CPU threads for torch (0 = torch's default). The CPU default run shares 2 cores.
    num_threads: int = 0
    # cpu | auto (the accelerator when there is one).
    device: Literal["auto", "cpu"] = "auto"
    # Held-out JSON-format check.
    val: ValSettings = field(default_factory=ValSettings)

    def __post_init__(self) -> None:
        check(self.lr > 0, "sft.lr", f"must be > 0, got {self.lr}")
        check(self.epochs > 0, "sft.epochs", f"must be > 0, got {self.epochs}")
        check(
            self.max_steps is None or self.max_steps >= 1,
            "sft.max_steps",
            f"must be >= 1 or null (use epochs), got {self.max_steps}",
        )
        check(self.batch_size >= 1, "sft.batch_size", f"must be >= 1, got {self.batch_size}")
        check(self.grad_accum >= 1, "sft.grad_accum", f"must be >= 1, got {self.grad_accum}")
        check(0.0 <= self.warmup_ratio < 1.0, "sft.warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio}")
        check(self.weight_decay >= 0, "sft.weight_decay", f"must be >= 0, got {self.weight_decay}")
        check(self.max_grad_norm > 0, "sft.max_grad_norm", f"must be > 0, got {self.max_grad_norm}")
        check(self.max_len >= 16, "sft.max_len", f"must be >= 16 tokens, got {self.max_len}")
        check(self.save_steps >= 1, "sft.save_steps", f"must be >= 1, got {self.save_steps}")
        check(
            self.save_total_limit >= 1,
            "sft.save_total_limit",
            f"must be >= 1 (resume needs one), got {self.save_total_limit}",
        )
        check(self.logging_steps >= 1, "sft.logging_steps", f"must be >= 1, got {self.logging_steps}")
        bad = [r for r in self.report_to if r not in ("none", "wandb", "tensorboard")]
        check(not bad, "sft.report_to", f"each entry must be none, wandb or tensorboard; got {bad}")
        check(self.dataloader_workers >= 0, "sft.dataloader_workers", f"must be >= 0, got {self.dataloader_workers}")
        check(self.num_threads >= 0, "sft.num_threads", f"must be >= 0 (0 = torch default), got {self.num_threads}")
        check(self.val.max_samples >= 0, "sft.val.max_samples", f"must be >= 0, got {self.val.max_samples}")
        check(self.val.max_new_tokens >= 1, "sft.val.max_new_tokens", f"must be >= 1, got {self.val.max_new_tokens}")
        check(self.val.batch_size >= 1, "sft.val.batch_size", f"must be >= 1, got {self.val.batch_size}")
        check(self.val.every_steps >= 0, "sft.val.every_steps", f"must be >= 0, got {self.val.every_steps}")
