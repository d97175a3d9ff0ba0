"""ALFRED trajectory + converted plan -> Episode dicts (the project's shared schema, ``source: "alfred"``).

Input: a :class:`~embodied_rft.alfred.reader.Trajectory`, its :class:`SceneIndex` and
:class:`Conversion`. Output: Episode dicts (docs/data.md §1): goal in EB type names, the
scene's objects with EB instance ids, initial parents and states, the converted expert plan, and
``meta`` with the ALFRED path, the annotation index and the conversion's documented departures.

Annotations: ALFRED has 3-6 human instructions (``turk_annotations.anns[i].task_desc``) per
trajectory. ``annotations`` selects how they become episodes:
- ``all`` (default): one episode per trajectory, instruction = the first annotation, every annotation
  kept in ``meta.annotations``. One episode per trajectory is the scale of the paper's data (6,574
  train trajectories x ~7.4 steps ~ its 43.9k decomposed samples, docs/facts.md §1.3), and nothing is lost.
- ``first``: the same without the other annotations.
- ``per_annotation``: one episode per (trajectory, annotation), ids ending ``:<i>`` (~3x the data).

Initial states: every openable starts closed (ALFRED's PDDL problems start them closed); lamps
follow ``scene.object_toggles`` (all off in ALFRED); with ``dirty_and_empty`` the THOR-dirtyable
types start dirty. A Faucet is mounted on its sink (``parent``: the Sink), which is how the
simulator knows which basin it cleans.
"""

from __future__ import annotations

from typing import Any

from embodied_rft.alfred.convert import Conversion
from embodied_rft.alfred.names import DIRTYABLE, OPENABLE, TOGGLEABLE, eb_type
from embodied_rft.alfred.reader import Trajectory
from embodied_rft.alfred.scene import ConversionError, SceneIndex

ANNOTATION_MODES = ("all", "first", "per_annotation")


def room_of(scene_num: int) -> str:
    """AI2-THOR's floor-plan numbering: 1-30 kitchens, 201-230 living rooms, 301-330 bedrooms,
    401-430 bathrooms."""
    return {0: "kitchen", 2: "living_room", 3: "bedroom", 4: "bathroom"}.get(scene_num // 100, "room")


def goal_of(traj: Trajectory) -> dict[str, Any]:
    """``pddl_params`` in EB type names; ALFRED's empty strings become null."""

    def conv(field: str, value: str) -> str | None:
        if not value:
            return None
        t = eb_type(value)
        if t is None:
            raise ConversionError(f"{traj.path}: field 'pddl_params.{field}': {value!r} has no EB-ALFRED type")
        return t

    obj = conv("object_target", traj.object_target)
    return {
        "object_target": obj,
        "parent_target": conv("parent_target", traj.parent_target),
        "mrecep_target": conv("mrecep_target", traj.mrecep_target),
        "toggle_target": conv("toggle_target", traj.toggle_target),
        "object_sliced": traj.object_sliced,
    }


def scene_objects(traj: Trajectory, scene: SceneIndex) -> list[dict[str, Any]]:
    """Episode ``scene.objects``: ids, types, initial parents and states."""
    toggled = {t: on for t, on in traj.toggles}
    out = []
    for inst in scene.ordered():
        state: dict[str, bool] = {}
        if inst.type in OPENABLE:
            state["open"] = False
        if inst.type in TOGGLEABLE:
            state["on"] = bool(toggled.get(inst.alfred_type, False))
        if traj.dirty_and_empty and inst.type in DIRTYABLE:
            state["dirty"] = True
        parent = inst.parent
        out.append({"id": inst.name, "type": inst.type, "parent": parent.name if parent else None, "state": state})
    return out


def build_episodes(
    traj: Trajectory,
    scene: SceneIndex,
    conv: Conversion,
    annotations: str = "all",
    split: str | None = None,
) -> list[dict[str, Any]]:
    """The Episode dicts of one ALFRED trajectory (one, or one per annotation)."""
    if annotations not in ANNOTATION_MODES:
        raise ValueError(f"annotations must be one of {ANNOTATION_MODES}, got {annotations!r}")
    split = split or traj.split
    base = base_episode(traj, scene, conv, split)
    if annotations == "per_annotation":
        eps = []
        for i, text in enumerate(traj.annotations):
            meta = dict(base["meta"], annotation=i)
            eps.append(dict(base, episode_id=f"{base['episode_id']}:{i}", instruction=text, meta=meta))
        return eps
    ep = dict(base, instruction=traj.annotations[0], meta=dict(base["meta"], annotation=0))
    if annotations == "all":
        ep["meta"]["annotations"] = list(traj.annotations)
    return [ep]


def base_episode(
    traj: Trajectory, scene: SceneIndex, conv: Conversion, split: str, subset: str = "base"
) -> dict[str, Any]:
    """Everything but the instruction (set by the caller), ``episode_id`` = '<split>:<task_id>'."""
    return {
        "episode_id": f"{split}:{traj.task_id}",
        "split": split,
        "source": "alfred",
        "subset": subset,
        "instruction": "",
        "task_type": traj.task_type,
        "goal": goal_of(traj),
        "scene": {"layout_id": traj.floor_plan, "room": room_of(traj.scene_num), "objects": scene_objects(traj, scene)},
        "expert_plan": list(conv.plan),
        "meta": {
            "alfred_path": f"{traj.split}/{traj.task_dir}" if traj.split else traj.task_dir,
            "task_id": traj.task_id,
            "scene_num": traj.scene_num,
            "conversion_notes": dict(conv.notes),
            "unaddressable_types": dict(sorted(scene.dropped_types.items())),
        },
    }
