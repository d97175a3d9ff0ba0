"""The fast sampler and the shared-prompt update beside the paths they replace, same model and prompts.

Run: ``python bench/bench_sampler.py [--model models/sft] [--samples data/decomposed/train.jsonl]
[--prompts 16] [--group-size 8] [--temperature 0.7] [--max-new-tokens 200] [--repeats 2] [--threads 1]``.
Without a trained model (a fresh clone before ``make repro``) it builds the tiny default from scratch on
generated episodes and teacher-forces their gold plans briefly, so answers have realistic lengths; the
rows name which model ran.

Rows, each new path beside its reference in the same process:
* ``gemm limit``: ``F.linear`` at the model's decode shapes (B = prompts × G rows), and the generated
  tokens/s those GEMMs alone would allow (the layer + LM-head FLOPs per token at the measured rate);
* ``generate``: generated tokens/s of ``rollout.sample_responses`` (transformers' ``generate``, each
  prompt repeated G times) vs the fast sampler (one prefill per prompt, in-place cache, finished rows
  dropped), same prompts, G, temperature, cap — plus the old-log-prob pass the fast sampler makes unneeded,
  and the fast sampler with continuous batching (half the rows live, the other prompts admitted as rows
  finish: the same samples, ``grpo.sampler_max_rows``);
* ``update step``: one optimiser step's forward + backward over the sampled responses, padded rows vs the
  shared-prompt forward;
* both cores (``--procs 2``): ``generate`` with 2 threads, the fast sampler in one process with 2 threads, and
  in 2 single-thread processes reading the weights from shared memory (``train/grpo/workers.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]


def _fitted_default(work: Path, n: int) -> tuple[Path, Path]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_grpo import make_workload

    return make_workload(work, n, fit_steps=30)


# the default run's on-policy GRPO states (grpo.onpolicy, half of its prompts), when the workspace has them
STATES = ROOT / ".cache" / "work" / "grpo_states" / "states.jsonl"


def _spread(recs: list[dict], n: int) -> list[dict]:
    step = max(1, len(recs) // max(n, 1))
    return [recs[i] for i in range(0, step * n, step)][:n]


def _load(model_dir: Path, samples: Path, n_prompts: int, max_prompt_tokens: int, states: Path | None = None):
    """The model and ``n_prompts`` prompts spread over ``samples``; with ``states``, half of them from there (the
    default GRPO stage's mix of decomposed prompts and on-policy states)."""
    from embodied_rft.models import load_model
    from embodied_rft.schema import read_samples
    from embodied_rft.train.grpo.rollout import PolicyIO

    model, tok = load_model(str(model_dir), for_training=True)
    model.float()
    io = PolicyIO(tok, max_prompt_tokens)
    io.add_model_eos(model)
    recs = read_samples(samples, what="bench")
    if states is not None and states.exists():
        half = n_prompts // 2
        picked = _spread(recs, n_prompts - half) + _spread(read_samples(states, what="bench states"), half)
    else:
        picked = _spread(recs, n_prompts)
    prompts = [io.encode(r, i) for i, r in enumerate(picked)]
    return model, io, prompts


def _best(repeats: int, fn):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def gemm_rows(model, rows: int, repeats: int) -> list[dict]:
    cfg = model.config
    shapes = []  # (out, in) of every weight a decode step multiplies, once per layer
    h, i_, hd = cfg.hidden_size, cfg.intermediate_size, cfg.hidden_size // cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", cfg.num_attention_heads) * hd
    per_layer = [(h, h), (kv, h), (kv, h), (h, h), (i_, h), (i_, h), (h, i_)]
    shapes = per_layer * cfg.num_hidden_layers + [(cfg.vocab_size, h)]
    ws = [torch.randn(o, i) for o, i in shapes]
    xs = {i: torch.randn(rows, i) for _, i in shapes}
    flops = sum(2 * rows * o * i for o, i in shapes)

    def step():
        for w in ws:
            F.linear(xs[w.shape[1]], w)

    step()
    t, _ = _best(repeats * 5, step)
    per_token = flops / rows
    return [
        {
            "bench": "sampler",
            "case": f"gemm limit B={rows}",
            "value": flops / t / 1e9,
            "unit": "GFLOP/s",
            "ratio": None,
            "vs": "",
        },
        {
            "bench": "sampler",
            "case": "gemm-only token ceiling",
            "value": rows / t,
            "unit": "tokens/s",
            "ratio": None,
            "vs": f"{per_token / 1e6:.2f} MFLOP/token",
        },
    ]


def run(
    model: str | None = None,
    samples: str | None = None,
    prompts: int = 16,
    group_size: int = 8,
    temperature: float = 0.7,
    max_new_tokens: int = 200,
    repeats: int = 2,
    threads: int = 1,
    procs: int = 2,
) -> list[dict]:
    from embodied_rft.filtering import FilterConfig
    from embodied_rft.train.grpo.config import GRPOConfig
    from embodied_rft.train.grpo.loss import group_advantages
    from embodied_rft.train.grpo.rollout import make_sampler, sample_groups, sample_responses, sequence_logprobs
    from embodied_rft.train.grpo.update import Group, shared_prompt_lm, update_step

    torch.set_num_threads(threads)
    tmp = None
    model_dir = Path(model) if model else ROOT / "models" / "sft"
    samples_path = Path(samples) if samples else ROOT / "data" / "decomposed" / "train.jsonl"
    label = "models/sft"
    states = STATES if model is None and samples is None and STATES.exists() else None
    if not (model_dir / "config.json").exists() or not samples_path.exists():
        tmp = tempfile.TemporaryDirectory(prefix="bench-sampler-")
        model_dir, samples_path = _fitted_default(Path(tmp.name), prompts)
        label, states = "fitted tiny", None
    elif states is not None:
        label = "models/sft, GRPO prompt mix"
    lm, io, enc = _load(model_dir, samples_path, prompts, 256, states)
    gen = dict(temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens)
    rows = gemm_rows(lm, prompts * group_size, repeats)

    t_hf, hf = _best(repeats, lambda: sample_responses(lm, io, enc, group_size, seed=1, **gen))
    hf_tokens = sum(len(r) for g in hf for r in g)
    pairs = [(p, r) for p, g in zip(enc, hf) for r in g]
    t_lp, _ = _best(repeats, lambda: sequence_logprobs(lm, pairs, io, temperature, 16, "cpu"))
    sampler = make_sampler(lm, "fast")
    t_fast, fast = _best(repeats, lambda: sample_groups(lm, io, enc, group_size, sampler=sampler, seed=1, **gen))
    fast_tokens = sum(len(r) for g in fast.responses for r in g)
    hf_rate, fast_rate = hf_tokens / t_hf, fast_tokens / t_fast
    # continuous batching: half the call's rows live at a time, the waiting prompts admitted as rows finish
    half = max(group_size, prompts * group_size // 2)
    streaming = make_sampler(lm, "fast", max_rows=half)
    t_cb, cb = _best(repeats, lambda: sample_groups(lm, io, enc, group_size, sampler=streaming, seed=1, **gen))
    cb_rate = sum(len(r) for g in cb.responses for r in g) / t_cb
    case = f"{label}, {prompts}x G={group_size}, T={temperature}"
    rows += [
        {
            "bench": "sampler",
            "case": f"generate hf ({case})",
            "value": hf_rate,
            "unit": "gen tokens/s",
            "ratio": None,
            "vs": "",
        },
        {
            "bench": "sampler",
            "case": f"generate fast ({case})",
            "value": fast_rate,
            "unit": "gen tokens/s",
            "ratio": fast_rate / hf_rate,
            "vs": "hf generate",
        },
        {
            "bench": "sampler",
            "case": f"generate fast, continuous batching ({half} rows live)",
            "value": cb_rate,
            "unit": "gen tokens/s",
            "ratio": cb_rate / fast_rate,
            "vs": "fast, all rows at once",
        },
        {
            "bench": "sampler",
            "case": "generate + old log-prob pass",
            "value": (hf_tokens / (t_hf + t_lp)),
            "unit": "gen tokens/s",
            "ratio": fast_rate / (hf_tokens / (t_hf + t_lp)),
            "vs": "fast (log-probs included)",
        },
    ]

    # one update step over the fast sampler's responses: padded rows vs the shared-prompt forward
    groups = [
        Group(p, rs, [0.0] * len(rs), [0.0] * len(rs), lps) for p, rs, lps in zip(enc, fast.responses, fast.logprobs)
    ]
    adv = group_advantages(torch.randn(len(groups), group_size, generator=torch.Generator().manual_seed(0)), 1e-6)
    mb = [(gi, ri) for gi in range(len(groups)) for ri in range(group_size)]
    cfg = GRPOConfig(
        group_size=group_size,
        temperature=temperature,
        micro_batch_size=16,
        train_batch_size=len(mb),
        filter=FilterConfig(buffer_size=len(groups), updates_per_buffer=1),
    )
    opt = torch.optim.SGD([p for p in lm.parameters() if p.requires_grad], lr=0.0)
    sch = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    def upd(shared):
        return update_step(
            cfg, lm, opt, sch, io, groups, adv, mb, device="cpu", vision=False, use_ref=False, shared=shared
        )

    lm.train()
    t_pad, _ = _best(repeats, lambda: upd(None))
    t_sh, _ = _best(repeats, lambda: upd(shared_prompt_lm(lm, "shared_prompt")))
    n_tok = sum(len(groups[g].responses[r]) for g, r in mb)
    rows += [
        {
            "bench": "sampler",
            "case": f"update step padded ({len(mb)} seqs)",
            "value": n_tok / t_pad,
            "unit": "resp tokens/s",
            "ratio": None,
            "vs": "",
        },
        {
            "bench": "sampler",
            "case": f"update step shared prompt ({len(mb)} seqs)",
            "value": n_tok / t_sh,
            "unit": "resp tokens/s",
            "ratio": t_pad / t_sh,
            "vs": "padded",
        },
    ]
    if procs > 1:
        rows += process_rows(lm, io, enc, group_size, gen, repeats, procs)
    if tmp is not None:
        tmp.cleanup()
    return rows


def process_rows(lm, io, enc, group_size: int, gen: dict, repeats: int, procs: int) -> list[dict]:
    """Both cores: the fast sampler in ``procs`` single-thread processes on shared weights vs one process
    with ``procs`` threads, and ``generate`` with ``procs`` threads."""
    from embodied_rft.train.grpo.rollout import make_sampler, sample_groups, sample_responses
    from embodied_rft.train.grpo.workers import ProcessRollout

    threads = torch.get_num_threads()
    torch.set_num_threads(procs)
    try:
        sampler = make_sampler(lm, "fast")
        t_thr, out = _best(repeats, lambda: sample_groups(lm, io, enc, group_size, sampler=sampler, seed=1, **gen))
        thr_rate = sum(len(r) for g in out.responses for r in g) / t_thr
        t_hf, hf = _best(repeats, lambda: sample_responses(lm, io, enc, group_size, seed=1, **gen))
        hf_rate = sum(len(r) for g in hf for r in g) / t_hf
    finally:
        torch.set_num_threads(threads)
    pool = ProcessRollout(lm, io.eos_ids, procs)
    try:
        t_pool, out = _best(repeats, lambda: pool.sample(enc, group_size, seed=1, **gen))
    finally:
        pool.close()
    pool_rate = sum(len(r) for g in out.responses for r in g) / t_pool
    return [
        {
            "bench": "sampler",
            "case": f"generate hf, {procs} threads",
            "value": hf_rate,
            "unit": "gen tokens/s",
            "ratio": None,
            "vs": "",
        },
        {
            "bench": "sampler",
            "case": f"generate fast, 1 process x {procs} threads",
            "value": thr_rate,
            "unit": "gen tokens/s",
            "ratio": thr_rate / hf_rate,
            "vs": f"hf, {procs} threads",
        },
        {
            "bench": "sampler",
            "case": f"generate fast, {procs} processes x 1 thread",
            "value": pool_rate,
            "unit": "gen tokens/s",
            "ratio": pool_rate / hf_rate,
            "vs": f"hf, {procs} threads",
        },
        {
            "bench": "sampler",
            "case": f"{procs} processes vs 1 process x {procs} threads",
            "value": pool_rate,
            "unit": "gen tokens/s",
            "ratio": pool_rate / thr_rate,
            "vs": "fast, 1 process",
        },
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--samples", default=None)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--procs", type=int, default=2, help="rollout processes for the both-cores rows (1 = skip them)")
    a = ap.parse_args(argv)
    rows = run(
        a.model, a.samples, a.prompts, a.group_size, a.temperature, a.max_new_tokens, a.repeats, a.threads, a.procs
    )
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
