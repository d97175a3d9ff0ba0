"""The expert planner reads the state: its plans change with what is open, on, inside or already done."""

from __future__ import annotations

import pytest

from embodied_rft.world import PlanError, Simulator, expert_plan, plan_for
from tests.helpers.world_scenes import BEDROOM, KITCHEN, episode, obj


def replay(ep: dict, plan: list[str]) -> Simulator:
    sim = Simulator.from_episode(ep)
    for a in plan:
        r = sim.step(a)
        assert r.success, (a, r.feedback)
    assert sim.is_success()
    return sim


def with_state(objects: list[dict], oid: str, **state) -> list[dict]:
    out = [dict(o, state=dict(o["state"])) for o in objects]
    for o in out:
        if o["id"] == oid:
            o["state"].update(state)
    return out


def test_simple_plan_is_the_eb_shape():
    ep = episode("pick_and_place_simple", "Apple", "GarbageCan")
    plan = expert_plan(ep)
    assert plan == ["find a Apple", "pick up the Apple", "find a GarbageCan", "put down the object in hand"]
    replay(ep, plan)


def test_closed_containers_are_opened_and_closed_only_when_closed():
    ep = episode("pick_and_place_simple", "Egg", "Microwave")
    plan = expert_plan(ep)
    assert plan == [
        "find a Egg",
        "open the Fridge",
        "pick up the Egg",
        "close the Fridge",
        "find a Microwave",
        "open the Microwave",
        "put down the object in hand",
        "close the Microwave",
    ]
    replay(ep, plan)
    objs = with_state(with_state(KITCHEN, "Fridge", open=True), "Microwave", open=True)
    ep_open = episode("pick_and_place_simple", "Egg", "Microwave", objects=objs)
    plan_open = expert_plan(ep_open)
    assert plan_open == ["find a Egg", "pick up the Egg", "find a Microwave", "put down the object in hand"]
    replay(ep_open, plan_open)


def test_heat_plan_and_a_microwave_that_starts_open():
    ep = episode("pick_heat_then_place_in_recep", "Apple", "GarbageCan")
    plan = expert_plan(ep)
    assert plan[2:] == [
        "find a Microwave",
        "open the Microwave",
        "put down the object in hand",
        "close the Microwave",
        "turn on the Microwave",
        "turn off the Microwave",
        "open the Microwave",
        "pick up the Apple",
        "close the Microwave",
        "find a GarbageCan",
        "put down the object in hand",
    ]
    replay(ep, plan)
    ep2 = episode(
        "pick_heat_then_place_in_recep", "Apple", "GarbageCan", objects=with_state(KITCHEN, "Microwave", open=True)
    )
    assert expert_plan(ep2)[3] == "put down the object in hand"  # no "open the Microwave" first
    replay(ep2, expert_plan(ep2))


def test_clean_plan_turns_the_faucet_on_and_handles_a_running_tap():
    ep = episode("pick_clean_then_place_in_recep", "Mug", "CoffeeMachine")
    plan = expert_plan(ep)
    assert plan == [
        "find a Mug",
        "pick up the Mug",
        "find a Sink",
        "put down the object in hand",
        "turn on the Faucet",
        "turn off the Faucet",
        "pick up the Mug",
        "find a CoffeeMachine",
        "put down the object in hand",
    ]
    replay(ep, plan)
    ep2 = episode(
        "pick_clean_then_place_in_recep", "Mug", "CoffeeMachine", objects=with_state(KITCHEN, "Faucet", on=True)
    )
    plan2 = expert_plan(ep2)
    assert plan2[4:7] == ["turn off the Faucet", "turn on the Faucet", "turn off the Faucet"]
    replay(ep2, plan2)


def test_clean_with_a_free_standing_faucet_goes_to_it_and_back():
    objs = [dict(o, parent=None) if o["id"] == "Faucet" else o for o in KITCHEN]
    ep = episode("pick_clean_then_place_in_recep", "Mug", "CoffeeMachine", objects=objs)
    plan = expert_plan(ep)
    assert plan[4:9] == ["find a Faucet", "turn on the Faucet", "turn off the Faucet", "find a Mug", "pick up the Mug"]
    replay(ep, plan)


def test_cool_into_the_fridge_goal_ends_after_closing():
    ep = episode("pick_cool_then_place_in_recep", "Apple", "Fridge")
    plan = expert_plan(ep)
    assert plan == [
        "find a Apple",
        "pick up the Apple",
        "find a Fridge",
        "open the Fridge",
        "put down the object in hand",
        "close the Fridge",
    ]
    replay(ep, plan)


def test_sliced_plan_uses_a_knife_and_a_piece():
    ep = episode("pick_heat_then_place_in_recep", "Apple", "GarbageCan", sliced=True)
    plan = expert_plan(ep)
    assert plan[:8] == [
        "find a Knife",
        "open the Drawer",
        "pick up the Knife",
        "close the Drawer",
        "find a Apple",
        "slice the Apple",
        "put down the object in hand",
        "pick up the Apple",
    ]
    sim = replay(ep, plan)
    assert sim.objs["Knife"].parent is None  # dropped where the apple was cut
    assert [o.type for o in sim.objs.values() if o.parent == "GarbageCan"] == ["AppleSliced"]


def test_pick_two_movable_and_look_at_plans():
    ep = episode("pick_two_obj_and_place", "Spoon", "Drawer")
    plan = expert_plan(ep)
    assert plan.count("find a Spoon") + plan.count("find a Spoon_2") == 2
    assert plan.count("put down the object in hand") == 2
    replay(ep, plan)
    ep = episode("pick_and_place_with_movable_recep", "Spoon", "DiningTable", mrecep="Plate")
    replay(ep, expert_plan(ep))
    ep = episode("look_at_obj_in_light", "CellPhone", None, toggle="DeskLamp", room="bedroom")
    plan = expert_plan(ep)
    assert plan == ["find a CellPhone", "pick up the CellPhone", "find a DeskLamp", "turn on the DeskLamp"]
    replay(ep, plan)
    lit = episode(
        "look_at_obj_in_light",
        "CellPhone",
        None,
        toggle="DeskLamp",
        room="bedroom",
        objects=with_state(BEDROOM, "DeskLamp", on=True),
    )
    assert expert_plan(lit) == plan[:3]


def test_planning_from_a_mid_episode_state():
    ep = episode("pick_and_place_simple", "Apple", "GarbageCan")
    sim = Simulator.from_episode(ep)
    for a in ["find a Apple", "pick up the Apple", "find a Fridge"]:
        sim.step(a)
    rest = plan_for(sim)
    assert rest == ["find a GarbageCan", "put down the object in hand"]
    assert sim.held == "Apple"  # planning did not change the state
    for a in rest:
        sim.step(a)
    assert sim.is_success() and plan_for(sim) == []


def test_impossible_goals_raise_plan_error():
    with pytest.raises(PlanError, match="cannot be put in a CoffeeMachine"):
        expert_plan(episode("pick_and_place_simple", "Apple", "CoffeeMachine"))
    no_knife = [o for o in KITCHEN if o["type"] not in ("Knife", "ButterKnife")]
    with pytest.raises(PlanError, match="needs a Knife or ButterKnife"):
        expert_plan(episode("pick_and_place_simple", "Apple", "DiningTable", sliced=True, objects=no_knife))
    with pytest.raises(PlanError, match="Pencil"):
        expert_plan(episode("pick_and_place_simple", "Pencil", "Drawer"))
    no_sink = [o for o in KITCHEN if o["type"] not in ("Sink", "Faucet")] + [obj("Spatula", "Spatula", "Drawer")]
    with pytest.raises(PlanError, match="needs a Sink or Bathtub"):
        expert_plan(episode("pick_clean_then_place_in_recep", "Spatula", "DiningTable", objects=no_sink))


def test_a_container_holding_the_knife_and_the_slice_target_stays_open():
    """Knife and the only apple in one closed microwave: the expert takes the knife and reaches the apple without
    closing the microwave and opening it again two steps later, and the world oracle calls every step correct."""
    from embodied_rft.world.oracle import WorldOracle

    objects = [o for o in KITCHEN if o["id"] not in ("Apple", "Apple_2", "ButterKnife", "Knife")]
    objects += [obj("Knife", "Knife", "Microwave"), obj("Apple", "Apple", "Microwave")]
    ep = episode("pick_and_place_simple", "Apple", "GarbageCan", sliced=True, objects=objects)
    plan = expert_plan(ep)
    assert plan[:6] == [
        "find a Knife",
        "open the Microwave",
        "pick up the Knife",
        "find a Apple",
        "slice the Apple",
        "put down the object in hand",
    ]
    assert "close the Microwave" not in plan[: plan.index("pick up the Apple")]
    replay(ep, plan)
    oracle, sim = WorldOracle(ep), Simulator.from_episode(ep)
    for action in plan:
        j = oracle.judge(sim, action)
        assert j.label == "correct", (action, j)
        assert sim.step(action).success
