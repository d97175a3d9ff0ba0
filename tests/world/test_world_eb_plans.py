"""EB-ALFRED's own gold NL steps (shared/embodiedbench examples) replayed in matching symbolic scenes."""

from __future__ import annotations

import json

import pytest

from embodied_rft.world import TYPES, Simulator
from tests.helpers.world_scenes import episode, obj

_LOWER = {t.lower(): t for t in TYPES} | {"sinkbasin": "Sink", "bathtubbasin": "Bathtub"}


def to_eb_action(step: str) -> str:
    """EB's NL steps ('pick up a ladle', 'find an apple', 'put down the ladle') -> EB action names."""
    words = step.split()
    if words[:2] == ["put", "down"]:
        return "put down the object in hand"
    target = _LOWER[words[-1].lower()]
    verb = " ".join(words[:-2]) if words[-2] in ("a", "an", "the") else " ".join(words[:-1])
    return {
        "find": f"find a {target}",
        "pick up": f"pick up the {target}",
        "open": f"open the {target}",
        "close": f"close the {target}",
        "turn on": f"turn on the {target}",
        "turn off": f"turn off the {target}",
        "slice": f"slice the {target}",
    }[verb]


def _examples(shared) -> dict:
    path = shared / "embodiedbench" / "eb_alfred_examples.json"
    if not path.exists():
        pytest.skip("no EB examples in shared/")
    return json.loads(path.read_text())


def _find(examples: dict, subset: str, name_part: str) -> dict:
    return next(e for e in examples[subset] if name_part in e["full_scene_name"])


KITCHEN = [
    obj("CounterTop", "CounterTop"),
    obj("DiningTable", "DiningTable"),
    obj("Sink", "Sink"),
    obj("Faucet", "Faucet", "Sink"),
    obj("Microwave", "Microwave", open=False),
    obj("GarbageCan", "GarbageCan"),
    obj("Cabinet", "Cabinet", open=False),
    obj("Drawer", "Drawer", open=True),
]


@pytest.mark.shared
def test_eb_gold_steps_succeed_where_eb_semantics_allow(shared):
    ex = _examples(shared)
    # long horizon: heat a slice of apple, put it in the garbage can (knife put down right after the slice)
    e = _find(ex, "long_horizon", "AppleSliced-None-GarbageCan-11")
    objs = KITCHEN + [obj("Knife", "Knife", "Drawer"), obj("Apple", "Apple", "CounterTop")]
    ep = episode("pick_heat_then_place_in_recep", "Apple", "GarbageCan", sliced=True, objects=objs)
    sim = Simulator.from_episode(ep)
    for s in e["NL Steps"]:
        assert sim.step(to_eb_action(s)).success, s
    assert sim.is_success()
    # movable receptacle: a spoon on a plate, the plate to the table
    e = _find(ex, "base", "Spoon-Plate-DiningTable-15")
    objs = KITCHEN + [obj("Spoon", "Spoon", "Drawer"), obj("Plate", "Plate", "CounterTop")]
    sim = Simulator.from_episode(
        episode("pick_and_place_with_movable_recep", "Spoon", "DiningTable", mrecep="Plate", objects=objs)
    )
    for s in e["NL Steps"]:
        assert sim.step(to_eb_action(s)).success, s
    assert sim.is_success()
    # pick two with the same plain names twice: the second find reaches the other roll
    e = _find(ex, "base", "ToiletPaper-None-Toilet-408")
    bath = [
        obj("Toilet", "Toilet"),
        obj("CounterTop", "CounterTop"),
        obj("Cabinet", "Cabinet", open=False),
        obj("ToiletPaper", "ToiletPaper", "CounterTop"),
        obj("ToiletPaper_2", "ToiletPaper", "Cabinet"),
    ]
    sim = Simulator.from_episode(
        episode("pick_two_obj_and_place", "ToiletPaper", "Toilet", objects=bath, room="bathroom")
    )
    steps = [to_eb_action(s) for s in e["NL Steps"]]
    # the second roll is in a closed cabinet: EB's steps do not open it, a plan here must
    steps.insert(5, "open the Cabinet")
    for s in steps:
        assert sim.step(s).success, s
    assert sim.is_success()


@pytest.mark.shared
def test_eb_clean_steps_without_the_faucet_do_not_clean(shared):
    """EB's gold clean steps skip the Faucet; EB's own update_states would not mark the ladle clean."""
    e = _find(_examples(shared), "base", "Ladle-None-DiningTable-4")
    ep = episode(
        "pick_clean_then_place_in_recep",
        "Ladle",
        "DiningTable",
        objects=KITCHEN + [obj("Ladle", "Ladle", "CounterTop")],
    )
    steps = [to_eb_action(s) for s in e["NL Steps"]]
    sim = Simulator.from_episode(ep)
    for s in steps:
        assert sim.step(s).success, s
    assert sim.goal_conditions() == (1, 3) and not sim.is_success()
    fixed = steps[:4] + ["turn on the Faucet", "turn off the Faucet"] + steps[4:]
    sim = Simulator.from_episode(ep)
    for s in fixed:
        assert sim.step(s).success, s
    assert sim.is_success()
