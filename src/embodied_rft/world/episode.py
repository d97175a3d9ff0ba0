"""Reading and checking the parts of an Episode the simulator needs (scene, goal, task type).

Input: an Episode dict (the record format: :mod:`embodied_rft.schema`, ``docs/data.md``). Output: :class:`SceneSpec` with the
scene's objects and the goal, or :class:`~embodied_rft.core.jsonl.DataError` whose message names the field,
e.g. ``scene.objects[3].type: unknown object type 'Foo'``. :func:`check_episode` also checks the fields the
simulator ignores (episode_id, split, subset, instruction, expert_plan, meta), for generated data.

Instance ids follow EB: the first instance of a type is its plain type name (``Cabinet``), later ones
``Cabinet_2``, ``Cabinet_3`` ...; the id must name the object's own type.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from embodied_rft.core.jsonl import DataError, read_jsonl
from embodied_rft.schema import SUBSETS, TASK_TYPES, check_episode_record
from embodied_rft.world.objects import ALFRED_TO_EB, LAMPS, MOVABLE_RECEPTACLES, SLICED_TYPE, TYPES

STATE_KEYS = ("open", "on", "dirty", "cleaned", "heated", "cooled")
GOAL_KEYS = ("object_target", "parent_target", "mrecep_target", "toggle_target", "object_sliced")
_ID_RE = re.compile(r"^([A-Za-z]+)(?:_(\d+))?$")


class ObjectSpec(NamedTuple):
    id: str
    type: str
    parent: str | None
    state: dict[str, bool]


@dataclass(frozen=True, slots=True)
class Goal:
    object_target: str
    parent_target: str | None
    mrecep_target: str | None
    toggle_target: str | None
    object_sliced: bool

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in GOAL_KEYS}


@dataclass(frozen=True, slots=True)
class SceneSpec:
    task_type: str
    goal: Goal
    room: str
    layout_id: str
    objects: tuple[ObjectSpec, ...]


def _err(where: str, path: str, msg: str) -> DataError:
    return DataError(f"{where}: {path}: {msg}" if where else f"{path}: {msg}")


def _type_error(where: str, path: str, name: object) -> DataError:
    hint = f" (EB calls it '{ALFRED_TO_EB[name]}')" if isinstance(name, str) and name in ALFRED_TO_EB else ""
    return _err(where, path, f"unknown object type {name!r}{hint}")


def _get(d: dict, key: str, typ: type | tuple, where: str, path: str, optional: bool = False) -> Any:
    if key not in d:
        if optional:
            return None
        raise _err(where, path, "missing field")
    v = d[key]
    if v is None and optional:
        return None
    if isinstance(v, bool) and typ in (int, str):
        raise _err(where, path, f"expected {typ.__name__}, got bool")
    if not isinstance(v, typ):
        tn = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise _err(where, path, f"expected {tn}, got {type(v).__name__} {str(v)[:60]!r}")
    return v


def parse_goal(ep: dict, where: str = "") -> tuple[str, Goal]:
    task_type = _get(ep, "task_type", str, where, "task_type")
    if task_type not in TASK_TYPES:
        raise _err(where, "task_type", f"{task_type!r} is not one of {list(TASK_TYPES)}")
    g = _get(ep, "goal", dict, where, "goal")
    for k in g:
        if k not in GOAL_KEYS:
            raise _err(where, f"goal.{k}", f"unknown goal key; valid keys: {list(GOAL_KEYS)}")
    obj = _get(g, "object_target", str, where, "goal.object_target")
    parent = _get(g, "parent_target", str, where, "goal.parent_target", optional=True)
    mrecep = _get(g, "mrecep_target", str, where, "goal.mrecep_target", optional=True)
    toggle = _get(g, "toggle_target", str, where, "goal.toggle_target", optional=True)
    sliced = _get(g, "object_sliced", bool, where, "goal.object_sliced")
    if obj not in TYPES or not TYPES[obj].pickable or obj in SLICED_TYPE.values():
        if obj in TYPES:
            raise _err(where, "goal.object_target", f"{obj!r} is not a pickable whole object type")
        raise _type_error(where, "goal.object_target", obj)
    if sliced and obj not in SLICED_TYPE:
        raise _err(where, "goal.object_sliced", f"{obj!r} cannot be sliced")
    if task_type == "look_at_obj_in_light":
        if toggle is None:
            raise _err(where, "goal.toggle_target", "required for look_at_obj_in_light")
        if toggle not in LAMPS:
            raise _err(where, "goal.toggle_target", f"{toggle!r} is not a lamp ({sorted(LAMPS)})")
        if parent is not None and (parent not in TYPES or not TYPES[parent].receptacle):
            raise _type_error(where, "goal.parent_target", parent)
    else:
        if parent is None:
            raise _err(where, "goal.parent_target", f"required for {task_type}")
        if parent not in TYPES:
            raise _type_error(where, "goal.parent_target", parent)
        if not TYPES[parent].receptacle:
            raise _err(where, "goal.parent_target", f"{parent!r} is not a receptacle")
    if task_type == "pick_and_place_with_movable_recep":
        if mrecep is None:
            raise _err(where, "goal.mrecep_target", "required for pick_and_place_with_movable_recep")
        if mrecep not in MOVABLE_RECEPTACLES:
            if mrecep not in TYPES:
                raise _type_error(where, "goal.mrecep_target", mrecep)
            raise _err(where, "goal.mrecep_target", f"{mrecep!r} is not a movable receptacle")
    elif mrecep is not None and mrecep not in TYPES:
        raise _type_error(where, "goal.mrecep_target", mrecep)
    return task_type, Goal(obj, parent, mrecep, toggle, sliced)


@functools.lru_cache(maxsize=8192)
def _id_ok(oid: str, typ: str) -> bool:
    m = _ID_RE.match(oid)
    return bool(m) and m.group(1) == typ and (m.group(2) is None or int(m.group(2)) >= 2)


_STATE_SET = frozenset(STATE_KEYS)


def parse_scene(ep: dict, where: str = "") -> tuple[str, str, tuple[ObjectSpec, ...]]:
    scene = _get(ep, "scene", dict, where, "scene")
    room = _get(scene, "room", str, where, "scene.room", optional=True) or "room"
    layout = _get(scene, "layout_id", str, where, "scene.layout_id", optional=True) or ""
    raw = _get(scene, "objects", list, where, "scene.objects")
    specs: list[ObjectSpec] = []
    seen: dict[str, int] = {}
    # the fast path checks with plain comparisons; field paths are only formatted for an error
    for i, o in enumerate(raw):
        if type(o) is not dict:
            raise _err(where, f"scene.objects[{i}]", f"expected an object, got {type(o).__name__}")
        oid, typ, parent = o.get("id"), o.get("type"), o.get("parent")
        if type(oid) is not str or type(typ) is not str or (parent is not None and type(parent) is not str):
            p = f"scene.objects[{i}]"
            _get(o, "id", str, where, f"{p}.id")
            _get(o, "type", str, where, f"{p}.type")
            _get(o, "parent", str, where, f"{p}.parent", optional=True)
        t = TYPES.get(typ)
        if t is None:
            raise _type_error(where, f"scene.objects[{i}].type", typ)
        if not _id_ok(oid, typ):
            raise _err(
                where,
                f"scene.objects[{i}].id",
                f"{oid!r} must be '{typ}' or '{typ}_N' with N >= 2 (EB instance naming)",
            )
        if oid in seen:
            raise _err(where, f"scene.objects[{i}].id", f"duplicate id {oid!r} (also scene.objects[{seen[oid]}])")
        seen[oid] = i
        st = o.get("state")
        if st is None:
            st = {}
        elif type(st) is not dict:
            raise _err(where, f"scene.objects[{i}].state", f"expected an object, got {type(st).__name__}")
        for k, v in st.items():
            if k not in _STATE_SET:
                raise _err(where, f"scene.objects[{i}].state.{k}", f"unknown state key; valid keys: {list(STATE_KEYS)}")
            if v is not True and v is not False:
                raise _err(where, f"scene.objects[{i}].state.{k}", f"expected true/false, got {v!r}")
        if st.get("open") and not t.openable:
            raise _err(where, f"scene.objects[{i}].state.open", f"{typ} cannot be open")
        if st.get("on") and not t.toggleable:
            raise _err(where, f"scene.objects[{i}].state.on", f"{typ} cannot be turned on")
        specs.append(ObjectSpec(oid, typ, parent, st))
    by_id = {s.id: s for s in specs}
    n = len(specs)
    for i, s in enumerate(specs):
        if s.parent is None:
            continue
        ps = by_id.get(s.parent)
        if ps is None:
            raise _err(where, f"scene.objects[{i}].parent", f"unknown object id {s.parent!r}")
        if not TYPES[ps.type].receptacle:
            raise _err(where, f"scene.objects[{i}].parent", f"{s.parent!r} is not a receptacle")
        cur, hops = s.parent, 0
        while cur is not None:
            if cur == s.id or hops > n:
                raise _err(where, f"scene.objects[{i}].parent", f"parent chain of {s.id!r} loops")
            cur, hops = by_id[cur].parent, hops + 1
    return room, layout, tuple(specs)


def parse_episode(ep: Any, where: str = "") -> SceneSpec:
    """Check and read what the simulator needs from an Episode dict."""
    if not isinstance(ep, dict):
        raise DataError(
            f"{where}: expected an episode object, got {type(ep).__name__}"
            if where
            else f"expected an episode object, got {type(ep).__name__}"
        )
    task_type, goal = parse_goal(ep, where)
    room, layout, objects = parse_scene(ep, where)
    return SceneSpec(task_type, goal, room, layout, objects)


def check_episode(ep: Any, where: str = "") -> SceneSpec:
    """Full Episode schema check (all top-level fields), returning the parsed scene."""
    spec = parse_episode(ep, where)
    for key, typ in (
        ("episode_id", str),
        ("split", str),
        ("source", str),
        ("subset", str),
        ("instruction", str),
        ("expert_plan", list),
        ("meta", dict),
    ):
        _get(ep, key, typ, where, key)
    if ep["source"] not in ("generated", "alfred"):
        raise _err(where, "source", f"{ep['source']!r} is not 'generated' or 'alfred'")
    if ep["subset"] not in SUBSETS:
        raise _err(where, "subset", f"{ep['subset']!r} is not one of {list(SUBSETS)}")
    for i, a in enumerate(ep["expert_plan"]):
        if not isinstance(a, str):
            raise _err(where, f"expert_plan[{i}]", f"expected an action name, got {type(a).__name__}")
    for key in ("layout_id", "room"):
        _get(ep["scene"], key, str, where, f"scene.{key}")
    allowed = {
        "episode_id",
        "split",
        "source",
        "subset",
        "instruction",
        "task_type",
        "goal",
        "scene",
        "expert_plan",
        "meta",
    }
    extra = sorted(set(ep) - allowed)
    if extra:
        raise _err(where, extra[0], "unknown episode field")
    return spec


def check_expert_plan(rec: dict, where: str) -> dict:
    """An episode record (:func:`~embodied_rft.schema.check_episode_record`) whose every expert action exists
    in the scene's action space (EB's 162 + the scene's extras); returns it unchanged. An unknown action would
    otherwise surface as a failed decomposition, or as an expert that silently scores below 100%."""
    from embodied_rft.world.actions import ActionSpace

    check_episode_record(rec, where)
    space = ActionSpace.for_instances(o["id"] for o in rec["scene"]["objects"])
    for j, a in enumerate(rec["expert_plan"]):
        if space.get_id(a) is None:
            raise DataError(
                f"{where}: field 'expert_plan[{j}]': unknown action {a!r} (not among the scene's {len(space)} EB "
                "actions); regenerate the episodes (`dvc repro -f prepare`) or fix the converter that wrote it"
            )
    return rec


def read_episodes(path: str | Path) -> list[dict]:
    """Every episode record of a JSONL file, checked (:func:`check_expert_plan`)."""
    return read_jsonl(path, check_expert_plan)


__all__ = [
    "GOAL_KEYS",
    "Goal",
    "ObjectSpec",
    "STATE_KEYS",
    "SceneSpec",
    "check_episode",
    "check_expert_plan",
    "parse_episode",
    "parse_goal",
    "parse_scene",
    "read_episodes",
]
