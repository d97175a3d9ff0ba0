"""Simulator.from_episode validates its input; every error names the field."""

from __future__ import annotations

import copy

import pytest

from embodied_rft.data.jsonl import DataError
from embodied_rft.world import Simulator, check_episode
from tests.helpers.world_scenes import episode, simple


def _set(path: str, value):
    def edit(ep: dict) -> None:
        keys = path.split(".")
        d = ep
        for k in keys[:-1]:
            d = d[int(k)] if isinstance(d, list) else d[k]
        last = keys[-1]
        if value is KeyError:
            del d[last]
        elif isinstance(d, list):
            d[int(last)] = value
        else:
            d[last] = value

    return edit


OBJ3 = "scene.objects.3"
CASES = [
    (_set(f"{OBJ3}.type", "Foo"), r"^scene\.objects\[3\]\.type: unknown object type 'Foo'$"),
    (
        _set(f"{OBJ3}.type", "SinkBasin"),
        r"scene\.objects\[3\]\.type: unknown object type 'SinkBasin' \(EB calls it "
        r"'Sink'\)",
    ),
    (_set(f"{OBJ3}.type", 5), r"scene\.objects\[3\]\.type: expected str, got int"),
    (
        _set(f"{OBJ3}.id", "Cabinet_1"),
        r"scene\.objects\[3\]\.id: 'Cabinet_1' must be 'Cabinet' or 'Cabinet_N' "
        r"with N >= 2",
    ),
    (_set(f"{OBJ3}.id", "Drawer_9"), r"scene\.objects\[3\]\.id: 'Drawer_9' must be 'Cabinet'"),
    (_set(f"{OBJ3}.id", "Cabinet"), r"scene\.objects\[3\]\.id: duplicate id 'Cabinet' \(also scene\.objects\[2\]\)"),
    (_set(f"{OBJ3}.id", KeyError), r"scene\.objects\[3\]\.id: missing field"),
    (_set(f"{OBJ3}.parent", "Nowhere"), r"scene\.objects\[3\]\.parent: unknown object id 'Nowhere'"),
    (_set(f"{OBJ3}.parent", "Apple"), r"scene\.objects\[3\]\.parent: 'Apple' is not a receptacle"),
    (_set(f"{OBJ3}.parent", "Cabinet"), None),  # a cabinet in a cabinet is odd but allowed as a start state
    (_set(f"{OBJ3}.state.open", "yes"), r"scene\.objects\[3\]\.state\.open: expected true/false, got 'yes'"),
    (_set(f"{OBJ3}.state.colour", True), r"scene\.objects\[3\]\.state\.colour: unknown state key"),
    (_set(f"{OBJ3}.parent", "Cabinet_2"), r"scene\.objects\[3\]\.parent: parent chain of .Cabinet_2. loops"),
    (_set("scene.objects.0.state.open", True), r"scene\.objects\[0\]\.state\.open: CounterTop cannot be open"),
    (_set("scene.objects.13.state.on", True), r"scene\.objects\[13\]\.state\.on: Apple cannot be turned on"),
    (_set("scene.objects.13", "Apple"), r"scene\.objects\[13\]: expected an object, got str"),
    (_set("scene.objects", {}), r"scene\.objects: expected list, got dict"),
    (_set("scene", KeyError), r"^scene: missing field"),
    (_set("task_type", "make_tea"), r"task_type: 'make_tea' is not one of"),
    (_set("goal.object_target", "Cabinet"), r"goal\.object_target: 'Cabinet' is not a pickable whole object type"),
    (_set("goal.object_target", "AppleSliced"), r"goal\.object_target: 'AppleSliced' is not a pickable whole"),
    (_set("goal.object_target", "Applee"), r"goal\.object_target: unknown object type 'Applee'"),
    (
        _set("goal.parent_target", "SinkBasin"),
        r"goal\.parent_target: unknown object type 'SinkBasin' \(EB calls it "
        r"'Sink'\)",
    ),
    (_set("goal.parent_target", "Apple"), r"goal\.parent_target: 'Apple' is not a receptacle"),
    (_set("goal.parent_target", None), r"goal\.parent_target: required for pick_and_place_simple"),
    (_set("goal.object_sliced", "no"), r"goal\.object_sliced: expected bool, got str"),
    (_set("goal.object_sliced", KeyError), r"goal\.object_sliced: missing field"),
    (_set("goal.colour", "red"), r"goal\.colour: unknown goal key"),
]


@pytest.mark.parametrize("edit,pattern", CASES, ids=[str(i) for i in range(len(CASES))])
def test_bad_input_names_the_field(edit, pattern):
    ep = simple()
    assert ep["scene"]["objects"][3]["id"] == "Cabinet_2" and ep["scene"]["objects"][13]["id"] == "Apple"
    edit(ep)
    if pattern is None:
        Simulator.from_episode(ep)
        return
    with pytest.raises(DataError, match=pattern):
        Simulator.from_episode(ep)


def test_where_prefixes_the_message():
    ep = simple()
    ep["scene"]["objects"][3]["type"] = "Foo"
    with pytest.raises(DataError, match=r"^data/episodes/train\.jsonl:12: scene\.objects\[3\]\.type: unknown"):
        Simulator.from_episode(ep, "data/episodes/train.jsonl:12")


def test_goal_fields_per_task_type():
    with pytest.raises(DataError, match="goal.toggle_target: required for look_at_obj_in_light"):
        Simulator.from_episode(episode("look_at_obj_in_light", "Book", room="bedroom"))
    with pytest.raises(DataError, match="goal.toggle_target: 'Faucet' is not a lamp"):
        Simulator.from_episode(episode("look_at_obj_in_light", "Book", toggle="Faucet", room="bedroom"))
    with pytest.raises(DataError, match="goal.mrecep_target: required"):
        Simulator.from_episode(episode("pick_and_place_with_movable_recep", "Spoon", "DiningTable"))
    with pytest.raises(DataError, match="goal.mrecep_target: 'Cabinet' is not a movable receptacle"):
        Simulator.from_episode(episode("pick_and_place_with_movable_recep", "Spoon", "DiningTable", mrecep="Cabinet"))
    with pytest.raises(DataError, match="goal.object_sliced: 'Egg' cannot be sliced"):
        Simulator.from_episode(episode("pick_and_place_simple", "Egg", "DiningTable", sliced=True))


def test_a_parent_loop_is_rejected():
    ep = simple()
    objs = ep["scene"]["objects"]
    objs.append({"id": "Box", "type": "Box", "parent": "Box_2", "state": {}})
    objs.append({"id": "Box_2", "type": "Box", "parent": "Box", "state": {}})
    with pytest.raises(DataError, match=r"scene\.objects\[24\]\.parent: parent chain of 'Box' loops"):
        Simulator.from_episode(ep)


def test_check_episode_checks_the_whole_schema():
    ep = simple()
    check_episode(ep)
    for field, value, pattern in [
        ("subset", "easy", "subset: 'easy' is not one of"),
        ("source", "web", "source: 'web' is not 'generated' or 'alfred'"),
        ("expert_plan", ["find a Apple", 3], r"expert_plan\[1\]: expected an action name"),
        ("extra", 1, "extra: unknown episode field"),
        ("episode_id", None, "episode_id: expected str, got NoneType"),
    ]:
        bad = copy.deepcopy(ep)
        bad[field] = value
        with pytest.raises(DataError, match=pattern):
            check_episode(bad)
    bad = copy.deepcopy(ep)
    del bad["scene"]["layout_id"]
    with pytest.raises(DataError, match="scene.layout_id: missing field"):
        check_episode(bad)
