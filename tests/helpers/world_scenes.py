"""Hand-built scenes for the world tests (a small kitchen and a small bedroom)."""

from __future__ import annotations

import copy


def obj(oid: str, typ: str, parent: str | None = None, **state: bool) -> dict:
    return {"id": oid, "type": typ, "parent": parent, "state": dict(state)}


KITCHEN = [
    obj("CounterTop", "CounterTop"),
    obj("CounterTop_2", "CounterTop"),
    obj("Cabinet", "Cabinet", open=False),
    obj("Cabinet_2", "Cabinet", open=True),
    obj("Drawer", "Drawer", open=False),
    obj("Drawer_2", "Drawer", open=False),
    obj("Fridge", "Fridge", open=False),
    obj("Microwave", "Microwave", open=False, on=False),
    obj("Sink", "Sink"),
    obj("Faucet", "Faucet", "Sink", on=False),
    obj("DiningTable", "DiningTable"),
    obj("CoffeeMachine", "CoffeeMachine"),
    obj("GarbageCan", "GarbageCan"),
    obj("Apple", "Apple", "CounterTop"),
    obj("Apple_2", "Apple", "DiningTable"),
    obj("Egg", "Egg", "Fridge"),
    obj("Knife", "Knife", "Drawer"),
    obj("ButterKnife", "ButterKnife", "CounterTop_2"),
    obj("Mug", "Mug", "Cabinet_2", dirty=True),
    obj("Plate", "Plate", "Cabinet"),
    obj("Spoon", "Spoon", "DiningTable"),
    obj("Spoon_2", "Spoon", "CounterTop_2"),
    obj("Bowl", "Bowl", "CounterTop"),
    obj("Fork", "Fork", "Bowl"),
]

BEDROOM = [
    obj("Bed", "Bed"),
    obj("Desk", "Desk"),
    obj("SideTable", "SideTable"),
    obj("Drawer", "Drawer", open=False),
    obj("DeskLamp", "DeskLamp", "Desk", on=False),
    obj("FloorLamp", "FloorLamp", on=False),
    obj("Book", "Book", "Bed"),
    obj("CellPhone", "CellPhone", "SideTable"),
    obj("Box", "Box", "Bed", open=True),
    obj("Pencil", "Pencil", "Drawer"),
]


def episode(
    task_type: str,
    object_target: str,
    parent_target: str | None = None,
    *,
    mrecep: str | None = None,
    toggle: str | None = None,
    sliced: bool = False,
    objects: list[dict] | None = None,
    room: str = "kitchen",
) -> dict:
    objs = copy.deepcopy(objects if objects is not None else (KITCHEN if room == "kitchen" else BEDROOM))
    return {
        "episode_id": "test-0",
        "split": "train",
        "source": "generated",
        "subset": "base",
        "instruction": "test",
        "task_type": task_type,
        "goal": {
            "object_target": object_target,
            "parent_target": parent_target,
            "mrecep_target": mrecep,
            "toggle_target": toggle,
            "object_sliced": sliced,
        },
        "scene": {"layout_id": f"{room}-test", "room": room, "objects": objs},
        "expert_plan": [],
        "meta": {},
    }


def simple(obj_type: str = "Apple", parent: str = "DiningTable", **kw) -> dict:
    return episode("pick_and_place_simple", obj_type, parent, **kw)
