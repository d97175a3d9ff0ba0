"""Seeded generator of EB-ALFRED-style episodes in the symbolic world.

Input: :class:`GeneratorConfig` (built with ``config.build(GeneratorConfig, mapping, "data.generated")``), a
split name and a count. Output: Episode dicts (the project's Episode schema, ``source: "generated"``) whose
``expert_plan`` reaches the goal in :class:`~embodied_rft.world.simulator.Simulator`; and
:func:`run_prepare_generated`, which writes ``<out_dir>/<split>.jsonl`` atomically and returns counts.

How an episode is drawn (episode ``i`` of a split uses its own RNG, ``Random(f"{seed}/{split}/{i}")``, so the
first ``n`` episodes do not depend on how many are asked for):
1. its subset cycles through ``subsets``; its task type is uniform over ``task_types`` (long_horizon: over the
   multi-stage types, with slicing whenever the target allows it, and a plan of at least
   ``long_horizon_min_len`` actions), and its room over the rooms ALFRED allows for that type
   (``GOALS_VALID`` in ALFRED's ``gen/constants.py``);
2. a layout of the split (``layouts.py``); the goal's object, receptacle, movable receptacle, lamp and slicing
   obey ALFRED's compatibility table; objects are scattered over compatible receptacles (sometimes inside
   closed ones or inside movable receptacles), containers start open or closed, lamps and taps on or off,
   and no goal object starts where the goal wants it;
3. the expert planner plans it (plans therefore depend on the initial state), the plan is kept when it has at
   most ``max_plan_len`` actions (EB ends an episode after 30 steps) and uses only the 162 global actions
   (ids < 162, so a prompt may omit the scene extras), and an instruction is written in the subset's style
   (``instructions.py``).

Splits are by layout, as ALFRED's: ``train`` and ``valid_seen`` use the same layouts, ``valid_unseen`` layouts
never seen in train. ``valid_seen`` holds *new tasks*: a goal (layout, task type, targets, slicing) is kept
for valid_seen iff its CRC32 is divisible by ``valid_seen_goal_mod``, and for train iff it is not.
Departure from the paper: the paper trains on ALFRED trajectories and evaluates in AI2-THOR; this is the
offline proxy, labelled ``source: generated``.
"""

from __future__ import annotations

import functools
import logging
import random
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from embodied_rft.config import check
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.schema import SPLITS, SUBSETS, TASK_TYPES
from embodied_rft.world.actions import global_actions
from embodied_rft.world.instructions import make_instruction
from embodied_rft.world.layouts import POOLS, ROOMS, Layout, make_layouts
from embodied_rft.world.objects import (
    BASINS,
    KNIVES,
    LAMPS,
    MOVABLE_RECEPTACLES,
    RECEPTACLE_OBJECTS,
    SLICED_TYPE,
    TYPES,
)
from embodied_rft.world.planner import PlanError, plan_for
from embodied_rft.world.simulator import Simulator

log = logging.getLogger(__name__)
_GLOBAL_IDS = frozenset(global_actions())

# ALFRED gen/constants.py GOALS_VALID: the scene types each task type is generated in
GOALS_VALID = {
    "pick_and_place_simple": ("kitchen", "living_room", "bedroom", "bathroom"),
    "pick_two_obj_and_place": ("kitchen", "living_room", "bedroom", "bathroom"),
    "look_at_obj_in_light": ("living_room", "bedroom"),
    "pick_clean_then_place_in_recep": ("kitchen", "bathroom"),
    "pick_heat_then_place_in_recep": ("kitchen",),
    "pick_cool_then_place_in_recep": ("kitchen",),
    "pick_and_place_with_movable_recep": ("kitchen", "living_room", "bedroom"),
}
LONG_TYPES = (
    "pick_two_obj_and_place",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_and_place_with_movable_recep",
)
_PROCESS_AT = {
    "pick_clean_then_place_in_recep": BASINS,
    "pick_heat_then_place_in_recep": {"Microwave"},
    "pick_cool_then_place_in_recep": {"Fridge"},
}


@dataclass(frozen=True)
class GeneratorConfig:
    # base seed of layouts and episodes (any int; the paper has no counterpart)
    seed: int = 0
    # room types to build (ALFRED's four scene types)
    rooms: tuple[str, ...] = ROOMS
    # layouts per room type for train / valid_seen (ALFRED: 24 train floor plans per scene type)
    n_layouts_train: int = 24
    # layouts per room type only in valid_unseen (ALFRED: 6 held-out floor plans per scene type)
    n_layouts_unseen: int = 6
    # episodes per split (EB-ALFRED evaluates 6 subsets x 50 episodes; ALFRED train has 6,574 trajectories)
    n_train: int = 3000
    n_valid_seen: int = 300
    n_valid_unseen: int = 300
    # instruction styles, cycled over episodes (EB-ALFRED's six subsets)
    subsets: tuple[str, ...] = SUBSETS
    # task types drawn uniformly (ALFRED's seven)
    task_types: tuple[str, ...] = TASK_TYPES
    # object types a goal may name (its object_target; empty = every type the room holds, as ALFRED). Scenes
    # still hold every other type as distractors; only the set of things asked for shrinks.
    target_types: tuple[str, ...] = ()
    # probability that a task on a sliceable object asks for slices (ALFRED: about 14% of trajectories)
    p_sliced: float = 0.2
    # probability that an openable receptacle starts open
    p_open: float = 0.25
    # probability that a lamp or faucet starts switched on
    p_on: float = 0.1
    # probability that a small object starts inside a movable receptacle (bowl, plate, mug ...)
    p_in_movable: float = 0.15
    # distractor object types per scene, inclusive range
    min_distractors: int = 4
    max_distractors: int = 9
    # longest expert plan kept, in actions (EB ends an episode after 30 environment steps)
    max_plan_len: int = 30
    # shortest expert plan of a long_horizon episode, in actions (EB's long-horizon gold plans: 15-20)
    long_horizon_min_len: int = 15
    # 1 in this many goals is reserved for valid_seen (new tasks on seen layouts)
    valid_seen_goal_mod: int = 5
    # draws per episode before giving up (a failed draw: no compatible goal or plan too long)
    max_attempts: int = 200

    def __post_init__(self) -> None:
        check(len(self.rooms) > 0 and all(r in ROOMS for r in self.rooms), "rooms", f"each one of {list(ROOMS)}")
        check(
            len(self.subsets) > 0 and all(s in SUBSETS for s in self.subsets), "subsets", f"each one of {list(SUBSETS)}"
        )
        check(
            len(self.task_types) > 0 and all(t in TASK_TYPES for t in self.task_types),
            "task_types",
            f"each one of {list(TASK_TYPES)}",
        )
        for t in self.task_types:
            check(
                any(r in self.rooms for r in GOALS_VALID[t]),
                "task_types",
                f"{t} needs one of the rooms {list(GOALS_VALID[t])}",
            )
        for t in self.target_types:
            check(
                t in TYPES and TYPES[t].pickable, "target_types", f"{t!r} is not an object type that can be picked up"
            )
        if self.target_types:
            for tt in self.task_types:
                check(
                    any(t in POOLS[r] for r in GOALS_VALID[tt] if r in self.rooms for t in self.target_types),
                    "target_types",
                    f"none of them occurs in a room where {tt} is generated",
                )
        check(self.n_layouts_train >= 1, "n_layouts_train", "must be >= 1")
        check(self.n_layouts_unseen >= 1, "n_layouts_unseen", "must be >= 1")
        for k in ("n_train", "n_valid_seen", "n_valid_unseen"):
            check(getattr(self, k) >= 0, k, "must be >= 0")
        for k in ("p_sliced", "p_open", "p_on", "p_in_movable"):
            check(0.0 <= getattr(self, k) <= 1.0, k, f"must be a probability in [0, 1], got {getattr(self, k)}")
        check(0 <= self.min_distractors <= self.max_distractors, "max_distractors", "must be >= min_distractors >= 0")
        check(self.max_plan_len >= 4, "max_plan_len", "must be >= 4 (the shortest plan has 4 actions)")
        check(self.long_horizon_min_len <= self.max_plan_len, "long_horizon_min_len", "must be <= max_plan_len")
        check(self.valid_seen_goal_mod >= 2, "valid_seen_goal_mod", "must be >= 2")
        check(self.max_attempts >= 1, "max_attempts", "must be >= 1")


def _strict(recep: str, obj: str) -> bool:
    # scene sampling uses ALFRED's table as is (no knives-anywhere exception): scenes look like ALFRED's
    return obj in RECEPTACLE_OBJECTS.get(recep, ())


@functools.lru_cache(maxsize=16)
def _layouts(seed: int, n_train: int, n_unseen: int, rooms: tuple[str, ...]) -> tuple[tuple, tuple]:
    train, unseen = make_layouts(seed, n_train, n_unseen, rooms)
    return tuple(train), tuple(unseen)


def split_layouts(cfg: GeneratorConfig, split: str) -> tuple[Layout, ...]:
    """The layouts a split draws from."""
    if split not in SPLITS:
        raise ValueError(f"split: {split!r} is not one of {list(SPLITS)}")
    train, unseen = _layouts(cfg.seed, cfg.n_layouts_train, cfg.n_layouts_unseen, tuple(cfg.rooms))
    return unseen if split == "valid_unseen" else train


def goal_key(layout_id: str, task_type: str, goal: dict) -> str:
    return "|".join(
        [layout_id, task_type]
        + [str(goal[k]) for k in ("object_target", "parent_target", "mrecep_target", "toggle_target", "object_sliced")]
    )


def _split_ok(cfg: GeneratorConfig, split: str, key: str) -> bool:
    if split == "valid_unseen":
        return True
    held_out = zlib.crc32(key.encode()) % cfg.valid_seen_goal_mod == 0
    return held_out == (split == "valid_seen")


class _Draw:
    """One attempt at a scene + goal on a layout."""

    def __init__(self, cfg: GeneratorConfig, layout: Layout, rng: random.Random) -> None:
        self.cfg = cfg
        self.lay = layout
        self.rng = rng
        self.pool = POOLS[layout.room]
        self.fixed_types = layout.types()
        self.recep_fixed = [(oid, t) for oid, t, p in layout.fixed if TYPES[t].receptacle and p is None]

    def parents_for(self, typ: str, exclude: set[str]) -> list[str]:
        return sorted({t for _, t in self.recep_fixed if t not in exclude and _strict(t, typ)})

    def goal(self, tt: str, long: bool) -> dict | None:
        rng, pool = self.rng, self.pool
        knife = any(k in pool for k in KNIVES)
        cands = [t for t in pool if t in self.cfg.target_types] if self.cfg.target_types else list(pool)
        if tt in _PROCESS_AT:
            need = _PROCESS_AT[tt]
            if not need & self.fixed_types:
                return None
            cap = {
                "pick_clean_then_place_in_recep": "cleanable",
                "pick_heat_then_place_in_recep": "heatable",
                "pick_cool_then_place_in_recep": "coolable",
            }[tt]
            cands = [t for t in cands if getattr(TYPES[t], cap)]
            if tt == "pick_clean_then_place_in_recep":
                cands = [t for t in cands if any(_strict(b, t) for b in BASINS & self.fixed_types)]
        if tt == "look_at_obj_in_light":
            lamps = sorted(LAMPS & self.fixed_types)
            if not lamps:
                return None
            obj = rng.choice(cands)
            return {
                "object_target": obj,
                "parent_target": None,
                "mrecep_target": None,
                "toggle_target": rng.choice(lamps),
                "object_sliced": False,
            }
        if long:
            sliceable = [t for t in cands if t in SLICED_TYPE]
            if knife and sliceable and rng.random() < 0.85:
                cands = sliceable
        if not cands:
            return None
        obj = rng.choice(cands)
        sliced = obj in SLICED_TYPE and knife and (long or rng.random() < self.cfg.p_sliced)
        placed = SLICED_TYPE[obj] if sliced else obj
        mrecep = None
        exclude = set(_PROCESS_AT.get(tt, ()))
        if tt == "pick_and_place_with_movable_recep":
            ms = [m for m in sorted(MOVABLE_RECEPTACLES) if m in pool and m != obj and _strict(m, placed)]
            ms = [m for m in ms if self.parents_for(m, exclude)]
            if not ms:
                return None
            mrecep = rng.choice(ms)
            parents = self.parents_for(mrecep, exclude)
        else:
            parents = self.parents_for(placed, exclude)
        if not parents:
            return None
        return {
            "object_target": obj,
            "parent_target": rng.choice(parents),
            "mrecep_target": mrecep,
            "toggle_target": None,
            "object_sliced": sliced,
        }

    def scene(self, tt: str, goal: dict) -> list[dict] | None:
        cfg, rng = self.cfg, self.rng
        obj, parent, mrecep = goal["object_target"], goal["parent_target"], goal["mrecep_target"]
        n_target = rng.randint(2, 3) if tt == "pick_two_obj_and_place" else rng.randint(1, 3)
        if goal["object_sliced"]:
            n_target = rng.randint(1, 2)
        smalls: list[tuple[str, str]] = [(obj, "target")] * n_target
        if mrecep:
            smalls += [(mrecep, "mrecep")] * rng.randint(1, 2)
        if goal["object_sliced"]:
            smalls.append((rng.choice([k for k in sorted(KNIVES) if k in self.pool]), "tool"))
        used = {t for t, _ in smalls}
        rest = [t for t in self.pool if t not in used]
        k = min(len(rest), rng.randint(cfg.min_distractors, cfg.max_distractors))
        for t in rng.sample(rest, k):
            smalls += [(t, "other")] * rng.choice((1, 1, 2))
        # movable receptacles first, so other objects can be put in them
        smalls.sort(key=lambda x: x[0] not in MOVABLE_RECEPTACLES)
        counts: dict[str, int] = {}
        objects = []
        for oid, t, p in self.lay.fixed:
            counts[t] = counts.get(t, 0) + 1
            # every object carries open/on/dirty (the Episode schema); only capable types may be true
            st = {
                "open": TYPES[t].openable and rng.random() < cfg.p_open,
                "on": TYPES[t].toggleable and t != "Microwave" and rng.random() < cfg.p_on,
                "dirty": False,
            }
            objects.append({"id": oid, "type": t, "parent": p, "state": st})
        fixed_by_type: dict[str, list[str]] = {}
        for oid, t in self.recep_fixed:
            fixed_by_type.setdefault(t, []).append(oid)
        movables: list[tuple[str, str]] = []
        for t, role in smalls:
            no = set()
            if role == "target":
                no.add(parent)
                if mrecep:
                    no.add(mrecep)
            if role == "mrecep":
                no.add(parent)
            places = [oid for rt in self.parents_for(t, no) for oid in fixed_by_type[rt]]
            inner = [mid for mid, mt in movables if mt not in no and _strict(mt, t)]
            if inner and rng.random() < cfg.p_in_movable:
                places = inner
            if not places:
                if role in ("target", "mrecep", "tool"):
                    return None
                continue
            counts[t] = counts.get(t, 0) + 1
            oid = t if counts[t] == 1 else f"{t}_{counts[t]}"
            st = {
                "open": TYPES[t].openable and rng.random() < 0.5,
                "on": False,
                "dirty": TYPES[t].cleanable
                and (role == "target" and tt == "pick_clean_then_place_in_recep" or rng.random() < 0.3),
            }
            objects.append({"id": oid, "type": t, "parent": rng.choice(places), "state": st})
            if t in MOVABLE_RECEPTACLES:
                movables.append((oid, t))
        return objects


def _draw_episode(cfg: GeneratorConfig, split: str, i: int, layouts: tuple[Layout, ...]) -> dict:
    rng = random.Random(f"{cfg.seed}/{split}/{i}")
    subset = cfg.subsets[i % len(cfg.subsets)]
    long = subset == "long_horizon"
    types = [t for t in cfg.task_types if t in LONG_TYPES] if long else list(cfg.task_types)
    types = types or list(cfg.task_types)
    by_room: dict[str, list[Layout]] = {}
    for lay in layouts:
        by_room.setdefault(lay.room, []).append(lay)
    last_err = "no attempt"
    for attempt in range(1, cfg.max_attempts + 1):
        tt = rng.choice(types)
        rooms = [r for r in GOALS_VALID[tt] if r in by_room]
        if not rooms:
            last_err = f"no {split} layout in a room for {tt}"
            continue
        lay = rng.choice(by_room[rng.choice(rooms)])
        d = _Draw(cfg, lay, rng)
        goal = d.goal(tt, long)
        if goal is None:
            last_err = f"no goal for {tt} in {lay.layout_id}"
            continue
        if not _split_ok(cfg, split, goal_key(lay.layout_id, tt, goal)):
            last_err = "goal reserved for the other seen split"
            continue
        objects = d.scene(tt, goal)
        if objects is None:
            last_err = f"cannot place the goal objects in {lay.layout_id}"
            continue
        ep = {
            "episode_id": f"gen-{split}-{i:06d}",
            "split": split,
            "source": "generated",
            "subset": subset,
            "instruction": "",
            "task_type": tt,
            "goal": goal,
            "scene": {"layout_id": lay.layout_id, "room": lay.room, "objects": objects},
            "expert_plan": [],
            "meta": {},
        }
        sim = Simulator.from_episode(ep)
        if sim.is_success():
            last_err = "goal satisfied at the start"
            continue
        try:
            plan = plan_for(sim)
        except PlanError as exc:
            last_err = f"planner: {exc}"
            continue
        if len(plan) > cfg.max_plan_len or (long and len(plan) < cfg.long_horizon_min_len):
            last_err = f"plan of {len(plan)} actions"
            continue
        if not all(a in _GLOBAL_IDS for a in plan):
            # generated plans use only the 162 global actions (the prompt may leave scene extras out);
            # the planner needs a suffixed name only when a plain one cannot reach a suitable instance
            last_err = "plan needs a scene-specific action"
            continue
        ep["expert_plan"] = plan
        ep["instruction"] = make_instruction(tt, sim.goal, sim, subset, rng)
        ep["meta"] = {
            "generator": "embodied_rft.world",
            "seed": cfg.seed,
            "index": i,
            "attempts": attempt,
            "plan_len": len(plan),
            "layout_seen": split != "valid_unseen",
        }
        return ep
    raise RuntimeError(f"{split} episode {i}: no episode after {cfg.max_attempts} draws (last: {last_err})")


def generate_episodes(cfg: GeneratorConfig, split: str, n: int | None = None, start: int = 0) -> list[dict]:
    """Episodes ``start .. start+n-1`` of ``split`` (``n`` defaults to the split's size in ``cfg``)."""
    layouts = split_layouts(cfg, split)
    if n is None:
        n = {"train": cfg.n_train, "valid_seen": cfg.n_valid_seen, "valid_unseen": cfg.n_valid_unseen}[split]
    return [_draw_episode(cfg, split, i, layouts) for i in range(start, start + n)]


def episode_counts(episodes: list[dict]) -> dict:
    """Counts per task type, per subset and per task type x subset, plus plan-length stats."""
    tt = Counter(e["task_type"] for e in episodes)
    ss = Counter(e["subset"] for e in episodes)
    both = Counter(f"{e['task_type']}/{e['subset']}" for e in episodes)
    lens = [len(e["expert_plan"]) for e in episodes]
    return {
        "episodes": len(episodes),
        "task_type": dict(sorted(tt.items())),
        "subset": dict(sorted(ss.items())),
        "task_type_x_subset": dict(sorted(both.items())),
        "sliced": sum(e["goal"]["object_sliced"] for e in episodes),
        "layouts": len({e["scene"]["layout_id"] for e in episodes}),
        "plan_len_mean": round(sum(lens) / len(lens), 3) if lens else 0.0,
        "plan_len_max": max(lens, default=0),
    }


def run_prepare_generated(cfg: GeneratorConfig, out_dir: str | Path) -> dict:
    """Write ``out_dir/<split>.jsonl`` for the three splits (atomically); return the counts as metrics."""
    out_dir = Path(out_dir)
    metrics: dict = {"source": "generated", "splits": {}}
    for split in SPLITS:
        eps = generate_episodes(cfg, split)
        write_jsonl_atomic(out_dir / f"{split}.jsonl", eps)
        metrics["splits"][split] = episode_counts(eps)
        log.info("generated %d %s episodes -> %s", len(eps), split, out_dir / f"{split}.jsonl")
    train, unseen = _layouts(cfg.seed, cfg.n_layouts_train, cfg.n_layouts_unseen, tuple(cfg.rooms))
    metrics["layouts"] = {"train": len(train), "unseen": len(unseen)}
    return metrics


__all__ = [
    "GOALS_VALID",
    "GeneratorConfig",
    "SPLITS",
    "episode_counts",
    "generate_episodes",
    "goal_key",
    "run_prepare_generated",
    "split_layouts",
]
