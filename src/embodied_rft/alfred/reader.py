"""Read ALFRED ``json_2.1.0/<split>/<task>/<trial>/traj_data.json`` into checked, typed records.

Input: a ``json_2.1.0`` directory, either a full ALFRED download or the trimmed copies in
``shared/alfred`` (docs/facts.md §3.1): only the fields the conversion needs are read (``task_id``,
``task_type``, ``pddl_params``, ``scene``, ``plan.high_pddl``, ``turk_annotations``); everything else
(``plan.low_actions``, ``images``, ``pp/`` folders, ...) is ignored, so both layouts read the same.
Output: :class:`Trajectory` records. A malformed or incomplete file raises :class:`DataError` naming
the file and the dotted field (``plan.high_pddl[3].planner_action.objectId``); the caller decides
whether to stop or to skip and list it (``run_prepare_alfred``'s ``on_error``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rft.data.jsonl import DataError
from embodied_rft.schema import TASK_TYPES

# planner_action fields each high-level verb must carry for the conversion (docs/facts.md §3.2). ALFRED's
# Heat/Cool/Clean ``objectId`` is the appliance (Microwave, Fridge, SinkBasin), ToggleObject's the lamp.
_NEEDS: dict[str, tuple[str, ...]] = {
    "GotoLocation": (),
    "PickupObject": ("objectId",),
    "PutObject": ("objectId", "receptacleObjectId"),
    "SliceObject": ("objectId",),
    "ToggleObject": ("objectId",),
    "HeatObject": ("objectId",),
    "CoolObject": ("objectId",),
    "CleanObject": ("objectId",),
    "NoOp": (),
}


@dataclass(frozen=True)
class HighStep:
    """One ``plan.high_pddl`` entry: the discrete verb and args, and the planner's object ids."""

    index: int
    action: str
    args: tuple[str, ...]
    object_id: str | None  # planner_action.objectId
    receptacle_id: str | None  # planner_action.receptacleObjectId (PutObject)
    # planner_action.coordinateReceptacleObjectId: (type, 6 numbers) naming where the object is found
    # (PickupObject) or the appliance itself (Heat/Cool/Toggle); None when the object lies on the floor.
    receptacle_coords: tuple[str, tuple[float, ...]] | None


@dataclass(frozen=True)
class ObjectPose:
    """One ``scene.object_poses`` entry; ``objectName`` is '<Type>_<hash>', not unique in ALFRED."""

    name: str
    type: str
    position: tuple[float, float, float]


@dataclass(frozen=True)
class Trajectory:
    path: str
    split: str
    task_dir: str  # '<task>/<trial>', EmbodiedBench's ``full_scene_name``
    task_id: str
    task_type: str
    object_target: str
    parent_target: str  # '' when the task has none (ALFRED writes empty strings)
    mrecep_target: str
    toggle_target: str
    object_sliced: bool
    floor_plan: str
    scene_num: int
    poses: tuple[ObjectPose, ...]
    toggles: tuple[tuple[str, bool], ...]  # scene.object_toggles: (objectType, isOn)
    dirty_and_empty: bool
    high_pddl: tuple[HighStep, ...]
    annotations: tuple[str, ...]  # turk_annotations.anns[i].task_desc, stripped


def _field(obj: Any, key: str, typ: type | tuple[type, ...], where: str, path: str) -> Any:
    if not isinstance(obj, Mapping):
        raise DataError(f"{path}: field '{where}' must be an object, got {type(obj).__name__}")
    if key not in obj:
        raise DataError(f"{path}: missing field '{where}.{key}'" if where else f"{path}: missing field '{key}'")
    val = obj[key]
    name = f"{where}.{key}" if where else key
    bad_bool = isinstance(val, bool) and (typ in (int, float) or (isinstance(typ, tuple) and bool not in typ))
    if bad_bool or not isinstance(val, typ):
        tn = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise DataError(f"{path}: field '{name}' must be {tn}, got {type(val).__name__} {repr(val)[:60]}")
    return val


def _coords(val: Any, where: str, path: str) -> tuple[str, tuple[float, ...]]:
    ok = (
        isinstance(val, Sequence)
        and len(val) == 2
        and isinstance(val[0], str)
        and isinstance(val[1], Sequence)
        and len(val[1]) == 6
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in val[1])
    )
    if not ok:
        raise DataError(f"{path}: field '{where}' must be [type, [6 numbers]], got {str(val)[:80]!r}")
    return val[0], tuple(float(v) for v in val[1])


def _step(raw: Any, i: int, path: str) -> HighStep:
    where = f"plan.high_pddl[{i}]"
    da = _field(raw, "discrete_action", dict, where, path)
    action = _field(da, "action", str, f"{where}.discrete_action", path)
    if action not in _NEEDS:
        raise DataError(f"{path}: field '{where}.discrete_action.action': unknown verb {action!r}")
    args = _field(da, "args", list, f"{where}.discrete_action", path)
    if not all(isinstance(a, str) for a in args):
        raise DataError(f"{path}: field '{where}.discrete_action.args' must be a list of strings")
    pa = _field(raw, "planner_action", dict, where, path)
    pw = f"{where}.planner_action"
    for key in _NEEDS[action]:
        _field(pa, key, str, pw, path)
    coords = None
    if action != "GotoLocation" and "coordinateReceptacleObjectId" in pa:
        coords = _coords(pa["coordinateReceptacleObjectId"], f"{pw}.coordinateReceptacleObjectId", path)
    return HighStep(
        index=i,
        action=action,
        args=tuple(args),
        object_id=pa.get("objectId") if "objectId" in _NEEDS[action] else None,
        receptacle_id=pa.get("receptacleObjectId") if action == "PutObject" else None,
        receptacle_coords=coords,
    )


def parse_trajectory(data: Any, path: str, split: str = "", task_dir: str = "") -> Trajectory:
    """Check and convert one loaded ``traj_data.json`` object (``path`` only names it in errors)."""
    if not isinstance(data, Mapping):
        raise DataError(f"{path}: expected a JSON object at the top level, got {type(data).__name__}")
    task_id = _field(data, "task_id", str, "", path)
    task_type = _field(data, "task_type", str, "", path)
    if task_type not in TASK_TYPES:
        raise DataError(
            f"{path}: field 'task_type': unknown task type {task_type!r} (expected one of {list(TASK_TYPES)})"
        )
    pp = _field(data, "pddl_params", dict, "", path)
    targets = {
        k: _field(pp, k, str, "pddl_params", path)
        for k in ("object_target", "parent_target", "mrecep_target", "toggle_target")
    }
    if not targets["object_target"]:
        raise DataError(f"{path}: field 'pddl_params.object_target' is empty")
    sliced = _field(pp, "object_sliced", bool, "pddl_params", path)

    scene = _field(data, "scene", dict, "", path)
    floor_plan = _field(scene, "floor_plan", str, "scene", path)
    scene_num = _field(scene, "scene_num", int, "scene", path)
    poses_raw = _field(scene, "object_poses", list, "scene", path)
    poses = []
    for j, p in enumerate(poses_raw):
        w = f"scene.object_poses[{j}]"
        name = _field(p, "objectName", str, w, path)
        pos = _field(p, "position", dict, w, path)
        xyz = tuple(float(_field(pos, k, (int, float), f"{w}.position", path)) for k in ("x", "y", "z"))
        poses.append(ObjectPose(name=name, type=name.split("_")[0], position=xyz))  # type: ignore[arg-type]
    toggles = []
    for j, t in enumerate(_field(scene, "object_toggles", list, "scene", path)):
        w = f"scene.object_toggles[{j}]"
        toggles.append((_field(t, "objectType", str, w, path), _field(t, "isOn", bool, w, path)))
    dirty = _field(scene, "dirty_and_empty", bool, "scene", path)

    plan = _field(data, "plan", dict, "", path)
    hp = _field(plan, "high_pddl", list, "plan", path)
    if not hp:
        raise DataError(f"{path}: field 'plan.high_pddl' is empty")
    steps = tuple(_step(raw, i, path) for i, raw in enumerate(hp))

    anns = _field(_field(data, "turk_annotations", dict, "", path), "anns", list, "turk_annotations", path)
    if not anns:
        raise DataError(f"{path}: field 'turk_annotations.anns' is empty")
    descs = tuple(_field(a, "task_desc", str, f"turk_annotations.anns[{j}]", path).strip() for j, a in enumerate(anns))

    return Trajectory(
        path=path,
        split=split,
        task_dir=task_dir,
        task_id=task_id,
        task_type=task_type,
        object_target=targets["object_target"],
        parent_target=targets["parent_target"],
        mrecep_target=targets["mrecep_target"],
        toggle_target=targets["toggle_target"],
        object_sliced=sliced,
        floor_plan=floor_plan,
        scene_num=scene_num,
        poses=tuple(poses),
        toggles=tuple(toggles),
        dirty_and_empty=dirty,
        high_pddl=steps,
        annotations=descs,
    )


def read_trajectory(path: str | os.PathLike, split: str = "", task_dir: str = "") -> Trajectory:
    """Load and check one ``traj_data.json``; DataError names the file and the field."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{p}: file not found") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DataError(f"{p}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{p}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not task_dir:
        task_dir = f"{p.parent.parent.name}/{p.parent.name}"
    return parse_trajectory(data, str(p), split=split, task_dir=task_dir)


def trajectory_paths(alfred_dir: str | os.PathLike, split: str) -> list[tuple[str, Path]]:
    """Sorted [(task_dir, path to traj_data.json)] for ``<alfred_dir>/<split>/<task>/<trial>/``.

    Every trial folder is listed, also one whose ``traj_data.json`` is missing (an incomplete
    download), so that reading it fails loudly instead of the trial vanishing from the counts.
    """
    root = Path(alfred_dir) / split
    out = []
    for task in sorted(root.iterdir()) if root.is_dir() else []:
        if not task.is_dir():
            continue
        for trial in sorted(task.iterdir()):
            if trial.is_dir():
                out.append((f"{task.name}/{trial.name}", trial / "traj_data.json"))
    return out


def spread(items: Sequence[Any], limit: int | None) -> list[Any]:
    """At most ``limit`` items, evenly spaced over the (sorted) list, so that a capped run still
    sees every task type instead of only the alphabetically first ones."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit <= 0:
        return []
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


def iter_trajectories(alfred_dir: str | os.PathLike, split: str, limit: int | None = None) -> Iterator[Trajectory]:
    """Read a split in sorted order (raises on the first bad file; see ``run_prepare_alfred`` for skipping)."""
    for task_dir, path in spread(trajectory_paths(alfred_dir, split), limit):
        yield read_trajectory(path, split=split, task_dir=task_dir)
