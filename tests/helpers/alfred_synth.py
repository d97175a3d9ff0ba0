"""Hand-written ALFRED-format trajectories, so reader/convert/prepare tests run without ../shared.

They follow ALFRED's ``traj_data.json`` schema (docs/facts.md §3.1) and its conventions, checked on the real
files: THOR ids format positions as ``%+06.2f`` (``Apple|+01.00|+00.90|+00.50``), slices are
``<id>|AppleSliced_1``, a basin is ``Sink|...|SinkBasin``, and ``coordinateReceptacleObjectId`` holds
4x the position as (x, x, z, z, y, y).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path


def oid(typ: str, x: float, y: float, z: float, suffix: str | None = None) -> str:
    base = f"{typ}|{x:+06.2f}|{y:+06.2f}|{z:+06.2f}"
    return f"{base}|{suffix}" if suffix else base


def coords(typ: str, x: float, y: float, z: float) -> list:
    return [typ, [4 * x, 4 * x, 4 * z, 4 * z, 4 * y, 4 * y]]


def pose(name: str, x: float, y: float, z: float) -> dict:
    return {"objectName": name, "position": {"x": x, "y": y, "z": z}, "rotation": {"x": 0.0, "y": 90.0, "z": 0.0}}


def step(i: int, action: str, args: list[str], **planner) -> dict:
    return {
        "discrete_action": {"action": action, "args": args},
        "high_idx": i,
        "planner_action": {"action": action, **planner},
    }


def goto(i: int, where: str) -> dict:
    return step(i, "GotoLocation", [where], location=f"loc|{i}|1|0|45")


COUNTER = (1.10, 0.90, 0.50)
MICROWAVE = (-1.00, 0.90, -1.70)
FRIDGE = (-2.00, 0.00, 1.50)
CABINET = (0.50, 0.40, -1.60)
SINK = (-0.70, 0.90, 1.30)
SINKBASIN = (-0.70, 0.80, 1.30)
COFFEE = (1.80, 0.90, -0.40)


def heat_sliced_apple() -> dict:
    """pick_heat_then_place_in_recep, sliced Apple into the Fridge: slice, drop the knife, heat, put."""
    apple, knife = (1.00, 0.90, 0.50), (1.20, 0.90, 0.40)
    apple_id, knife_id = oid("Apple", *apple), oid("Knife", *knife)
    counter_id, mw_id, fridge_id = oid("CounterTop", *COUNTER), oid("Microwave", *MICROWAVE), oid("Fridge", *FRIDGE)
    piece = oid("Apple", *apple, suffix="AppleSliced_1")
    return {
        "task_id": "trial_T00000000_000000_000001",
        "task_type": "pick_heat_then_place_in_recep",
        "pddl_params": {
            "object_target": "Apple",
            "parent_target": "Fridge",
            "mrecep_target": "",
            "toggle_target": "",
            "object_sliced": True,
        },
        "scene": {
            "floor_plan": "FloorPlan7",
            "scene_num": 7,
            "random_seed": 1,
            "dirty_and_empty": False,
            "init_action": {"action": "TeleportFull", "x": 0.0, "y": 0.9, "z": 0.0, "rotation": 0, "horizon": 30},
            "object_toggles": [],
            "object_poses": [
                pose("Apple_5e1a", 3.0, 0.9, 3.0),
                pose("Apple_77c2", *apple),
                pose("Knife_0b3d", *knife),
                pose("TeddyBear_9f01", 0.0, 0.0, 0.0),
            ],
        },
        "plan": {
            "high_pddl": [
                goto(0, "countertop"),
                step(
                    1,
                    "PickupObject",
                    ["knife"],
                    objectId=knife_id,
                    coordinateObjectId=coords("Knife", *knife),
                    coordinateReceptacleObjectId=coords("CounterTop", *COUNTER),
                    forceVisible=True,
                ),
                goto(2, "apple"),
                step(
                    3,
                    "SliceObject",
                    ["apple"],
                    objectId=apple_id,
                    coordinateObjectId=coords("Apple", *apple),
                    forceVisible=True,
                ),
                step(
                    4,
                    "PutObject",
                    ["knife", "countertop"],
                    objectId=knife_id,
                    receptacleObjectId=counter_id,
                    coordinateObjectId=coords("Knife", *knife),
                    coordinateReceptacleObjectId=coords("CounterTop", *COUNTER),
                    forceVisible=True,
                ),
                step(
                    5,
                    "PickupObject",
                    ["apple"],
                    objectId=piece,
                    coordinateObjectId=coords("Apple", *apple),
                    coordinateReceptacleObjectId=coords("CounterTop", *COUNTER),
                    forceVisible=True,
                ),
                goto(6, "microwave"),
                step(
                    7,
                    "HeatObject",
                    ["apple"],
                    objectId=mw_id,
                    coordinateReceptacleObjectId=coords("Microwave", *MICROWAVE),
                    forceVisible=True,
                ),
                goto(8, "fridge"),
                step(
                    9,
                    "PutObject",
                    ["apple", "fridge"],
                    objectId=piece,
                    receptacleObjectId=fridge_id,
                    coordinateObjectId=coords("Apple", *apple),
                    coordinateReceptacleObjectId=coords("Fridge", *FRIDGE),
                    forceVisible=True,
                ),
                step(10, "NoOp", [], value=1),
            ],
            "low_actions_count": 80,
        },
        "images": [{"high_idx": 0, "low_idx": 0, "image_name": "000000000.png"}],
        "turk_annotations": {
            "anns": [
                {"task_desc": "Put a warm apple slice in the fridge. ", "high_descs": ["go"] * 10, "votes": [1, 1]},
                {"task_desc": "Heat a slice of apple and chill it.", "high_descs": ["go"] * 10, "votes": [1, 1]},
            ]
        },
    }


HEAT_PLAN = [
    "find a Knife",
    "pick up the Knife",
    "find a Apple_2",
    "slice the Apple",
    "put down the object in hand",
    "pick up the Apple",
    "find a Microwave",
    "open the Microwave",
    "put down the object in hand",
    "close the Microwave",
    "turn on the Microwave",
    "turn off the Microwave",
    "open the Microwave",
    "find a Apple_2",
    "pick up the Apple",
    "close the Microwave",
    "find a Fridge",
    "open the Fridge",
    "put down the object in hand",
    "close the Fridge",
]


def clean_mug() -> dict:
    """pick_clean_then_place_in_recep: a dirty Mug from a closed Cabinet, washed, onto the CoffeeMachine."""
    mug = (0.50, 0.45, -1.60)
    mug_id = oid("Mug", *mug)
    sink_id = oid("Sink", *SINK, suffix="SinkBasin")
    coffee_id = oid("CoffeeMachine", *COFFEE)
    return {
        "task_id": "trial_T00000000_000000_000002",
        "task_type": "pick_clean_then_place_in_recep",
        "pddl_params": {
            "object_target": "Mug",
            "parent_target": "CoffeeMachine",
            "mrecep_target": "",
            "toggle_target": "",
            "object_sliced": False,
        },
        "scene": {
            "floor_plan": "FloorPlan12",
            "scene_num": 12,
            "random_seed": 2,
            "dirty_and_empty": True,
            "init_action": {"action": "TeleportFull", "x": 0.0, "y": 0.9, "z": 0.0, "rotation": 0, "horizon": 30},
            "object_toggles": [],
            "object_poses": [pose("Mug_1c2d", *mug), pose("Bowl_aa01", 2.0, 0.9, 2.0)],
        },
        "plan": {
            "high_pddl": [
                goto(0, "cabinet"),
                step(
                    1,
                    "PickupObject",
                    ["mug"],
                    objectId=mug_id,
                    coordinateObjectId=coords("Mug", *mug),
                    coordinateReceptacleObjectId=coords("Cabinet", *CABINET),
                    forceVisible=True,
                ),
                goto(2, "sinkbasin"),
                step(
                    3,
                    "CleanObject",
                    ["mug"],
                    objectId=sink_id,
                    cleanObjectId=mug_id,
                    coordinateObjectId=coords("Mug", *mug),
                    coordinateReceptacleObjectId=coords("SinkBasin", *SINKBASIN),
                    forceVisible=True,
                ),
                goto(4, "coffeemachine"),
                step(
                    5,
                    "PutObject",
                    ["mug", "coffeemachine"],
                    objectId=mug_id,
                    receptacleObjectId=coffee_id,
                    coordinateObjectId=coords("Mug", *mug),
                    coordinateReceptacleObjectId=coords("CoffeeMachine", *COFFEE),
                    forceVisible=True,
                ),
                step(6, "NoOp", [], value=1),
            ],
            "low_actions_count": 40,
        },
        "images": [],
        "turk_annotations": {
            "anns": [{"task_desc": "Wash a mug and put it under the coffee maker.", "high_descs": [], "votes": [1]}]
        },
    }


CLEAN_PLAN = [
    "find a Mug",
    "open the Cabinet",
    "pick up the Mug",
    "close the Cabinet",
    "find a Sink",
    "put down the object in hand",
    "turn on the Faucet",
    "turn off the Faucet",
    "find a Mug",
    "pick up the Mug",
    "find a CoffeeMachine",
    "put down the object in hand",
]


def write_split(root: Path, split: str, trajs: dict[str, dict]) -> dict[str, Path]:
    """Write {'<task>/<trial>': traj} under ``root/split``; returns their paths."""
    out = {}
    for task_dir, traj in trajs.items():
        p = root / split / task_dir / "traj_data.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(traj), "utf-8")
        out[task_dir] = p
    return out


def variant(traj: dict, **changes) -> dict:
    t = copy.deepcopy(traj)
    t.update(changes)
    return t
