"""The SFT stage's library entry (paper §1.2): maximise log π(â | p) on teacher-distilled responses.

Inputs: an :class:`SFTConfig`, the base checkpoint folder (``models/base``, from
:func:`embodied_rft.models.build_base_model`), ``data/distilled/sft.jsonl`` (chat records, see
:mod:`embodied_rft.train.sft.data`), optionally held-out prompts (``val_data``) and a work folder for
checkpoints. Outputs, all written atomically: ``out_dir`` (``models/sft``: a Hugging Face checkpoint with
its tokenizer or processor, loadable by :func:`embodied_rft.models.load_model`), ``metrics_path`` (final
loss, steps, tokens/s, train time, parameter counts, the held-out format check) and ``plots_path`` (loss
curve rows ``step,loss,lr`` for ``dvc plots``).

Training runs in TRL's ``SFTTrainer`` (transformers ``Trainer`` underneath): loss on assistant tokens only
(``assistant_only_loss`` with the chat template's ``{% generation %}`` markers), full fine-tuning or LoRA,
vision tower and projector frozen, AdamW with warm-up and a cosine schedule, gradient accumulation, a token
cutoff, seeded data order, checkpoints every ``save_steps`` into the work folder, and resume from the newest
checkpoint of the same run after a kill (``resume: auto``). The final model is trained in the work folder
and swapped into ``out_dir`` only when training finished. The same code scales out with
``accelerate launch`` (DeepSpeed ZeRO-3 configs in ``conf/accelerate/``).

Departures from the paper: the paper used LLaMA-Factory; the trainer here is TRL (same objective: cross-entropy
on the response tokens, same schedule and settings). LoRA adapters are merged before saving so every later
stage loads one kind of checkpoint.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rft.config import ConfigError, as_dict
from embodied_rft.core.atomic import replace_directory, write_json_atomic, write_text_atomic
from embodied_rft.core.integrity import seal_folder
from embodied_rft.core.metrics import write_metrics
from embodied_rft.core.vision import VISION_MODULE_REGEX, freeze_vision, is_vision_model
from embodied_rft.models import load_model
from embodied_rft.models.factory import CARD
from embodied_rft.train.sft.config import SFTConfig
from embodied_rft.train.sft.data import read_sft_records, to_train_dataset
from embodied_rft.train.sft.heldout import format_metrics, read_val_prompts
from embodied_rft.train.sft.resume import prepare_work_dir, run_fingerprint

log = logging.getLogger(__name__)

ValHook = Callable[[Any, Any], dict]


# what metrics/sft.json shows (config, per-step log and the held-out example are in metrics/sft.details.json)
SFT_HEADLINE = {
    "steps": True,
    "first_loss": True,
    "final_loss": True,
    "tokens_per_s": True,
    "val": {"format_rate": True},
}


def _lora_config(cfg: SFTConfig, vision: bool) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=list(cfg.lora.target_modules),
        # the vision blocks reuse MLP names (gate_proj, ...): keep adapters out of a frozen tower
        exclude_modules=VISION_MODULE_REGEX if vision and cfg.freeze_vision else None,
        task_type="CAUSAL_LM",
    )


def _deepspeed_config(path: str | None) -> dict | None:
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"sft.deepspeed: DeepSpeed config {path} not found")
    if p.suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(p.read_text())
    return json.loads(p.read_text())


def trainer_args(cfg: SFTConfig, work_dir: Path, run_name: str) -> dict[str, Any]:
    """The TRL trainer arguments every trainer of this project takes from an ``sft:`` section (this SFT and the
    verifier's pairwise reward model, ``vegas/pairs.py``): schedule, seeds, precision, checkpoints, logging, device.
    Sets the W&B environment when W&B reports."""
    report = [r for r in cfg.report_to if r != "none"] or ["none"]
    if "wandb" in report:
        # an explicit WANDB_MODE in the environment wins; the config's default keeps runs offline
        os.environ.setdefault("WANDB_MODE", cfg.wandb_mode)
        os.environ.setdefault("WANDB_PROJECT", cfg.wandb_project)
    return dict(
        output_dir=str(work_dir),
        run_name=run_name,
        learning_rate=cfg.lr,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps if cfg.max_steps is not None else -1,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        # transformers 5: a float below 1 is a fraction of the total steps
        warmup_steps=cfg.warmup_ratio,
        lr_scheduler_type=cfg.scheduler,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        max_length=cfg.max_len,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=cfg.bf16,  # TRL's default would be True
        fp16=False,
        # transformers 5 name; TRL still defaults the deprecated `gradient_checkpointing` alias to True
        activation_checkpointing=cfg.gradient_checkpointing,
        deepspeed=_deepspeed_config(cfg.deepspeed),
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        report_to=report,
        project=cfg.wandb_project,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=cfg.dataloader_workers,
        use_cpu=_use_cpu(cfg),
        disable_tqdm=False,
    )


def _training_args(cfg: SFTConfig, work_dir: Path, run_name: str) -> Any:
    from trl import SFTConfig as TRLSFTConfig

    return TRLSFTConfig(
        **trainer_args(cfg, work_dir, run_name),
        truncation_mode="keep_start",
        assistant_only_loss=True,
        packing=False,
        padding_free=False,
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
    )


def _use_cpu(cfg: SFTConfig) -> bool:
    """``sft.device: cpu``, or ``auto`` in one of several processes (``accelerate launch``, torchrun) on a machine
    without CUDA: accelerate joins the processes in a gloo group only when told the device is the CPU, and would
    otherwise let each one train alone on the same outputs."""
    if cfg.device == "cpu":
        return True
    import torch

    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def _finish_wandb(cfg: SFTConfig) -> None:
    """Close the W&B run the trainer opened, so an offline run is complete on disk when the stage ends."""
    if "wandb" in cfg.report_to:
        import wandb

        if wandb.run is not None:
            wandb.finish()


def _loss_rows(log_history: list[dict]) -> list[dict]:
    return [
        {"step": int(e["step"]), "loss": float(e["loss"]), "lr": float(e.get("learning_rate", 0.0))}
        for e in log_history
        if "loss" in e and "step" in e
    ]


def _write_plot(path: Path, rows: list[dict]) -> None:
    if path.suffix == ".csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=["step", "loss", "lr"], lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        write_text_atomic(path, buf.getvalue())
    else:
        write_json_atomic(path, rows)


def _save_final(trainer: Any, tok: Any, cfg: SFTConfig, model_dir: Path, staging: Path) -> None:
    """Write the trained model into ``staging`` (every process takes part: ZeRO-3 gathers the shards)."""
    if staging.exists() and trainer.is_world_process_zero():
        shutil.rmtree(staging)
    trainer.accelerator.wait_for_everyone()
    if not cfg.lora.enabled:
        trainer.save_model(str(staging))
    else:
        adapter = staging.with_name(staging.name + "-adapter")
        trainer.save_model(str(adapter))
        if trainer.is_world_process_zero():
            # merge on a fresh copy of the base weights: works the same with or without DeepSpeed sharding
            from peft import PeftModel

            base, _ = load_model(model_dir, for_training=False, dtype="float32")
            merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
            merged.save_pretrained(str(staging))
            shutil.rmtree(adapter, ignore_errors=True)
    if trainer.is_world_process_zero():
        tok.save_pretrained(str(staging))
        card = {}
        if (model_dir / CARD).is_file():
            card = json.loads((model_dir / CARD).read_text())
        card.update({"source": f"SFT of {model_dir}", "sft": as_dict(cfg)})
        (staging / CARD).write_text(json.dumps(card, indent=2) + "\n")
        seal_folder(staging)  # checksums.sha256, the last file: load_model verifies it
    trainer.accelerator.wait_for_everyone()


@dataclass
class SFTSetup:
    """A trainer ready to train, and what :func:`run_sft` reports about it."""

    trainer: Any
    processing_class: Any
    records: int
    vision: bool
    frozen_vision_params: int
    images_dropped: int
    resume_from: Path | None
    throughput: Any
    # examples TRL dropped (no answer token left after the cutoff), and examples cut at max_len (None for
    # vision data, which is tokenised batch by batch during training)
    dropped_examples: int
    truncated_examples: int | None


def prepare_sft(
    cfg: SFTConfig,
    model_dir: str | Path,
    data_path: str | Path,
    work_dir: str | Path,
    *,
    callbacks: Sequence[Any] = (),
    val_prompts: Sequence[Any] = (),
) -> SFTSetup:
    """Read the data, claim the work folder, load and freeze the model, and build the ``SFTTrainer``."""
    import torch
    from trl import SFTTrainer

    from embodied_rft.train.sft.callbacks import SealCheckpoints, Throughput, ValCheck

    model_dir, data_path, work_dir = Path(model_dir), Path(data_path), Path(work_dir)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    records = read_sft_records(data_path)
    # Trainer arguments before the model: under DeepSpeed ZeRO-3 they make from_pretrained load sharded.
    args = _training_args(cfg, work_dir, run_name=f"sft-{model_dir.name}")
    with args.main_process_first(desc="SFT work folder"):
        ckpt = prepare_work_dir(work_dir, run_fingerprint(cfg, model_dir, data_path), cfg.resume)
    # float32 master weights; bf16 (when on) is autocast by the trainer or handled by DeepSpeed
    model, tok = load_model(model_dir, for_training=True, dtype="float32")
    vision = is_vision_model(model)
    frozen = freeze_vision(model) if vision and cfg.freeze_vision else 0
    dataset, images_dropped = to_train_dataset(records, vision)
    throughput = Throughput()
    extra: list[Any] = [throughput, SealCheckpoints()]
    if val_prompts and cfg.val.every_steps:
        extra.append(ValCheck(tok, list(val_prompts), cfg.val.every_steps, cfg.val.max_new_tokens, cfg.val.batch_size))
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tok,
        peft_config=_lora_config(cfg, vision) if cfg.lora.enabled else None,
        callbacks=[*extra, *callbacks],
    )
    dropped, truncated = len(records) - len(trainer.train_dataset), None
    if len(trainer.train_dataset) == 0:
        # otherwise the trainer fails with a sampler error ("num_samples should be a positive integer")
        raise ConfigError(
            f"sft.max_len: at {cfg.max_len} tokens every one of the {len(records)} examples of {data_path} loses its "
            "whole answer (the cut keeps the start); raise sft.max_len or shorten the prompts (prompt.style=compact)"
        )
    if not vision:
        truncated = sum(
            sum(len(ids) >= cfg.max_len for ids in batch["input_ids"])
            for batch in trainer.train_dataset.select_columns(["input_ids"]).iter(batch_size=1024)
        )
    if dropped or truncated:
        log.warning(
            "sft.max_len=%d cuts %s of %d examples and leaves %d with no answer token (dropped): a cut answer "
            "loses its end and its stop token; raise sft.max_len or shorten the prompts",
            cfg.max_len,
            truncated,
            len(records),
            dropped,
        )
    return SFTSetup(trainer, tok, len(records), vision, frozen, images_dropped, ckpt, throughput, dropped, truncated)


def run_sft(
    cfg: SFTConfig,
    model_dir: str | Path,
    data_path: str | Path,
    out_dir: str | Path,
    metrics_path: str | Path,
    plots_path: str | Path,
    *,
    val_data: str | Path | None = None,
    work_dir: str | Path | None = None,
    callbacks: Sequence[Any] = (),
    val_hook: ValHook | None = None,
) -> dict:
    """Fine-tune ``model_dir`` on ``data_path`` into ``out_dir``; returns the metrics written.

    ``val_data``: held-out prompts for the JSON-format check (SFT records or decomposed samples; first
    ``cfg.val.max_samples``). ``work_dir``: checkpoints (default: ``.<out_dir name>.work`` next to
    ``out_dir``). ``callbacks``: extra ``transformers.TrainerCallback``s. ``val_hook(model, tok) -> dict``:
    extra metrics computed on the final model, stored under ``"hook"``.
    """
    model_dir, data_path, out_dir = Path(model_dir), Path(data_path), Path(out_dir)
    work_dir = Path(work_dir) if work_dir is not None else out_dir.with_name(f".{out_dir.name}.work")
    val_prompts = read_val_prompts(val_data, cfg.val.max_samples) if val_data and cfg.val.max_samples else []
    setup = prepare_sft(cfg, model_dir, data_path, work_dir, callbacks=callbacks, val_prompts=val_prompts)
    trainer, tok, ckpt, throughput = setup.trainer, setup.processing_class, setup.resume_from, setup.throughput
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in trainer.model.parameters())
    log.info(
        "SFT: %d records, %s model, %.2fM trainable of %.2fM parameters%s",
        setup.records,
        "vision-language" if setup.vision else "text",
        trainable / 1e6,
        total / 1e6,
        f", resuming from {ckpt.name}" if ckpt else "",
    )
    result = trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    _finish_wandb(cfg)

    staging = out_dir.with_name(f".{out_dir.name}.staging")
    _save_final(trainer, tok, cfg, model_dir, staging)
    state = trainer.state
    rows = _loss_rows(state.log_history)
    metrics: dict[str, Any] = {}
    if trainer.is_world_process_zero():
        replace_directory(staging, out_dir)
        metrics = {
            "records": setup.records,
            "vision": setup.vision,
            "images_dropped": setup.images_dropped,
            "dropped_examples": setup.dropped_examples,
            "truncated_examples": setup.truncated_examples,
            "steps": int(state.global_step),
            "epochs": float(state.epoch or 0.0),
            "resumed_from_step": int(ckpt.name.split("-")[1]) if ckpt else 0,
            "first_loss": rows[0]["loss"] if rows else None,
            "final_loss": rows[-1]["loss"] if rows else None,
            "train_loss": float(result.training_loss),
            "tokens": int(state.num_input_tokens_seen or 0),
            "session_tokens": throughput.tokens,
            "train_time_s": round(throughput.seconds, 3),
            "tokens_per_s": round(throughput.tokens / throughput.seconds, 1) if throughput.seconds > 0 else None,
            # processes of the run (accelerate launch) and how they were joined (NO, MULTI_CPU, MULTI_GPU, DEEPSPEED)
            "processes": trainer.accelerator.num_processes,
            "distributed_type": str(trainer.accelerator.distributed_type).split(".")[-1],
            "trainable_params": trainable,
            "frozen_vision_params": setup.frozen_vision_params,
            "total_params": total,
            "config": as_dict(cfg),
        }
        del trainer, setup
        if val_prompts or val_hook is not None:
            final, final_tok = load_model(out_dir, for_training=False)
            if val_prompts:
                metrics["val"] = format_metrics(
                    final, final_tok, val_prompts, max_new_tokens=cfg.val.max_new_tokens, batch_size=cfg.val.batch_size
                )
                log.info(
                    "held-out check: JSON %.2f, EB keys %.2f",
                    metrics["val"]["json_valid_rate"],
                    metrics["val"]["format_rate"],
                )
            if val_hook is not None:
                metrics["hook"] = val_hook(final, final_tok)
        write_metrics(metrics_path, metrics, SFT_HEADLINE)
        _write_plot(Path(plots_path), rows)
        if not cfg.keep_checkpoints:
            shutil.rmtree(work_dir, ignore_errors=True)
        log.info(
            "SFT done: %d steps, loss %.4f -> %.4f, %.0f tokens/s; model in %s",
            metrics["steps"],
            metrics["first_loss"] or float("nan"),
            metrics["final_loss"] or float("nan"),
            metrics["tokens_per_s"] or 0.0,
            out_dir,
        )
    return metrics
