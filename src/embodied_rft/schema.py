"""The project's record formats in one place: task types, subsets and splits; the episode record
(``data/episodes/<split>.jsonl``); the decomposed sample (``data/decomposed/{train,val}.jsonl``) and its label.

Every producer (the task generator, the ALFRED reader, decompose) writes these shapes and every consumer
(decompose, distill, GRPO, evaluate) reads them through the checks here, so a malformed line fails with the
file, line and field instead of a KeyError deep inside a stage. The formats are described field by field in
``docs/data.md``.

A sample's ``label`` is the JSON string :func:`format_label` writes: ``{"gold": [[action_id, action_name], ...],
"extra_actions": [...]}`` — the expert's remaining plan and the scene's actions beyond EB's global list.
:func:`read_label` reads it back strictly (a data error names the field); the reward reads labels with its own
never-raising parser (:func:`embodied_rft.reward.parse_label`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from embodied_rft.core.jsonl import DataError, iter_jsonl, require

TASK_TYPES = (
    "pick_and_place_simple",
    "pick_two_obj_and_place",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_and_place_with_movable_recep",
)
# EB-ALFRED's six evaluation subsets, in EB's order
SUBSETS = ("base", "common_sense", "complex_instruction", "spatial", "visual_appearance", "long_horizon")
# ALFRED's splits (the generated world writes the same three)
SPLITS = ("train", "valid_seen", "valid_unseen")


# ---------------------------------------------------------------------------------------------- episodes


def check_episode_record(rec: dict, where: str) -> dict:
    """Check an episode record's fields and types; return it unchanged. (That its expert plan exists in the
    scene's action space is the world's check: :func:`embodied_rft.world.episode.read_episodes`.)"""
    require(rec, "episode_id", str, where)
    require(rec, "instruction", str, where)
    tt = require(rec, "task_type", str, where)
    if tt not in TASK_TYPES:
        raise DataError(f"{where}: field 'task_type': unknown task type {tt!r}; expected one of {list(TASK_TYPES)}")
    subset = rec.get("subset", "base")
    if subset not in SUBSETS:
        raise DataError(f"{where}: field 'subset': unknown subset {subset!r}; expected one of {list(SUBSETS)}")
    goal = require(rec, "goal", dict, where)
    require(goal, "object_target", str, f"{where}: goal")
    scene = require(rec, "scene", dict, where)
    objs = require(scene, "objects", list, f"{where}: scene")
    for i, o in enumerate(objs):
        if not isinstance(o, dict):
            raise DataError(f"{where}: field 'scene.objects[{i}]' must be an object, got {type(o).__name__}")
        require(o, "id", str, f"{where}: scene.objects[{i}]")
        require(o, "type", str, f"{where}: scene.objects[{i}]")
    plan = require(rec, "expert_plan", list, where)
    for j, a in enumerate(plan):
        if not isinstance(a, str):
            raise DataError(f"{where}: field 'expert_plan[{j}]' must be an action name string, got {type(a).__name__}")
    if not plan:
        raise DataError(f"{where}: field 'expert_plan' is empty")
    return rec


# ----------------------------------------------------------------------------------------------- samples


_REDO = "re-run `decompose` (dvc repro -f decompose) so the samples and images/ are written together"


def check_prompt(rec: dict, where: str) -> list:
    prompt = require(rec, "prompt", list, where)
    if not prompt or not all(isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in prompt):
        raise DataError(f"{where}: field 'prompt' must be a non-empty list of {{role, content}} messages")
    return prompt


def check_image(rec: dict, where: str, image_root: Path | None) -> None:
    """``image`` is null or a relative path to an existing file under ``image_root`` (when given)."""
    image = rec.get("image")
    if image is None:
        return
    if not isinstance(image, str) or not image:
        raise DataError(f"{where}: field 'image' must be a relative path or null, got {image!r}")
    if image_root is not None and not (image_root / image).is_file():
        raise DataError(f"{where}: field 'image': {image_root / image} not found; {_REDO}")


def parse_sample(rec: dict, where: str, image_root: Path | None = None) -> dict:
    """Check one decomposed sample; return it unchanged."""
    check_prompt(rec, where)
    require(rec, "label", str, where)
    check_image(rec, where, image_root)
    return rec


def read_samples(path: str | Path, image_root: str | Path | None = None, what: str = "decomposed") -> list[dict]:
    """Every sample of ``path``, checked; ``image_root`` defaults to the file's folder. An empty file is an
    error: a stage given no samples has nothing to do, and saying so beats writing empty results."""
    path = Path(path)
    root = Path(image_root) if image_root is not None else path.parent
    out = [parse_sample(rec, f"{path}:{lineno}", root) for lineno, rec in iter_jsonl(path)]
    if not out:
        raise DataError(f"{path}: no {what} samples; check the decompose settings (decompose.*_split, max_*_samples)")
    return out


# ------------------------------------------------------------------------------------------------- label


def format_label(gold: Sequence[tuple[int, str]], extra_actions: Sequence[str] = ()) -> str:
    """The canonical label string of a decomposed sample (compact JSON, see the module docstring)."""
    return json.dumps(
        {"gold": [[int(a), str(n)] for a, n in gold], "extra_actions": list(extra_actions)}, separators=(",", ":")
    )


def read_label(label: str | dict, where: str = "label") -> tuple[list[tuple[int, str]], tuple[str, ...]]:
    """The gold remaining plan ``[(id, name)]`` and the extra actions of a label (string or parsed)."""
    try:
        obj = json.loads(label) if isinstance(label, str) else label
        gold = [(int(a), str(n)) for a, n in obj["gold"]]
        extras = tuple(str(x) for x in obj.get("extra_actions", ()))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise DataError(f"{where}: field 'label' is not a {{\"gold\": [[id, name], ...]}} object ({e})") from None
    return gold, extras


__all__ = [
    "SPLITS",
    "SUBSETS",
    "TASK_TYPES",
    "check_episode_record",
    "check_image",
    "check_prompt",
    "format_label",
    "parse_sample",
    "read_label",
    "read_samples",
]
