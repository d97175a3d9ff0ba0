"""Throughput of the symbolic EB-ALFRED world on one core.

Run: ``python bench/bench_world.py [--episodes 1000] [--repeats 3] [--json out.json]``.
Prints a table: episode generation (episodes/s), expert planning (plans/s), simulator stepping on expert-plan
replay (actions/s, with and without building the simulator from the episode dict), text observations and
224x224 image renders per second. Times are this single-threaded process's CPU time (``time.process_time``),
so other jobs on the machine do not count, and each figure is the best of ``--repeats`` runs. The floor the
project asks for is 20,000 simulator actions/s; the exit status is 1 when the step rate is below it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from embodied_rft.world import GeneratorConfig, Simulator, expert_plan, generate_episodes

FLOOR_ACTIONS_PER_S = 20_000


def best_of(repeats: int, fn) -> float:
    """Smallest CPU time of ``repeats`` calls of ``fn`` (seconds)."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=1000, help="generated episodes to time and replay")
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure; the best one is reported")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()

    cfg = GeneratorConfig(seed=args.seed)
    generate_episodes(cfg, "train", 5)  # build the layouts once, outside the timings
    n = args.episodes
    eps: list[dict] = []

    def gen() -> None:
        eps[:] = generate_episodes(cfg, "train", n)

    t_gen = best_of(args.repeats, gen)
    n_actions = sum(len(e["expert_plan"]) for e in eps)

    t_plan = best_of(args.repeats, lambda: [expert_plan(e) for e in eps])
    t_build = best_of(args.repeats, lambda: [Simulator.from_episode(e) for e in eps])

    def replay_steps() -> None:
        for sim, plan in [(Simulator.from_episode(e), e["expert_plan"]) for e in eps]:
            for a in plan:
                sim.step(a)

    def steps_only() -> float:
        sims = [(Simulator.from_episode(e), e["expert_plan"]) for e in eps]
        t = time.process_time()
        for sim, plan in sims:
            for a in plan:
                sim.step(a)
        return time.process_time() - t

    t_step = min(steps_only() for _ in range(args.repeats))
    t_replay = best_of(args.repeats, replay_steps)

    some = [Simulator.from_episode(e) for e in eps[:200]]
    for sim, e in zip(some, eps):
        for a in e["expert_plan"][: len(e["expert_plan"]) // 2]:
            sim.step(a)
    t_text = best_of(args.repeats, lambda: [s.observe_text() for s in some])
    t_img = best_of(args.repeats, lambda: [s.render_image() for s in some[:100]])

    rows = [
        ("episode generation", n / t_gen, "episodes/s", f"{n} train episodes, plans checked in the simulator"),
        ("expert planning", n / t_plan, "plans/s", f"mean plan {n_actions / n:.1f} actions"),
        (
            "simulator step",
            n_actions / t_step,
            "actions/s",
            f"{n_actions} expert-plan actions, floor {FLOOR_ACTIONS_PER_S:,}/s",
        ),
        ("replay incl. from_episode", n_actions / t_replay, "actions/s", f"build {t_build / n * 1e3:.3f} ms/episode"),
        ("observe_text", len(some) / t_text, "obs/s", "mid-plan states"),
        ("render_image 224x224", min(100, len(some)) / t_img, "images/s", "PIL"),
    ]
    print(f"{'benchmark':28s} {'rate':>12s}  {'unit':11s} note")
    print("-" * 90)
    for name, rate, unit, note in rows:
        print(f"{name:28s} {rate:12,.0f}  {unit:11s} {note}")
    ok = n_actions / t_step >= FLOOR_ACTIONS_PER_S
    print(f"\nsimulator step rate {'meets' if ok else 'is BELOW'} the {FLOOR_ACTIONS_PER_S:,} actions/s floor")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({name.replace(" ", "_"): round(rate, 1) for name, rate, _, _ in rows}, fh, indent=2)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
