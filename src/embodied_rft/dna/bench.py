"""The reward benchmark (``rm_bench``): per task, one trajectory of each kind, each under several instructions.

A task is an episode of ``dna.bench.split`` (``tasks_per_target`` per goal object type, the first in file order
where every kind is feasible; the others are counted as infeasible). Its trajectories, each replayed in the
simulator and checked:

- ``optimal``: the expert plan (success);
- ``suboptimal``: the expert plan with ``detours`` extra ``find a Y`` (Y an object type of the scene the task
  does not need), each before one of the plan's own ``find a`` steps so nothing after it changes (success, longer);
- ``wrong_object``: the goal's object replaced by a look-alike (``teacher/errors.py``; else another pickable
  object of the scene) in every step that names it, the rest of the plan executed with it (failure);
- ``wrong_receptacle``: the goal's receptacle (or lamp) replaced the same way (failure);
- ``incomplete``: the expert plan cut before its last step, at a seeded point (failure);
- ``regress``: the expert plan, then the goal undone (the object picked up again, or the lamp switched off):
  the last state's goal conditions below the peak's (failure).

Every step of every trajectory executes (a rejected action would be a different failure). Each (task, kind) is
written once per instruction paraphrase (the episode's own instruction first, then distinct ones drawn with the
generator's writer in several subset styles), as one bench record: ``id``, ``task`` (episode id), ``instruction``,
``paraphrase``, ``kind``, ``level`` (2 optimal, 1 suboptimal, 0 failure), ``success``, ``actions``, ``progress``
(the planner's at every state), ``target_type``, ``substitute`` (the stand-in type, where one), ``lookalike``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from embodied_rft.core.jsonl import DataError
from embodied_rft.dna.config import LEVELS, BenchConfig
from embodied_rft.dna.frames import Trajectory, replay
from embodied_rft.teacher.errors import LOOKALIKE_OBJECTS, LOOKALIKE_RECEPTACLES
from embodied_rft.world.actions import PUT_DOWN, split_action
from embodied_rft.world.episode import parse_goal
from embodied_rft.world.instructions import make_instruction
from embodied_rft.world.objects import TYPES, can_contain
from embodied_rft.world.oracle import WorldOracle
from embodied_rft.world.simulator import Simulator

PARAPHRASE_STYLES = ("base", "common_sense", "visual_appearance", "spatial")


@dataclass(frozen=True)
class Built:
    """One kind's trajectory for a task, and the stand-in it used (wrong_object / wrong_receptacle)."""

    traj: Trajectory
    substitute: str | None = None
    lookalike: bool = False


def _executes(t: Trajectory) -> bool:
    return all(t.ok)


def _present(sim: Simulator, pred: Callable[[str], bool]) -> list[str]:
    return sorted(t for t, objs in sim.by_type.items() if objs and t in TYPES and pred(t))


def _swap(plan: Iterable[str], old: str, new: str) -> list[str]:
    out = []
    for a in plan:
        verb, target = split_action(a)
        out.append(f"{verb} {new}" if target == old else a)
    return out


def _substituted(ep: dict, plan: list[str], old: str, options: list[str], lookalike: str | None) -> Built | None:
    """The plan with ``old`` replaced by the first option (the look-alike first) that executes every step and
    fails the task."""
    ordered = ([lookalike] if lookalike in options else []) + [o for o in options if o != lookalike]
    space = Simulator.from_episode(ep).actions
    for new in ordered:
        swapped = _swap(plan, old, new)
        if any(space.get_id(a) is None for a in swapped):
            continue
        t = replay(ep, swapped)
        if _executes(t) and not t.states[-1].is_success():
            return Built(t, new, new == lookalike)
    return None


def optimal(ep: dict, plan: list[str], rng: random.Random, cfg: BenchConfig) -> Built | None:
    t = replay(ep, plan)
    return Built(t) if _executes(t) and t.states[-1].is_success() else None


def suboptimal(ep: dict, plan: list[str], rng: random.Random, cfg: BenchConfig) -> Built | None:
    sim = Simulator.from_episode(ep)
    named = {split_action(a)[1] for a in plan} - {None}
    g = sim.goal
    needed = named | {g.object_target, g.parent_target, g.toggle_target, g.mrecep_target}
    others = _present(sim, lambda t: t not in needed and sim.actions.get_id(f"find a {t}") is not None)
    slots = [i for i, a in enumerate(plan) if split_action(a)[0] == "find a"]
    if not others or not slots:
        return None
    for _ in range(20):
        new = list(plan)
        for i in sorted(rng.choices(slots, k=cfg.detours), reverse=True):
            new.insert(i, f"find a {rng.choice(others)}")
        t = replay(ep, new)
        if _executes(t) and t.states[-1].is_success():
            return Built(t)
    return None


def wrong_object(ep: dict, plan: list[str], rng: random.Random, cfg: BenchConfig) -> Built | None:
    sim = Simulator.from_episode(ep)
    x = sim.goal.object_target
    if f"pick up the {x}" not in plan:
        return None
    options = _present(sim, lambda t: TYPES[t].pickable and t != x)
    rng.shuffle(options)
    return _substituted(ep, plan, x, options, LOOKALIKE_OBJECTS.get(x))


def wrong_receptacle(ep: dict, plan: list[str], rng: random.Random, cfg: BenchConfig) -> Built | None:
    sim = Simulator.from_episode(ep)
    g = sim.goal
    r = g.parent_target or g.toggle_target
    if r is None or f"find a {r}" not in plan:
        return None
    if g.parent_target:
        held = g.object_target
        options = _present(sim, lambda t: TYPES[t].receptacle and t != r and can_contain(t, held))
    else:
        options = _present(sim, lambda t: t != r and sim.actions.get_id(f"turn on the {t}") is not None)
    rng.shuffle(options)
    return _substituted(ep, plan, r, options, LOOKALIKE_RECEPTACLES.get(r))


def incomplete(ep: dict, plan: list[str], rng: random.Random, cfg: BenchConfig) -> Built | None:
    if len(plan) < 2:
        return None
    t = replay(ep, plan[: rng.randint(1, len(plan) - 1)])
    return Built(t) if _executes(t) and not t.states[-1].is_success() else None


def regress(ep: dict, plan: list[str], rng: random.Random, cfg: BenchConfig) -> Built | None:
    sim = Simulator.from_episode(ep)
    g = sim.goal
    undo = [[f"pick up the {g.object_target}"], [f"find a {g.object_target}", f"pick up the {g.object_target}"]]
    if g.toggle_target:
        undo.insert(0, [f"turn off the {g.toggle_target}"])
        undo.append([PUT_DOWN])
    for tail in undo:
        if any(sim.actions.get_id(a) is None for a in tail):
            continue
        t = replay(ep, plan + tail)
        if _executes(t) and not t.states[-1].is_success() and t.states[-1].progress() < 1.0:
            return Built(t)
    return None


BUILDERS: dict[str, Callable[[dict, list[str], random.Random, BenchConfig], Built | None]] = {
    "optimal": optimal,
    "suboptimal": suboptimal,
    "wrong_object": wrong_object,
    "wrong_receptacle": wrong_receptacle,
    "incomplete": incomplete,
    "regress": regress,
}


def paraphrases(ep: dict, n: int, seed: int) -> list[str]:
    """The episode's instruction, then distinct ones from the generator's writer, ``n`` in all (fewer when the
    writer has no more after 50 draws per paraphrase)."""
    task_type, goal = parse_goal(ep)
    sim = Simulator.from_episode(ep)
    out = [ep["instruction"]]
    rng = random.Random(f"{seed}:{ep['episode_id']}:paraphrase")
    for _ in range(50 * n):
        if len(out) >= n:
            break
        text = make_instruction(task_type, goal, sim, rng.choice(PARAPHRASE_STYLES), random.Random(rng.random()))
        if text not in out:
            out.append(text)
    return out


def build_task(ep: dict, cfg: BenchConfig) -> dict[str, Built] | str:
    """Every kind's trajectory for one episode, or the first kind that is infeasible."""
    plan = list(ep["expert_plan"])
    out = {}
    for kind in cfg.kinds:
        rng = random.Random(f"{cfg.seed}:{ep['episode_id']}:{kind}")
        built = BUILDERS[kind](ep, plan, rng, cfg)
        if built is None:
            return kind
        out[kind] = built
    return out


def _lookalike_present(ep: dict) -> bool:
    sim = Simulator.from_episode(ep)
    fake = LOOKALIKE_OBJECTS.get(sim.goal.object_target)
    return bool(fake and sim.by_type.get(fake))


def build_bench(episodes: list[dict], cfg: BenchConfig) -> tuple[list[dict], dict]:
    """The bench records (module docstring) and their counts (tasks, infeasible kinds, paraphrases, records).
    A goal object type's tasks are taken from its episodes whose scene holds the object's look-alike first (the
    wrong-object trajectories a look-alike bias is about), then from the rest, each in file order."""
    records: list[dict] = []
    taken: Counter = Counter()
    infeasible: Counter = Counter()
    tried: Counter = Counter()
    short_paraphrases = 0
    ordered = sorted(enumerate(episodes), key=lambda ie: (not _lookalike_present(ie[1]), ie[0]))
    for _, ep in ordered:
        target = ep["goal"]["object_target"]
        if taken[target] >= cfg.tasks_per_target:
            continue
        tried[target] += 1
        built = build_task(ep, cfg)
        if isinstance(built, str):
            infeasible[built] += 1
            continue
        taken[target] += 1
        texts = paraphrases(ep, cfg.paraphrases, cfg.seed)
        short_paraphrases += len(texts) < cfg.paraphrases
        oracle = WorldOracle(ep)
        for kind, b in built.items():
            progress = [round(oracle.progress(s), 6) for s in b.traj.states]
            for p, text in enumerate(texts):
                records.append(
                    {
                        "id": f"{ep['episode_id']}:{kind}:{p}",
                        "task": ep["episode_id"],
                        "task_type": ep["task_type"],
                        "target_type": target,
                        "instruction": text,
                        "paraphrase": p,
                        "kind": kind,
                        "level": LEVELS[kind],
                        "success": bool(b.traj.states[-1].is_success()),
                        "actions": list(b.traj.actions),
                        "progress": progress,
                        "substitute": b.substitute,
                        "lookalike": b.lookalike,
                    }
                )
    tasks = sum(taken.values())
    counts = {
        "tasks": tasks,
        "target_types": len(taken),
        "records": len(records),
        "kinds": dict(Counter(r["kind"] for r in records)),
        "episodes_tried": sum(tried.values()),
        "infeasible_by_kind": dict(infeasible),
        "infeasible_share": round(sum(infeasible.values()) / max(1, sum(tried.values())), 4),
        "tasks_with_fewer_paraphrases": short_paraphrases,
        "lookalike_share": {
            k: round(
                sum(r["lookalike"] for r in records if r["kind"] == k) / max(1, sum(r["kind"] == k for r in records)), 4
            )
            for k in ("wrong_object", "wrong_receptacle")
        },
    }
    return records, counts


def bench_checks(records: list[dict]) -> dict:
    """The bench's own floors (issue 66): kinds per target type, optimal progress never falling, every regress
    ending below its peak."""
    from collections import defaultdict

    kinds_by_type: dict[str, set] = defaultdict(set)
    for r in records:
        kinds_by_type[r["target_type"]].add(r["kind"])
    all_kinds = {r["kind"] for r in records}
    optimal = [r for r in records if r["kind"] == "optimal" and r["paraphrase"] == 0]
    regress_ = [r for r in records if r["kind"] == "regress" and r["paraphrase"] == 0]
    return {
        "target_types_with_every_kind": sum(k == all_kinds for k in kinds_by_type.values()),
        "optimal_progress_falls": sum(any(b < a for a, b in zip(r["progress"], r["progress"][1:])) for r in optimal),
        "regress_final_below_peak": sum(r["progress"][-1] < max(r["progress"]) for r in regress_),
        "regress_trajectories": len(regress_),
    }


HEADLINE = {"records": True, "target_types": True, "checks": {"target_types_with_every_kind": True}}


def run_rm_bench(cfg: BenchConfig, episodes_path: str | Path, out_dir: str | Path, metrics_path: str | Path) -> dict:
    """Build the bench from ``episodes_path`` into ``out_dir`` (``bench.jsonl``, ``tasks.jsonl``: the episodes it
    uses), atomically, and its counts into ``metrics_path`` (headline) and the details file beside it."""
    from embodied_rft.core.atomic import atomic_directory, write_jsonl_atomic
    from embodied_rft.core.metrics import write_metrics
    from embodied_rft.world.episode import read_episodes

    episodes = read_episodes(episodes_path)
    records, counts = build_bench(episodes, cfg)
    if not records:
        raise DataError(f"{episodes_path}: no episode gives every kind of {list(cfg.kinds)}")
    used = {r["task"] for r in records}
    with atomic_directory(out_dir) as tmp:
        write_jsonl_atomic(Path(tmp) / "bench.jsonl", records)
        write_jsonl_atomic(Path(tmp) / "tasks.jsonl", [e for e in episodes if e["episode_id"] in used])
    record = {**counts, "checks": bench_checks(records), "config": {"split": cfg.split, "seed": cfg.seed}}
    write_metrics(metrics_path, record, HEADLINE)
    return record
