"""high_pddl -> EB actions: type names, instance names, exact plans (synthetic and real), replay, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied_rft.alfred.convert import convert_plan
from embodied_rft.alfred.episodes import build_episodes, goal_of, room_of
from embodied_rft.alfred.names import eb_type, normalize_action
from embodied_rft.alfred.reader import parse_trajectory, read_trajectory
from embodied_rft.alfred.replay import replay
from embodied_rft.alfred.scene import ConversionError, SceneIndex
from embodied_rft.world import check_episode, global_actions, verb_targets
from tests.helpers.alfred_synth import CLEAN_PLAN, HEAT_PLAN, clean_mug, heat_sliced_apple


def _traj(data: dict, name: str = "synthetic/traj_data.json"):
    return parse_trajectory(data, name, split="train", task_dir="task/trial")


@pytest.mark.parametrize(
    ("alfred", "eb"),
    [
        ("SinkBasin", "Sink"),
        ("BathtubBasin", "Bathtub"),
        ("AppleSliced", "Apple"),
        ("BreadSliced", "Bread"),
        ("Glassbottle", "Glassbottle"),
        ("GlassBottle", "Glassbottle"),
        ("CD", "CD"),
        ("DeskLamp", "DeskLamp"),
        ("TeddyBear", None),
        ("HandTowelHolder", None),
        ("PaperTowelRoll", None),
    ],
)
def test_eb_type(alfred, eb):
    assert eb_type(alfred) == eb


@pytest.mark.parametrize(
    ("action", "norm"),
    [
        ("pick up a ladle", "pick up ladle"),
        ("pick up the Ladle", "pick up ladle"),
        ("find an apple", "find apple"),
        ("find a sinkbasin", "find sink"),
        ("find a Sink", "find sink"),
        ("find a Cabinet_2", "find cabinet"),
        ("open the Microwave", "open microwave"),
        ("put down the ladle", "put down"),
        ("put down the object in hand", "put down"),
        ("drop the object in hand", "drop"),
        ("find a remote control", "find remotecontrol"),
        ("turn on the Faucet", "turn on faucet"),
    ],
)
def test_normalize_action(action, norm):
    assert normalize_action(action) == norm


def test_heat_sliced_apple_plan_and_notes():
    t = _traj(heat_sliced_apple())
    conv = convert_plan(t)
    assert list(conv.plan) == HEAT_PLAN
    assert conv.notes == {"drop_tool": 1, "open_before_put": 1}
    assert all(a in global_actions() or a.startswith("find a Apple_") for a in conv.plan)


def test_clean_mug_plan_and_notes():
    conv = convert_plan(_traj(clean_mug()))
    assert list(conv.plan) == CLEAN_PLAN
    assert conv.notes == {"faucet": 1, "open_container": 1}


def test_scene_objects_names_parents_states():
    t = _traj(clean_mug())
    scene = SceneIndex(t)
    ep = build_episodes(t, scene, convert_plan(t, scene))[0]
    objs = {o["id"]: o for o in ep["scene"]["objects"]}
    assert objs["Mug"] == {"id": "Mug", "type": "Mug", "parent": "Cabinet", "state": {"dirty": True}}
    assert objs["Cabinet"]["state"] == {"open": False}
    assert objs["Faucet"] == {"id": "Faucet", "type": "Faucet", "parent": "Sink", "state": {"on": False}}
    assert objs["Bowl"]["state"] == {"dirty": True} and objs["Bowl"]["parent"] is None
    assert ep["goal"] == {
        "object_target": "Mug",
        "parent_target": "CoffeeMachine",
        "mrecep_target": None,
        "toggle_target": None,
        "object_sliced": False,
    }
    assert ep["scene"]["room"] == "kitchen" and ep["scene"]["layout_id"] == "FloorPlan12"
    check_episode(ep, "synthetic")


def test_instance_numbering_untouched_first_and_unaddressable_types_counted():
    t = _traj(heat_sliced_apple())
    scene = SceneIndex(t)
    by_key = {i.key: i.name for i in scene.instances}
    assert by_key[("pose", 0)] == "Apple" and by_key[("pose", 1)] == "Apple_2"  # the plan's apple is pose 1
    assert scene.dropped_types == {"TeddyBear": 1}
    assert "TeddyBear" not in {i.type for i in scene.instances}


def test_plan_instances_numbered_in_reverse_first_use():
    """Two same-type objects used by the plan: the one used last gets the plain name."""
    t = heat_sliced_apple()
    t["scene"]["object_poses"] = t["scene"]["object_poses"][1:]  # drop the untouched apple
    fwd = SceneIndex(_traj(t), plan_order="forward")
    rev = SceneIndex(_traj(t), plan_order="reverse")
    assert [i.name for i in fwd.instances if i.type == "Apple"] == ["Apple"]
    assert [i.name for i in rev.instances if i.type == "Apple"] == ["Apple"]
    with pytest.raises(ValueError, match="plan_order"):
        SceneIndex(_traj(t), plan_order="sideways")


@pytest.mark.parametrize("make", [heat_sliced_apple, clean_mug])
def test_synthetic_plans_replay_in_the_simulator(make):
    t = _traj(make())
    scene = SceneIndex(t)
    ep = build_episodes(t, scene, convert_plan(t, scene))[0]
    res = replay(ep)
    assert res.ok and res.progress == 1.0, res


def test_replay_reports_why_a_plan_fails():
    t = _traj(clean_mug())
    scene = SceneIndex(t)
    ep = build_episodes(t, scene, convert_plan(t, scene))[0]
    no_faucet = dict(ep, expert_plan=[a for a in ep["expert_plan"] if "Faucet" not in a])
    res = replay(no_faucet)
    assert not res.ok and res.reason == "goal not reached" and res.progress == pytest.approx(1 / 3)
    skip_open = dict(ep, expert_plan=[a for a in ep["expert_plan"] if a != "open the Cabinet"])
    res = replay(skip_open)
    assert not res.ok and res.step == 1
    assert res.reason == "pick up: X is not visible because it is in X. Open the X before picking it up."
    assert res.detail == (
        "step 1 'pick up the Mug': Last action is invalid. Mug is not visible because it is in "
        "Cabinet. Open the Cabinet before picking it up."
    )
    bad_name = dict(ep, expert_plan=["find a Cabinet_7"])
    assert replay(bad_name).reason == "find: not in the scene's action space"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        # a pickup while the knife is still in hand
        (
            lambda t: t["plan"]["high_pddl"].insert(2, t["plan"]["high_pddl"][1]),
            r"plan\.high_pddl\[\d\]' \(PickupObject\): picks up",
        ),
        # the knife pickup removed: slicing with an empty hand
        (lambda t: t["plan"]["high_pddl"].pop(1), r"\(SliceObject\): slices Apple_2 without a knife in hand"),
        # an id whose position matches no pose
        (
            lambda t: t["plan"]["high_pddl"][1]["planner_action"].__setitem__("objectId", "Knife|+09.00|+00.90|+00.40"),
            r"field 'plan\.high_pddl\[1\]\.planner_action\.objectId': no Knife at \(9\.0, 0\.9, 0\.4\)",
        ),
    ],
)
def test_unconvertible_plans_raise_naming_file_and_step(mutate, message):
    data = heat_sliced_apple()
    mutate(data)
    for s_i, s in enumerate(data["plan"]["high_pddl"]):
        s["high_idx"] = s_i
    with pytest.raises(ConversionError, match=message) as ei:
        convert_plan(_traj(data))
    assert str(ei.value).startswith("synthetic/traj_data.json: field 'plan.high_pddl[")


def test_goal_and_room_helpers():
    t = _traj(heat_sliced_apple())
    assert goal_of(t) == {
        "object_target": "Apple",
        "parent_target": "Fridge",
        "mrecep_target": None,
        "toggle_target": None,
        "object_sliced": True,
    }
    assert [room_of(n) for n in (1, 30, 201, 330, 415)] == ["kitchen", "kitchen", "living_room", "bedroom", "bathroom"]


# ---- real ALFRED plans (../shared) ------------------------------------------------------------

REAL = {
    # EB long_horizon example: the knife is dropped after slicing, the apple heated, then binned
    "valid_seen/pick_heat_then_place_in_recep-AppleSliced-None-GarbageCan-11/trial_T20190906_211222_551053": (
        [
            "find a Knife_2",
            "pick up the Knife",
            "find a Apple_3",
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
            "find a Apple_3",
            "pick up the Apple",
            "close the Microwave",
            "find a GarbageCan",
            "put down the object in hand",
        ],
        {"drop_tool": 1},
    ),
    # ALFRED puts the pencil into the bowl without moving: EB needs the bowl found first
    "valid_seen/pick_and_place_with_movable_recep-Pencil-Bowl-Dresser-311/trial_T20190909_002301_857761": (
        [
            "find a Pencil_3",
            "pick up the Pencil",
            "find a Bowl_2",
            "put down the object in hand",
            "pick up the Bowl",
            "find a Dresser",
            "put down the object in hand",
        ],
        {"find_before_put": 1},
    ),
    # lamp toggled, then the clock picked up without moving: the lamp stands on the clock's side table
    "train/look_at_obj_in_light-AlarmClock-None-DeskLamp-309/trial_T20190908_062818_332126": (
        ["find a DeskLamp", "turn on the DeskLamp", "pick up the AlarmClock"],
        {},
    ),
    # the apple starts in the microwave (inferred from the goal): open it to slice there
    "train/pick_and_place_simple-AppleSliced-None-Microwave-14/trial_T20190908_171329_509999": (
        [
            "find a Knife",
            "pick up the Knife",
            "find a Apple_3",
            "open the Microwave",
            "slice the Apple",
            "close the Microwave",
        ],
        {"open_container": 1},
    ),
}


@pytest.mark.parametrize("rel", sorted(REAL))
def test_real_plans_are_pinned_and_replay(shared, rel):
    t = read_trajectory(shared / "alfred/json_2.1.0" / rel / "traj_data.json", split=rel.split("/")[0])
    scene = SceneIndex(t)
    conv = convert_plan(t, scene)
    plan, notes = REAL[rel]
    assert list(conv.plan) == plan
    assert conv.notes == notes
    ep = build_episodes(t, scene, conv)[0]
    check_episode(ep, rel)
    assert replay(ep).ok


def test_real_inferences(shared):
    root = shared / "alfred/json_2.1.0"
    t = read_trajectory(
        root / "train/look_at_obj_in_light-AlarmClock-None-DeskLamp-309/trial_T20190908_062818_332126/traj_data.json"
    )
    used = {i.type: i for i in SceneIndex(t).instances if i.first_use is not None}
    assert used["DeskLamp"].parent is used["AlarmClock"].parent and used["DeskLamp"].parent.type == "SideTable"
    t = read_trajectory(
        root / "train/pick_and_place_simple-AppleSliced-None-Microwave-14/trial_T20190908_171329_509999/traj_data.json"
    )
    assert SceneIndex(t).inferred == [{"object": "Apple_3", "parent": "Microwave", "why": "sliced_in_goal_receptacle"}]


def test_every_plan_type_has_an_eb_name(shared):
    """Every type a real plan acts on or puts into is one of EB's (through names.eb_type)."""
    findable = set(verb_targets("find a"))
    seen = set()
    for p in sorted((shared / "alfred/json_2.1.0/valid_seen").glob("*/*/traj_data.json")):
        for h in json.loads(Path(p).read_text("utf-8"))["plan"]["high_pddl"]:
            for key in ("objectId", "receptacleObjectId"):
                oid = h["planner_action"].get(key)
                if oid:
                    parts = oid.split("|")
                    seen.add(parts[4].split("_")[0] if len(parts) > 4 else parts[0])
    assert len(seen) > 50
    assert {t: eb_type(t) for t in seen if eb_type(t) not in findable} == {}
