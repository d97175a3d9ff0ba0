"""GRPO throughput: the local engine (train/grpo/engine.py) beside TRL's GRPOTrainer, same model, prompts and G — the
engine twice, with the fast sampler and shared-prompt update (the default) and with ``generate`` and padded
rows (``grpo.sampler=hf grpo.update_forward=padded``, the engine before the fast sampler).

Run: ``python bench/bench_grpo.py [--updates 3] [--prompts 4] [--group-size 4] [--max-new-tokens 128]``.
Setup (not timed): generated episodes are decomposed with the tiny prompt; the tiny default model
(``model: tiny``, ~3M parameters) is built, untrained by default, so both engines generate (almost) every
response to the token cap and their token counts match; ``--fit-steps N`` first teacher-forces the gold
plans for N steps (~4 s each here) so lengths and rewards become realistic. Then each engine makes
``--updates`` optimiser updates, each on the
G responses to ``--prompts`` prompts (one update per rollout, no accuracy filter: TRL has none), with the
same sampling settings, the paper's reward, AdamW at a constant LR, β = 0, ε = 0.2 and token-mean loss
(TRL's ``dapo``). Both run with one torch thread.

Printed: responses/s, generated tokens/s and the fraction of time in generation, reward and update (old-log-prob forward
included; the hf engine makes one, the fast sampler returns the log-probs, TRL skips it when num_iterations =
1), and the ratio to TRL. ``run()`` returns the rows for a combined bench report.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from embodied_rft.data.decompose import decompose_episodes
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.data.response import format_response
from embodied_rft.filtering import FilterConfig
from embodied_rft.models import ModelConfig, build_base_model, load_model
from embodied_rft.reward import score
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.grpo.driver import run_grpo_local
from embodied_rft.world import GeneratorConfig, generate_episodes


def _gold(sample: dict) -> str:
    return format_response([tuple(p) for p in json.loads(sample["label"])["gold"]], language_plan="")


def make_workload(work: Path, n_prompts: int, fit_steps: int, seed: int = 0) -> tuple[Path, Path]:
    """(policy folder, samples file): decomposed generated episodes and a briefly fitted tiny model."""
    eps = generate_episodes(GeneratorConfig(), "train", max(4, n_prompts // 4))
    samples = decompose_episodes(eps, PromptConfig(style="compact", action_list="none"))[: max(n_prompts, 8)]
    data = work / "train.jsonl"
    data.write_text("".join(json.dumps(s) + "\n" for s in samples))
    corpus = [m["content"] for s in samples for m in s["prompt"]] + [_gold(s) for s in samples]
    policy = build_base_model(ModelConfig(seed=seed), corpus, work / "policy")
    model, tok = load_model(policy, for_training=True)
    rows = []
    for s in samples:
        p = tok(
            tok.apply_chat_template(s["prompt"], add_generation_prompt=True, tokenize=False), add_special_tokens=False
        )["input_ids"]
        r = tok(_gold(s) + "<|im_end|>", add_special_tokens=False)["input_ids"]
        rows.append((p, r))
    width = max(len(p) + len(r) for p, r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (p, r) in enumerate(rows):
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        labels[i, len(p) : len(p) + len(r)] = torch.tensor(r)
        attn[i, : len(p) + len(r)] = 1
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(fit_steps):
        model(input_ids=ids, attention_mask=attn, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(policy)
    return policy, data


def bench_local(
    policy: Path,
    data: Path,
    work: Path,
    updates: int,
    prompts: int,
    g: int,
    max_new: int,
    lr: float,
    sampler: str = "fast",
    update_forward: str = "shared_prompt",
) -> dict:
    cfg = GRPOConfig(
        sampler=sampler,
        update_forward=update_forward,
        group_size=g,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=max_new,
        max_prompt_tokens=2048,
        rollout_batch_size=prompts,
        lr=lr,
        lr_scheduler="constant_with_warmup",
        warmup_ratio=0.0,
        filter=FilterConfig(enabled=False, drop_zero_variance=False, buffer_size=prompts, updates_per_buffer=1),
        train_batch_size=prompts * g,
        micro_batch_size=prompts * g,
        max_updates=updates,
        num_episodes=1000,
        save_every=0,
        report_to=(),
        eval_max_samples=0,
        num_threads=1,
    )
    m = run_grpo_local(cfg, policy, data, data, work / "out", work / "m.json", work / "p.json", work / "w")
    t = m["time_s"]
    total = t["generate"] + t["reward"] + t["logprob"] + t["update"]
    return {
        "engine": f"local {sampler}",
        "responses": m["counters"]["responses_sampled"],
        "seconds": total,
        "generate": t["generate"] / total,
        "reward": t["reward"] / total,
        "update": (t["logprob"] + t["update"]) / total,
        "tokens": m["counters"]["response_tokens"],
    }


def bench_trl(
    policy: Path, data: Path, work: Path, updates: int, prompts: int, g: int, max_new: int, lr: float
) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    samples = [json.loads(line) for line in data.read_text().splitlines()]
    ds = Dataset.from_list([{"prompt": s["prompt"], "label": s["label"]} for s in samples])
    spent = {"generate": 0.0, "reward": 0.0}
    count = {"responses": 0, "tokens": 0}

    def reward(completions, label, **kw):
        t0 = time.perf_counter()
        out = [score(c[0]["content"] if isinstance(c, list) else c, lab).total for c, lab in zip(completions, label)]
        spent["reward"] += time.perf_counter() - t0
        count["responses"] += len(out)
        return out

    args = TRLConfig(
        output_dir=str(work / "trl"),
        num_generations=g,
        per_device_train_batch_size=prompts * g,
        generation_batch_size=prompts * g,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=max_new,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        learning_rate=lr,
        lr_scheduler_type="constant",
        adam_beta2=0.95,
        max_grad_norm=1.0,
        max_steps=updates,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
        disable_dropout=True,
        dataloader_num_workers=0,
    )
    model, tok = load_model(policy, for_training=True)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=ds, processing_class=tok)

    gen_fn = trainer._generate_single_turn

    def generate(*a, **k):
        t0 = time.perf_counter()
        out = gen_fn(*a, **k)
        spent["generate"] += time.perf_counter() - t0
        count["tokens"] += sum(len(c) for c in out[0])  # (completion_ids, logprobs)
        return out

    trainer._generate_single_turn = generate
    t0 = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t0
    return {
        "engine": "trl",
        "responses": count["responses"],
        "seconds": total,
        "generate": spent["generate"] / total,
        "reward": spent["reward"] / total,
        # everything else: the optimiser step, and TRL's own log-prob forwards and tokenisation
        "update": (total - spent["generate"] - spent["reward"]) / total,
        "tokens": count["tokens"],
    }


def run(
    updates: int = 3,
    prompts: int = 4,
    group_size: int = 4,
    max_new_tokens: int = 128,
    fit_steps: int = 0,
    lr: float = 1e-5,
) -> list[dict]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as d:
            work = Path(d)
            policy, data = make_workload(work, prompts * max(updates, 2), fit_steps)
            args = (policy, data, updates, prompts, group_size, max_new_tokens, lr)
            local = bench_local(args[0], args[1], work / "local", *args[2:])
            old = bench_local(args[0], args[1], work / "local-hf", *args[2:], sampler="hf", update_forward="padded")
            trl = bench_trl(args[0], args[1], work / "trl", *args[2:])
    finally:
        torch.set_num_threads(threads)
    rows = []
    old_rate = old["responses"] / old["seconds"]
    for r in (local, old, trl):
        rate = r["responses"] / r["seconds"]
        rows.append(
            {
                "bench": "grpo",
                "case": f"{r['engine']} (G={group_size}, {prompts} prompts/update)",
                "value": rate,
                "unit": "responses/s",
                "ratio": rate / (trl["responses"] / trl["seconds"]),
                "vs": "TRL GRPOTrainer",
                "ratio_vs_hf_engine": rate / old_rate,
                "generate": r["generate"],
                "reward": r["reward"],
                "update": r["update"],
                "tokens_per_response": r["tokens"] / max(r["responses"], 1),
                "tokens_per_s": r["tokens"] / r["seconds"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--updates", type=int, default=3)
    p.add_argument("--prompts", type=int, default=4, help="prompts per update (N_B)")
    p.add_argument("--group-size", type=int, default=4, help="G")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--fit-steps", type=int, default=0, help="teacher-forcing steps on gold plans before timing")
    a = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    logging.basicConfig(level=logging.WARNING)
    rows = run(a.updates, a.prompts, a.group_size, a.max_new_tokens, a.fit_steps)
    print(
        f"{'case':<34} {'responses/s':>11} {'ratio':>6} {'tok/s':>7} {'gen':>6} {'reward':>7} {'update':>7} {'tok/resp':>8}"
    )
    for r in rows:
        print(
            f"{r['case']:<34} {r['value']:>11.2f} {r['ratio']:>6.2f} {r['tokens_per_s']:>7.0f} {r['generate']:>6.1%} "
            f"{r['reward']:>7.2%} {r['update']:>7.1%} {r['tokens_per_response']:>8.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
