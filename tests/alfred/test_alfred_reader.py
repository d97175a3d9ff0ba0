"""Reading traj_data.json: real trimmed files, full-download extras, and every kind of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied_rft.alfred.reader import (
    parse_trajectory,
    read_trajectory,
    spread,
    trajectory_paths,
)
from embodied_rft.data.jsonl import DataError
from tests.helpers.alfred_synth import clean_mug, heat_sliced_apple, write_split

LADLE = "valid_seen/pick_clean_then_place_in_recep-Ladle-None-DiningTable-4/trial_T20190909_164840_568811"


def _write(tmp_path: Path, data) -> Path:
    p = tmp_path / "task" / "trial" / "traj_data.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(data if isinstance(data, str) else json.dumps(data), "utf-8")
    return p


def test_reads_synthetic_trajectory(tmp_path):
    p = _write(tmp_path, heat_sliced_apple())
    t = read_trajectory(p, split="train")
    assert t.task_dir == "task/trial" and t.split == "train"
    assert (t.task_type, t.object_target, t.parent_target, t.object_sliced) == (
        "pick_heat_then_place_in_recep",
        "Apple",
        "Fridge",
        True,
    )
    assert t.mrecep_target == "" and t.toggle_target == ""
    assert [s.action for s in t.high_pddl][:4] == ["GotoLocation", "PickupObject", "GotoLocation", "SliceObject"]
    assert t.high_pddl[1].receptacle_coords[0] == "CounterTop"
    assert t.high_pddl[4].receptacle_id == "CounterTop|+01.10|+00.90|+00.50"
    assert [p.type for p in t.poses] == ["Apple", "Apple", "Knife", "TeddyBear"]
    # annotations are stripped of ALFRED's trailing whitespace
    assert t.annotations == ("Put a warm apple slice in the fridge.", "Heat a slice of apple and chill it.")


def test_reads_trimmed_shared_file(shared):
    t = read_trajectory(shared / "alfred/json_2.1.0" / LADLE / "traj_data.json", split="valid_seen")
    assert t.task_id == "trial_T20190909_164840_568811"
    assert t.task_type == "pick_clean_then_place_in_recep" and t.object_target == "Ladle"
    assert [s.action for s in t.high_pddl] == [
        "GotoLocation",
        "PickupObject",
        "GotoLocation",
        "CleanObject",
        "GotoLocation",
        "PutObject",
        "NoOp",
    ]
    assert t.high_pddl[3].object_id.endswith("|SinkBasin")
    assert t.dirty_and_empty is True and t.scene_num == 4 and t.floor_plan == "FloorPlan4"
    assert len(t.annotations) == 3


def test_full_download_fields_are_ignored(shared, tmp_path):
    """A full ALFRED file has low_actions, every image record and pp folders: it reads the same."""
    src = shared / "alfred/json_2.1.0" / LADLE / "traj_data.json"
    data = json.loads(src.read_text("utf-8"))
    full = dict(data)
    full["plan"] = dict(
        data["plan"],
        low_actions=[
            {
                "high_idx": 0,
                "discrete_action": {"action": "MoveAhead_25", "args": {}},
                "api_action": {"action": "MoveAhead"},
            }
        ],
    )
    full["images"] = data["images"] * 3
    full["scene"] = dict(data["scene"], extra_field=1)
    a = read_trajectory(src)
    b = read_trajectory(_write(tmp_path, full), task_dir=a.task_dir)
    assert a.high_pddl == b.high_pddl and a.poses == b.poses and a.annotations == b.annotations


def test_truncated_json_names_the_file(tmp_path):
    text = json.dumps(heat_sliced_apple())
    p = _write(tmp_path, text[: len(text) // 2])
    with pytest.raises(DataError, match=r"traj_data\.json: invalid JSON \(.* at line 1 column \d+\)"):
        read_trajectory(p)


def test_not_utf8_and_missing_file(tmp_path):
    p = _write(tmp_path, "x")
    p.write_bytes(b'{"task_id": "\xff"}')
    with pytest.raises(DataError, match="not valid UTF-8"):
        read_trajectory(p)
    with pytest.raises(DataError, match=r"nope\.json: file not found"):
        read_trajectory(tmp_path / "nope.json")


def _mutated(mutate) -> dict:
    t = heat_sliced_apple()
    mutate(t)
    return t


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.pop("task_type"), r"missing field 'task_type'"),
        (lambda t: t["pddl_params"].pop("object_sliced"), r"missing field 'pddl_params\.object_sliced'"),
        (
            lambda t: t["plan"]["high_pddl"][1]["planner_action"].pop("objectId"),
            r"missing field 'plan\.high_pddl\[1\]\.planner_action\.objectId'",
        ),
        (
            lambda t: t["plan"]["high_pddl"][4]["planner_action"].pop("receptacleObjectId"),
            r"missing field 'plan\.high_pddl\[4\]\.planner_action\.receptacleObjectId'",
        ),
        (lambda t: t["plan"].pop("high_pddl"), r"missing field 'plan\.high_pddl'"),
        (
            lambda t: t["turk_annotations"]["anns"][1].pop("task_desc"),
            r"missing field 'turk_annotations\.anns\[1\]\.task_desc'",
        ),
        (
            lambda t: t["scene"]["object_poses"][2].pop("position"),
            r"missing field 'scene\.object_poses\[2\]\.position'",
        ),
    ],
)
def test_missing_fields_are_named(tmp_path, mutate, message):
    with pytest.raises(DataError, match=message) as ei:
        read_trajectory(_write(tmp_path, _mutated(mutate)))
    assert "traj_data.json" in str(ei.value)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t["scene"].__setitem__("scene_num", "7"), r"field 'scene\.scene_num' must be int, got str '7'"),
        (lambda t: t["scene"].__setitem__("scene_num", True), r"field 'scene\.scene_num' must be int, got bool"),
        (
            lambda t: t["pddl_params"].__setitem__("object_sliced", "yes"),
            r"field 'pddl_params\.object_sliced' must be bool",
        ),
        (
            lambda t: t["scene"]["object_poses"][0]["position"].__setitem__("x", "1.0"),
            r"field 'scene\.object_poses\[0\]\.position\.x' must be int/float, got str",
        ),
        (
            lambda t: t["turk_annotations"].__setitem__("anns", {"0": "x"}),
            r"field 'turk_annotations\.anns' must be list",
        ),
        (
            lambda t: t["plan"]["high_pddl"][3]["planner_action"].__setitem__("objectId", 5),
            r"field 'plan\.high_pddl\[3\]\.planner_action\.objectId' must be str, got int 5",
        ),
        (
            lambda t: t["plan"]["high_pddl"][1]["planner_action"].__setitem__(
                "coordinateReceptacleObjectId", ["CounterTop", [1, 2]]
            ),
            r"field 'plan\.high_pddl\[1\]\.planner_action\.coordinateReceptacleObjectId' "
            r"must be \[type, \[6 numbers\]\]",
        ),
        (
            lambda t: t["plan"]["high_pddl"][2].__setitem__("discrete_action", ["GotoLocation"]),
            r"field 'plan\.high_pddl\[2\]\.discrete_action' must be dict, got list",
        ),
        (
            lambda t: t["plan"]["high_pddl"][2]["discrete_action"].__setitem__("action", "Teleport"),
            r"field 'plan\.high_pddl\[2\]\.discrete_action\.action': unknown verb 'Teleport'",
        ),
        (lambda t: t.__setitem__("task_type", "pick_three"), r"field 'task_type': unknown task type 'pick_three'"),
        (lambda t: t["plan"].__setitem__("high_pddl", []), r"field 'plan\.high_pddl' is empty"),
        (lambda t: t["pddl_params"].__setitem__("object_target", ""), r"field 'pddl_params\.object_target' is empty"),
    ],
)
def test_wrong_types_and_values_are_named(tmp_path, mutate, message):
    with pytest.raises(DataError, match=message):
        read_trajectory(_write(tmp_path, _mutated(mutate)))


def test_top_level_must_be_an_object():
    with pytest.raises(DataError, match=r"f\.json: expected a JSON object at the top level, got list"):
        parse_trajectory([1, 2], "f.json")


def test_trajectory_paths_lists_incomplete_trials(tmp_path):
    write_split(tmp_path, "train", {"b_task/trial_1": clean_mug(), "a_task/trial_2": heat_sliced_apple()})
    (tmp_path / "train" / "a_task" / "trial_0").mkdir()  # an incomplete download: no traj_data.json
    (tmp_path / "train" / "README.txt").write_text("not a task folder")
    listed = trajectory_paths(tmp_path, "train")
    assert [d for d, _ in listed] == ["a_task/trial_0", "a_task/trial_2", "b_task/trial_1"]
    with pytest.raises(DataError, match=r"trial_0/traj_data\.json: file not found"):
        read_trajectory(listed[0][1])
    assert trajectory_paths(tmp_path, "valid_unseen") == []


def test_spread_is_even_and_deterministic():
    items = list(range(10))
    assert spread(items, None) == items and spread(items, 20) == items
    assert spread(items, 5) == [0, 2, 4, 6, 8]
    assert spread(items, 3) == [0, 3, 6]
    assert spread(items, 1) == [0]
