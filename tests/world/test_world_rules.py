"""Simulator rules: every invalid action is rejected with its reason; valid ones change the state as EB does."""

from __future__ import annotations

import pytest

from embodied_rft.world import ActionSpace, Simulator
from embodied_rft.world.simulator import HAND, N_PIECES, OK
from tests.helpers.world_scenes import episode, obj, simple

# (name, setup actions (all must succeed, except those marked "?"), action, expected feedback fragment)
INVALID = [
    ("pick up without find", [], "pick up the Apple", "it is not within reach. Find the object before picking up it"),
    (
        "pick up with a full hand",
        ["find a Apple", "pick up the Apple", "find a Spoon"],
        "pick up the Spoon",
        "Robot is currently holding Apple",
    ),
    (
        "pick up from a closed container",
        ["find a Egg"],
        "pick up the Egg",
        "Egg is not visible because it is in Fridge. Open the Fridge before picking it up.",
    ),
    ("pick up a non-pickable", ["find a Cabinet"], "pick up the Cabinet", "The Cabinet cannot be picked up."),
    ("pick up an absent type", [], "pick up the Pillow", "Cannot find Pillow to pick up"),
    (
        "put down with an empty hand",
        ["find a DiningTable"],
        "put down the object in hand",
        "Robot is not holding any object",
    ),
    (
        "put into an incompatible receptacle",
        ["find a Apple", "pick up the Apple", "find a CoffeeMachine"],
        "put down the object in hand",
        "Putting the object on CoffeeMachine failed. A Apple cannot be put in the CoffeeMachine",
    ),
    (
        "put into a closed receptacle",
        ["find a Apple", "pick up the Apple", "find a Fridge"],
        "put down the object in hand",
        "Putting the object on Fridge failed. The Fridge is closed; open it first",
    ),
    (
        "put onto a non-receptacle",
        ["find a Apple", "pick up the Apple", "find a Spoon"],
        "put down the object in hand",
        "The Spoon is not a receptacle",
    ),
    (
        "put into the receptacle of a failed find",
        ["find a Apple", "pick up the Apple", "?find a Bed"],
        "put down the object in hand",
        "Putting the object on Bed failed. The receptacle does not exist",
    ),
    ("drop with an empty hand", [], "drop the object in hand", "Robot is not holding any object"),
    ("slice without a knife", ["find a Apple"], "slice the Apple", "must hold a Knife or ButterKnife to slice"),
    (
        "slice what is out of reach",
        ["find a ButterKnife", "pick up the ButterKnife", "find a Sink"],
        "slice the Apple",
        "The Apple is not within reach",
    ),
    (
        "slice twice",
        [
            "find a ButterKnife",
            "pick up the ButterKnife",
            "find a Apple",
            "slice the Apple",
            "find a Apple_2",
            "slice the Apple_2",
        ],
        "slice the Apple",
        "The Apple is already sliced",
    ),
    (
        "slice a non-sliceable",
        ["find a ButterKnife", "pick up the ButterKnife", "find a Egg"],
        "slice the Egg",
        "The Egg cannot be sliced",
    ),
    (
        "find an absent object",
        [],
        "find a Bed",
        "Cannot find Bed. This object may not exist in this scene. Try to explore other instances instead.",
    ),
    ("find an absent instance", [], "find a Cabinet_7", "Cannot find Cabinet_7."),
    ("find an unknown type", [], "find a Unicorn", "Cannot find Unicorn."),
    ("open a non-openable", ["find a Apple"], "open the Apple", "Open action failed. The Apple cannot be opened"),
    ("open out of reach", [], "open the Fridge", "Open action failed. The Fridge is not within reach"),
    ("open an open receptacle", ["find a Cabinet_2"], "open the Cabinet_2", "The Cabinet_2 is already open"),
    ("close a closed receptacle", ["find a Fridge"], "close the Fridge", "The Fridge is already closed"),
    ("turn on a non-toggleable", ["find a Apple"], "turn on the Apple", "The Apple cannot be turned on"),
    ("turn on out of reach", ["find a Fridge"], "turn on the Faucet", "The Faucet is not within reach"),
    (
        "turn on an open microwave",
        ["find a Microwave", "open the Microwave"],
        "turn on the Microwave",
        "Close the Microwave before turning it on",
    ),
    ("turn on twice", ["find a Sink", "turn on the Faucet"], "turn on the Faucet", "The Faucet is already on"),
    ("turn off what is off", ["find a Sink"], "turn off the Faucet", "The Faucet is already off"),
    ("unknown action name", [], "jump on the bed", "Unknown action 'jump on the bed'."),
    ("unknown action id", [], 999, "Unknown action id 999"),
    ("negative action id", [], -1, "Unknown action id -1"),
    ("bool is not an id", [], True, "is neither an action id nor an action name"),
]


@pytest.mark.parametrize("case", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_action_is_rejected_with_its_reason(case):
    _, setup, action, fragment = case
    sim = Simulator.from_episode(simple())
    for a in setup:
        r = sim.step(a.lstrip("?"))
        assert r.success or a.startswith("?"), (a, r.feedback)
    before = (sim.observe_text(), sim.held, sim.loc, sim.invalid_steps)
    r = sim.step(action)
    assert not r.success
    assert r.feedback.startswith("Last action is invalid. ")
    assert fragment in r.feedback, r.feedback
    assert sim.invalid_steps == before[3] + 1
    # a rejected action changes nothing the agent can see (only EB's receptacle memory)
    assert (sim.observe_text(), sim.held, sim.loc) == before[:3]


def test_valid_actions_give_eb_success_feedback_and_ids_equal_names():
    ep = simple()
    a, b = Simulator.from_episode(ep), Simulator.from_episode(ep)
    for name in ["find a Apple", "pick up the Apple", "find a DiningTable", "put down the object in hand"]:
        ra, rb = a.step(name), b.step(a.actions.id(name))
        assert ra == rb == (True, OK) and OK == "Last action executed successfully."
    assert a.is_success() and b.is_success()
    assert a.steps == 4 and a.invalid_steps == 0


def test_action_space_has_scene_extras():
    sim = Simulator.from_episode(simple())
    assert isinstance(sim.actions, ActionSpace) and len(sim.actions) > 162
    assert sim.actions.name(63) == "find a DeskLamp"
    for name in ["find a Cabinet_2", "open the Drawer_2", "pick up the Apple_2", "pick up the Spoon_2"]:
        assert name in sim.actions.index
    assert "find a Apple_3" not in sim.actions.index


def test_put_down_uses_the_last_find_and_eb_forgets_it_after_other_actions():
    sim = Simulator.from_episode(simple())
    for a in ["find a Apple", "pick up the Apple", "find a Fridge", "open the Fridge", "put down the object in hand"]:
        assert sim.step(a).success, a  # open keeps the receptacle of the find
    assert sim.objs["Apple"].parent == "Fridge"
    for a in ["pick up the Apple", "close the Fridge"]:
        assert sim.step(a).success
    # close reset EB's cur_receptacle: put down now drops the Apple where the agent stands
    assert sim.step("put down the object in hand").success
    apple = sim.objs["Apple"]
    assert apple.parent is None and sim.anchor(apple) == "Fridge" and sim.held is None
    assert "You are at the Fridge" in sim.observe_text() and "Apple" in sim.observe_text()
    assert sim.step("pick up the Apple").success  # a dropped object can be picked up again


def test_drop_puts_the_object_on_the_floor_here():
    sim = Simulator.from_episode(simple())
    for a in ["find a Spoon_2", "pick up the Spoon", "find a Sink", "drop the object in hand"]:
        assert sim.step(a).success, a
    s = sim.objs["Spoon_2"]
    assert s.parent is None and sim.anchor(s) == "Sink"


def test_three_failed_puts_into_one_receptacle_drop_the_object():
    sim = Simulator.from_episode(simple())
    for a in ["find a Apple", "pick up the Apple"]:
        assert sim.step(a).success
    for k in range(3):
        assert sim.step("find a CoffeeMachine").success
        r = sim.step("put down the object in hand")
        assert not r.success
        assert r.feedback.endswith("The robot dropped the object instead.") == (k == 2)
    assert sim.held is None and sim.objs["Apple"].parent is None


def test_picking_a_movable_receptacle_carries_its_contents():
    sim = Simulator.from_episode(simple())
    for a in ["find a Bowl", "pick up the Bowl", "find a DiningTable", "put down the object in hand"]:
        assert sim.step(a).success, a
    assert sim.objs["Bowl"].parent == "DiningTable" and sim.objs["Fork"].parent == "Bowl"
    assert sim.anchor(sim.objs["Fork"]) == "DiningTable"


def test_cannot_put_an_object_into_itself_or_what_it_holds():
    sim = Simulator.from_episode(simple())
    for a in ["find a Bowl", "pick up the Bowl", "find a Bowl"]:
        assert sim.step(a).success, a
    r = sim.step("put down the object in hand")
    assert not r.success and "in the robot's hand" in r.feedback


def test_clean_needs_the_faucet_turned_on_while_the_object_is_in_the_sink():
    sim = Simulator.from_episode(simple())
    for a in [
        "find a Sink",
        "turn on the Faucet",
        "turn off the Faucet",
        "find a Mug",
        "pick up the Mug",
        "find a Sink",
        "put down the object in hand",
    ]:
        assert sim.step(a).success, a
    mug = sim.objs["Mug"]
    assert not mug.cleaned and mug.dirty  # the faucet ran before the mug was in the sink
    assert sim.step("turn on the Faucet").success
    assert mug.cleaned and not mug.dirty and "Mug (clean)" in sim.observe_text()


def test_heat_needs_the_closed_microwave_turned_on_with_the_object_inside():
    sim = Simulator.from_episode(simple())
    for a in [
        "find a Apple",
        "pick up the Apple",
        "find a Microwave",
        "open the Microwave",
        "put down the object in hand",
        "close the Microwave",
    ]:
        assert sim.step(a).success, a
    assert not sim.objs["Apple"].heated
    assert sim.step("turn on the Microwave").success
    assert sim.objs["Apple"].heated and not sim.objs["Apple_2"].heated


def test_cool_happens_when_the_fridge_is_closed_with_the_object_inside():
    sim = Simulator.from_episode(simple())
    for a in ["find a Apple", "pick up the Apple", "find a Fridge", "open the Fridge", "put down the object in hand"]:
        assert sim.step(a).success, a
    assert not sim.objs["Apple"].cooled
    assert sim.step("close the Fridge").success
    assert sim.objs["Apple"].cooled and sim.objs["Egg"].cooled


def test_slicing_makes_pieces_that_the_whole_objects_name_reaches():
    sim = Simulator.from_episode(simple())
    for a in ["find a Knife", "open the Drawer", "pick up the Knife", "find a Apple_2", "slice the Apple_2"]:
        assert sim.step(a).success, a
    assert "Apple_2" not in sim.objs
    pieces = [o for o in sim.objs.values() if o.type == "AppleSliced"]
    assert len(pieces) == N_PIECES
    assert {p.parent for p in pieces} == {"DiningTable"} and {p.src for p in pieces} == {"Apple_2"}
    assert [p.id for p in pieces] == ["AppleSliced", "AppleSliced_2", "AppleSliced_3"]
    assert "AppleSliced x3" in sim.observe_text()
    # holding the knife, "find a Apple" prefers the remaining whole apple ...
    assert sim.resolve("find a Apple") == "Apple"
    assert sim.step("put down the object in hand").success  # dropped: no find since the slice
    # ... with an empty hand it prefers pieces, and Apple_2 now names its pieces
    assert sim.resolve("find a Apple") in {p.id for p in pieces}
    assert sim.resolve("find a Apple_2") in {p.id for p in pieces}
    assert sim.step("pick up the Apple").success
    assert sim.objs[sim.held].type == "AppleSliced"
    assert sim.step("find a AppleSliced").feedback.startswith("Last action is invalid. Cannot find AppleSliced")


def test_plain_find_prefers_objects_not_yet_put_by_the_agent():
    # ALFRED's pick-two plans use the same plain name twice: the second find must reach the other spoon
    ep = episode("pick_two_obj_and_place", "Spoon", "Drawer")
    sim = Simulator.from_episode(ep)
    plan = [
        "find a Spoon",
        "pick up the Spoon",
        "find a Drawer",
        "open the Drawer",
        "put down the object in hand",
        "close the Drawer",
        "find a Spoon",
        "pick up the Spoon",
        "find a Drawer",
        "open the Drawer",
        "put down the object in hand",
        "close the Drawer",
    ]
    for a in plan:
        assert sim.step(a).success, a
    assert sim.objs["Spoon"].parent == sim.objs["Spoon_2"].parent == "Drawer"
    assert sim.is_success()


def test_plain_find_returns_to_a_processed_object():
    # after cleaning, "find a Mug" goes back to the (clean) mug in the sink, not to another mug
    objs = [o for o in episode("pick_clean_then_place_in_recep", "Mug", "CoffeeMachine")["scene"]["objects"]]
    objs.append(obj("Mug_2", "Mug", "DiningTable"))
    ep = episode("pick_clean_then_place_in_recep", "Mug", "CoffeeMachine", objects=objs)
    sim = Simulator.from_episode(ep)
    for a in [
        "find a Mug",
        "pick up the Mug",
        "find a Sink",
        "put down the object in hand",
        "turn on the Faucet",
        "turn off the Faucet",
        "find a Apple",
        "find a Mug",
        "pick up the Mug",
        "find a CoffeeMachine",
        "put down the object in hand",
    ]:
        assert sim.step(a).success, a
    assert sim.is_success() and sim.objs["Mug"].parent == "CoffeeMachine"


def test_plain_names_act_on_the_found_instance():
    sim = Simulator.from_episode(simple())
    assert sim.step("find a Drawer_2").success
    assert sim.step("open the Drawer").success  # the Drawer within reach is Drawer_2
    assert sim.objs["Drawer_2"].open and not sim.objs["Drawer"].open


def test_copy_is_independent_and_cheap():
    sim = Simulator.from_episode(simple())
    sim.step("find a Apple")
    twin = sim.copy()
    assert twin.step("pick up the Apple").success
    assert sim.held is None and sim.objs["Apple"].parent == "CounterTop"
    assert twin.objs["Apple"].parent == HAND and twin.objs["Apple"] is not sim.objs["Apple"]
    assert twin.actions is sim.actions  # immutable parts are shared, not copied
