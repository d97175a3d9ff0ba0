"""The object-type table against the 162 EB actions and ALFRED's facts (and ALFRED's real placements)."""

from __future__ import annotations

import json

import pytest

from embodied_rft.world import (
    ALFRED_TO_EB,
    MOVABLE_RECEPTACLES,
    RECEPTACLE_OBJECTS,
    SLICED_TYPE,
    TYPES,
    can_contain,
    global_actions,
    verb_targets,
)
from embodied_rft.world.lexicon import LEX


def test_every_action_target_has_its_capability():
    assert len(global_actions()) == 162
    assert set(verb_targets("find a")) <= set(TYPES) and len(verb_targets("find a")) == 80
    assert all(TYPES[t].pickable for t in verb_targets("pick up the"))
    assert all(TYPES[t].openable for t in verb_targets("open the"))
    assert all(TYPES[t].toggleable for t in verb_targets("turn on the"))
    assert all(TYPES[t].sliceable for t in verb_targets("slice the"))
    assert sorted(t for t, x in TYPES.items() if x.openable) == sorted(
        ["Safe", "Laptop", "Fridge", "Box", "Microwave", "Cabinet", "Drawer"]
    )
    assert sorted(t for t, x in TYPES.items() if x.toggleable) == ["DeskLamp", "Faucet", "FloorLamp", "Microwave"]
    assert set(SLICED_TYPE) == {"Apple", "Bread", "Lettuce", "Potato", "Tomato"}
    assert len(TYPES) == 85 and set(LEX) == set(TYPES)


def test_alfred_facts_in_eb_names():
    assert MOVABLE_RECEPTACLES == {"Bowl", "Box", "Cup", "Mug", "Plate", "Pan", "Pot"}
    assert all(TYPES[m].pickable and TYPES[m].receptacle for m in MOVABLE_RECEPTACLES)
    assert ALFRED_TO_EB == {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}
    assert can_contain("Sink", "Mug") and can_contain("Bathtub", "SoapBar") and not can_contain("Bathtub", "Mug")
    assert can_contain("CoffeeMachine", "Mug") and not can_contain("CoffeeMachine", "Cup")
    assert can_contain("Microwave", "AppleSliced") and not can_contain("Microwave", "Lettuce")
    assert can_contain("Toaster", "BreadSliced") is False  # not an EB type
    assert can_contain("StoveBurner", "Pan") and not can_contain("StoveBurner", "Apple")
    assert RECEPTACLE_OBJECTS["DiningTable"] == RECEPTACLE_OBJECTS["SideTable"] == RECEPTACLE_OBJECTS["CounterTop"]
    # the one departure: ALFRED's planner disposes of the slicing tool anywhere
    assert can_contain("Fridge", "Knife") and can_contain("Microwave", "ButterKnife")
    assert not can_contain("Apple", "Knife")
    assert TYPES["Apple"].heatable and TYPES["Lettuce"].coolable and not TYPES["Lettuce"].heatable
    assert TYPES["Cloth"].cleanable and not TYPES["Book"].cleanable


@pytest.mark.shared
def test_every_alfred_placement_is_admitted(shared):
    """Every PutObject of ALFRED's expert plans (shared/alfred) is legal here, with EB's type names."""
    root = shared / "alfred" / "json_2.1.0"
    files = sorted(root.glob("*/*/*/traj_data.json"))
    if not files:
        pytest.skip("no ALFRED trajectories in shared/")
    pairs, n = set(), 0
    for f in files:
        plan = json.loads(f.read_text())["plan"]["high_pddl"]
        for step in plan:
            pa = step["planner_action"]
            if pa["action"] == "PutObject":
                oid, rid = pa["objectId"].split("|"), pa["receptacleObjectId"].split("|")
                obj = oid[4].split("_")[0] if len(oid) > 4 else oid[0]  # Apple|..|AppleSliced_2 -> AppleSliced
                pairs.add((obj, rid[0]))  # Sink|..|SinkBasin -> Sink: EB's name for the basin
                n += 1
    assert n > 9000 and len(pairs) > 400
    bad = sorted(p for p in pairs if not can_contain(p[1], p[0]))
    assert bad == []
