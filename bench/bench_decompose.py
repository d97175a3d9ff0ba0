"""Decomposition throughput on one core: generated episodes -> per-step samples (prompt + label).

Run: ``python bench/bench_decompose.py [--episodes 300]``. Prints samples/s and episodes/s for the tiny
prompt (compact, no action list) and the EB prompt (long form, full action list), CPU time, best of 3.
The ratio column compares each to the simulator-only replay of the same plans (the floor of what
decomposition costs), so prompt building's share is visible.
"""

from __future__ import annotations

import argparse
import time

from embodied_rft.data.decompose import decompose_episodes
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.world import GeneratorConfig, Simulator, generate_episodes


def _best(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def run(episodes: int = 300) -> list[dict]:
    eps = generate_episodes(GeneratorConfig(), "train", episodes)
    n_samples = sum(len(e["expert_plan"]) for e in eps)

    def replay() -> None:
        for e in eps:
            sim = Simulator.from_episode(e)
            for a in e["expert_plan"]:
                sim.observe_text()
                sim.step(a)

    t_sim = _best(replay)
    rows = []
    for name, cfg in (
        ("tiny prompt", PromptConfig(style="compact", action_list="none")),
        ("EB prompt", PromptConfig(style="eb", action_list="full")),
    ):
        t = _best(lambda cfg=cfg: decompose_episodes(eps, cfg))
        rows.append(
            {
                "bench": "decompose",
                "case": name,
                "value": n_samples / t,
                "unit": "samples/s",
                "ratio": t_sim / t,
                "vs": "simulator-only replay",
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=300)
    rows = run(ap.parse_args().episodes)
    print(f"{'case':<12} {'samples/s':>10} {'ratio':>6}  vs")
    for r in rows:
        print(f"{r['case']:<12} {r['value']:>10.0f} {r['ratio']:>6.2f}  {r['vs']}")


if __name__ == "__main__":
    main()
