"""Every benchmark of the project in one run, printed as one table of ratios (`make bench`).

Each ``bench/bench_*.py`` exposes ``run(...) -> list[dict]`` rows with ``bench``, ``case``, a rate
(``value`` or ``per_s``), ``unit``, and ``ratio`` against what it is compared with (``vs``, or the
project's ``floor``). World, reward and ALFRED rows compare with a floor; SFT, GRPO, evaluation and
decomposition rows compare with a reference implementation run side by side on the same inputs; Best-of-N rows
(``bench_bon``) give each selector's cost per planner call as a multiple of greedy's; the chat server's rows
(``bench_serve``) give clients opening a connection per request against clients keeping one alive.
``--quick`` shrinks every benchmark (a smoke run, not a measurement).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _world_rows(mod, episodes: int) -> list[dict]:
    from embodied_rft.world import GeneratorConfig, Simulator, generate_episodes

    eps = generate_episodes(GeneratorConfig(), "train", episodes)
    n_act = sum(len(e["expert_plan"]) for e in eps)
    t_gen = mod.best_of(3, lambda: generate_episodes(GeneratorConfig(), "train", episodes))
    sims = [(Simulator.from_episode(e), e["expert_plan"]) for e in eps]
    t0 = time.process_time()
    for sim, plan in sims:
        for a in plan:
            sim.step(a)
    t_step = time.process_time() - t0
    return [
        {
            "bench": "world",
            "case": "simulator step",
            "value": n_act / t_step,
            "unit": "actions/s",
            "ratio": n_act / t_step / mod.FLOOR_ACTIONS_PER_S,
            "vs": "floor 20,000/s",
        },
        {
            "bench": "world",
            "case": "episode generation",
            "value": episodes / t_gen,
            "unit": "episodes/s",
            "ratio": None,
            "vs": "",
        },
    ]


def _sft_rows(mod) -> list[dict]:
    out = []
    for r in mod.run(["tiny"]):
        out.append(
            {
                "bench": "sft",
                "case": f"TRL SFTTrainer step ({r['model']}, batch {r['batch']})",
                "value": r["trl_tok_per_s"],
                "unit": "tokens/s",
                "ratio": r["ratio_wall"],
                "vs": "plain torch step",
                "ratio_cpu": r["ratio_cpu"],
                "same_tokens": r["same_tokens"],
            }
        )
        out.append(
            {
                "bench": "sft",
                "case": f"plain torch step ({r['model']}, batch {r['batch']})",
                "value": r["plain_tok_per_s"],
                "unit": "tokens/s",
                "ratio": None,
                "vs": "",
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run of every benchmark (under 5 minutes)")
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated benchmark names (world, reward, decompose, alfred, sft, "
        "sampler, grpo, eval, play, bon, serve); default: all",
    )
    ap.add_argument("--json", default=None, help="also write all rows here (bench, case, value, unit, ratio, vs)")
    args = ap.parse_args(argv)
    q = args.quick
    plan = [
        ("bench_world", lambda m: _world_rows(m, 100 if q else 1000)),
        ("bench_reward", lambda m: m.run(n=200 if q else 2000, repeats=1 if q else 5)),
        ("bench_decompose", lambda m: m.run(50 if q else 300)),
        ("bench_alfred", lambda m: m.run(limit=200 if q else None)),
        ("bench_sft", _sft_rows),
        (
            "bench_sampler",
            lambda m: m.run(prompts=4 if q else 8, repeats=1 if q else 2, max_new_tokens=100 if q else 200),
        ),
        ("bench_grpo", lambda m: m.run(updates=1 if q else 3)),
        ("bench_eval", lambda m: m.run(episodes=20 if q else 60, model_episodes=4 if q else 16)),
        ("bench_play", lambda m: m.run(episodes=24 if q else 150)),
        ("bench_bon", lambda m: m.run(episodes=8 if q else 24, max_new_tokens=120 if q else 160)),
        ("bench_serve", lambda m: m.run(clients=8 if q else 32, requests=2 if q else 5)),
    ]
    if args.only:
        wanted = {f"bench_{n.strip()}" for n in args.only.split(",") if n.strip()}
        unknown = wanted - {name for name, _ in plan}
        if unknown:
            ap.error(
                f"--only: unknown benchmark(s) {sorted(n[6:] for n in unknown)}; choose from "
                f"{[name[6:] for name, _ in plan]}"
            )
        plan = [(name, call) for name, call in plan if name in wanted]
    rows: list[dict] = []
    for name, call in plan:
        t0 = time.perf_counter()
        try:
            got = call(_load(name)) or []
        except Exception as exc:  # one broken benchmark must not hide the others
            traceback.print_exc()
            got = [{"bench": name, "case": "FAILED", "value": None, "unit": "", "ratio": None, "vs": str(exc)[:60]}]
        rows.extend(got)
        print(f"[{name}: {time.perf_counter() - t0:.0f} s]", file=sys.stderr)
    print(f"\n{'bench':<10} {'case':<34} {'value':>12} {'unit':<20} {'ratio':>7}  vs")
    print("-" * 110)
    for r in rows:
        v = r.get("value", r.get("per_s"))
        vs = r.get("vs") or (f"floor {r['floor']:,.0f}/s" if r.get("floor") else "")
        ratio = "" if r.get("ratio") is None else f"{r['ratio']:.2f}"
        val = "" if v is None else f"{v:,.1f}"
        print(
            f"{r.get('bench', ''):<10} {str(r.get('case', ''))[:34]:<34} {val:>12} {str(r.get('unit', ''))[:20]:<20} {ratio:>7}  {vs}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
