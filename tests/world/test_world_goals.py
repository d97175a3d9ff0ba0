"""Goal conditions and progress of the seven task types (EB env/tasks.py counting)."""

from __future__ import annotations

from embodied_rft.world import Simulator
from tests.helpers.world_scenes import episode, obj


def run(ep: dict, actions: list[str]) -> Simulator:
    sim = Simulator.from_episode(ep)
    for a in actions:
        r = sim.step(a)
        assert r.success, (a, r.feedback)
    return sim


def conds(ep: dict, actions: list[str]) -> tuple[int, int]:
    return run(ep, actions).goal_conditions()


PICK_APPLE = ["find a Apple", "pick up the Apple"]
TO_TABLE = ["find a DiningTable", "put down the object in hand"]
SLICE_APPLE = [
    "find a ButterKnife",
    "pick up the ButterKnife",
    "find a Apple",
    "slice the Apple",
    "put down the object in hand",
]


def test_pick_and_place_simple():
    ep = episode("pick_and_place_simple", "Apple", "GarbageCan")
    assert conds(ep, []) == (0, 1)
    sim = run(ep, PICK_APPLE + ["find a GarbageCan", "put down the object in hand"])
    assert sim.goal_conditions() == (1, 1) and sim.is_success() and sim.progress() == 1.0
    # the same type in another receptacle type does not count
    assert conds(ep, PICK_APPLE + ["find a Sink", "put down the object in hand"]) == (0, 1)


def test_sliced_goal_counts_the_slice_and_only_pieces_as_targets():
    ep = episode("pick_and_place_simple", "Apple", "GarbageCan", sliced=True)
    assert conds(ep, []) == (0, 2)
    whole_in_place = ["find a Apple_2", "pick up the Apple", "find a GarbageCan", "put down the object in hand"]
    assert conds(ep, whole_in_place) == (0, 2)  # a whole apple is not a slice
    assert conds(ep, SLICE_APPLE) == (1, 2)
    sim = run(ep, SLICE_APPLE + ["pick up the Apple", "find a GarbageCan", "put down the object in hand"])
    assert sim.goal_conditions() == (2, 2) and sim.progress() == 1.0


def test_unsliced_goal_is_met_by_a_piece_as_in_eb():
    # EB matches "Apple" in the objectId "Apple|..|AppleSliced_1": a slice of apple satisfies an apple goal
    ep = episode("pick_and_place_simple", "Apple", "GarbageCan")
    assert conds(ep, SLICE_APPLE + ["pick up the Apple", "find a GarbageCan", "put down the object in hand"]) == (1, 1)


def test_pick_two_needs_both_in_one_receptacle():
    ep = episode("pick_two_obj_and_place", "Spoon", "CounterTop")
    put1 = ["find a Spoon", "pick up the Spoon", "find a CounterTop", "put down the object in hand"]
    sim = run(ep, [])
    assert sim.goal_conditions() == (1, 2)  # Spoon_2 starts on CounterTop_2
    assert sim.progress() == 0.5
    sim = run(ep, put1)
    assert sim.goal_conditions() == (1, 2)  # one on CounterTop, one on CounterTop_2: the best receptacle has 1
    sim = run(ep, put1 + ["find a Spoon_2", "pick up the Spoon", "find a CounterTop", "put down the object in hand"])
    assert sim.goal_conditions() == (2, 2) and sim.is_success()
    assert sim.objs["Spoon"].parent == sim.objs["Spoon_2"].parent == "CounterTop"


def test_pick_two_sliced_counts_two_pieces():
    ep = episode("pick_two_obj_and_place", "Apple", "Plate", sliced=True)
    assert conds(ep, []) == (0, 4)
    assert conds(ep, SLICE_APPLE) == (2, 4)
    sim = run(
        ep,
        SLICE_APPLE
        + [
            "pick up the Apple",
            "find a Plate",
            "open the Cabinet",
            "put down the object in hand",
            "find a Apple",
            "pick up the Apple",
            "find a Plate",
            "put down the object in hand",
        ],
    )
    assert sim.goal_conditions() == (4, 4)


def test_look_at_obj_in_light_needs_the_object_held_and_the_lamp_on_and_visible():
    ep = episode("look_at_obj_in_light", "Book", None, toggle="DeskLamp", room="bedroom")
    assert conds(ep, []) == (0, 2)
    assert conds(ep, ["find a Book", "pick up the Book"]) == (1, 2)
    assert conds(ep, ["find a DeskLamp", "turn on the DeskLamp"]) == (1, 2)
    sim = run(ep, ["find a Book", "pick up the Book", "find a DeskLamp", "turn on the DeskLamp"])
    assert sim.is_success()
    assert sim.step("find a Bed").success  # the lamp is no longer in view
    assert sim.goal_conditions() == (1, 2)
    # the other lamp type does not count
    sim = run(ep, ["find a Book", "pick up the Book", "find a FloorLamp", "turn on the FloorLamp"])
    assert sim.goal_conditions() == (1, 2)


def test_clean_goal_conditions():
    ep = episode("pick_clean_then_place_in_recep", "Mug", "CoffeeMachine")
    to_cm = ["find a CoffeeMachine", "put down the object in hand"]
    assert conds(ep, []) == (0, 3)
    assert conds(ep, ["find a Mug", "pick up the Mug"] + to_cm) == (1, 3)  # in place, not clean
    wash = ["find a Mug", "pick up the Mug", "find a Sink", "put down the object in hand", "turn on the Faucet"]
    assert conds(ep, wash) == (1, 3)  # clean, not in place
    assert conds(ep, wash + ["pick up the Mug"] + to_cm) == (3, 3)


def test_heat_goal_conditions():
    objs = [o for o in episode("x", "Apple")["scene"]["objects"] if o["id"] != "Apple_2"]
    ep = episode("pick_heat_then_place_in_recep", "Apple", "DiningTable", objects=objs)
    heat = PICK_APPLE + [
        "find a Microwave",
        "open the Microwave",
        "put down the object in hand",
        "close the Microwave",
        "turn on the Microwave",
    ]
    assert conds(ep, []) == (0, 3)
    assert conds(ep, PICK_APPLE + TO_TABLE) == (1, 3)
    assert conds(ep, heat) == (1, 3)
    sim = run(ep, heat + ["turn off the Microwave", "open the Microwave", "pick up the Apple"] + TO_TABLE)
    assert sim.goal_conditions() == (3, 3)


def test_heat_goal_counts_in_place_and_heated_separately():
    ep = episode("pick_heat_then_place_in_recep", "Apple", "DiningTable")
    # Apple_2 starts on the DiningTable (in place, not heated); heating Apple elsewhere gives 2 of 3
    heat = PICK_APPLE + [
        "find a Microwave",
        "open the Microwave",
        "put down the object in hand",
        "close the Microwave",
        "turn on the Microwave",
    ]
    sim = run(ep, [])
    assert sim.goal_conditions() == (1, 3)
    assert run(ep, heat).goal_conditions() == (2, 3)


def test_cool_goal_conditions():
    objs = [o for o in episode("x", "Apple")["scene"]["objects"] if o["id"] != "Apple_2"]
    ep = episode("pick_cool_then_place_in_recep", "Apple", "DiningTable", objects=objs)
    cool = PICK_APPLE + ["find a Fridge", "open the Fridge", "put down the object in hand", "close the Fridge"]
    assert conds(ep, cool) == (1, 3)
    sim = run(ep, cool + ["open the Fridge", "pick up the Apple", "close the Fridge"] + TO_TABLE)
    assert sim.goal_conditions() == (3, 3)


def test_movable_receptacle_goal_conditions():
    objs = episode("x", "Apple")["scene"]["objects"] + [obj("Pencil", "Pencil", "Drawer_2")]
    ep = episode("pick_and_place_with_movable_recep", "Spoon", "DiningTable", mrecep="Bowl", objects=objs)
    sim = run(ep, [])
    assert sim.goal_conditions() == (0, 3)
    in_bowl = ["find a Spoon_2", "pick up the Spoon", "find a Bowl", "put down the object in hand"]
    assert conds(ep, in_bowl) == (1, 3)
    bowl_to_table = ["find a Bowl", "pick up the Bowl", "find a DiningTable", "put down the object in hand"]
    assert conds(ep, bowl_to_table) == (1, 3)  # the bowl is there, without a spoon
    sim = run(ep, in_bowl + ["pick up the Bowl"] + TO_TABLE)
    assert sim.goal_conditions() == (3, 3) and sim.is_success()


def test_progress_is_the_fraction_of_conditions():
    ep = episode("pick_clean_then_place_in_recep", "Mug", "CoffeeMachine")
    sim = run(ep, ["find a Mug", "pick up the Mug", "find a CoffeeMachine", "put down the object in hand"])
    assert abs(sim.progress() - 1 / 3) < 1e-12 and not sim.is_success()
