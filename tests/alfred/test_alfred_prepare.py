"""run_prepare_alfred end to end: config, files written, skipped inputs listed, replay on real data."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from embodied_rft.alfred import AlfredConfig, run_prepare_alfred
from embodied_rft.config import ConfigError
from embodied_rft.data.jsonl import DataError, read_jsonl
from embodied_rft.world import check_episode
from tests.helpers.alfred_synth import clean_mug, heat_sliced_apple, write_split


def _cfg(root: Path, **kw) -> AlfredConfig:
    return AlfredConfig.from_data_section({"source": "alfred", "alfred_dir": str(root), **kw})


# ---- config -----------------------------------------------------------------------------------


def test_config_defaults_and_source_key():
    cfg = AlfredConfig.from_data_section({"source": "alfred"})
    assert cfg.splits == ("train", "valid_seen", "valid_unseen") and cfg.annotations == "all"
    assert cfg.on_error == "raise" and cfg.replay is True and cfg.eb_split_file is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.on_error = "skip"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"alfred_dri": "x"}, r"data\.alfred_dri: unknown key; did you mean 'alfred_dir'\?"),
        ({"splits": ["test"]}, r"data\.splits: 'test' is not one of"),
        ({"splits": []}, r"data\.splits: list at least one ALFRED split"),
        ({"splits": ["train", "train"]}, r"data\.splits: duplicate split"),
        ({"annotations": "some"}, r"data\.annotations: 'some' is not one of \['all', 'first', 'per_annotation'\]"),
        ({"on_error": "ignore"}, r"data\.on_error: 'ignore' is not one of \['raise', 'skip'\]"),
        ({"max_trajectories": 0}, r"data\.max_trajectories: must be > 0 or null, got 0"),
        ({"max_trajectories": "10"}, r"data\.max_trajectories: .*10"),
        ({"eb_split_name": "train"}, r"data\.eb_split_name: 'train' must be a plain file stem"),
        ({"eb_source_split": "test"}, r"data\.eb_source_split: 'test' is not one of"),
        ({"replay": "yes"}, r"data\.replay: expected true/false"),
    ],
)
def test_config_errors_name_the_key(section, message):
    with pytest.raises(ConfigError, match=message):
        AlfredConfig.from_data_section({"source": "alfred", **section})


def test_missing_alfred_dir(tmp_path):
    with pytest.raises(
        DataError, match=r"data\.alfred_dir: .* is not a directory \(download ALFRED with `make fetch-alfred`\)"
    ):
        run_prepare_alfred(_cfg(tmp_path / "nowhere"), tmp_path / "out")


# ---- synthetic dataset (no ../shared needed) ----------------------------------------------------


@pytest.fixture
def synthetic(tmp_path) -> Path:
    root = tmp_path / "json_2.1.0"
    heat, clean = heat_sliced_apple(), clean_mug()
    no_clean = clean_mug()
    no_clean["task_id"] = "trial_T00000000_000000_000003"
    del no_clean["plan"]["high_pddl"][2:4]  # the wash is missing: the plan cannot reach the goal
    bad_type = heat_sliced_apple()
    bad_type["scene"]["scene_num"] = "7"
    write_split(
        root,
        "train",
        {
            "pick_heat_then_place_in_recep-AppleSliced-None-Fridge-7/trial_1": heat,
            "pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-12/trial_2": clean,
            "pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-12/trial_3": no_clean,
            "pick_heat_then_place_in_recep-AppleSliced-None-Fridge-7/trial_4": bad_type,
        },
    )
    truncated = root / "train/pick_heat_then_place_in_recep-AppleSliced-None-Fridge-7/trial_5/traj_data.json"
    truncated.parent.mkdir(parents=True)
    truncated.write_text(json.dumps(heat)[:300])
    (root / "train/pick_heat_then_place_in_recep-AppleSliced-None-Fridge-7/trial_6").mkdir()  # incomplete
    write_split(root, "valid_seen", {"pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-12/trial_9": clean})
    return root


def test_skip_lists_every_bad_file_with_its_reason(synthetic, tmp_path):
    out = tmp_path / "episodes"
    m = run_prepare_alfred(_cfg(synthetic, on_error="skip"), out)
    tr = m["splits"]["train"]
    assert (tr["trajectories"], tr["read"], tr["converted"], tr["episodes"]) == (6, 3, 3, 2)
    assert m["missing_splits"] == ["valid_unseen"]
    assert m["replay"]["trajectories"] == 4 and m["replay"]["ok"] == 3 and m["replay"]["success_rate"] == 0.75
    fails = m["failures"]["by_reason"]
    pre = "train/pick_heat_then_place_in_recep-AppleSliced-None-Fridge-7/"
    assert fails["read: field 'scene.scene_num' must be int"]["files"] == [pre + "trial_4"]
    assert [r for r in fails if r.startswith("read: invalid JSON")] and fails["read: file not found"]["files"] == [
        pre + "trial_6"
    ]
    assert fails["replay: goal not reached"]["files"] == [
        "train/pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-12/trial_3"
    ]
    assert m["failures"]["total"] == 4
    eps = read_jsonl(out / "train.jsonl")
    assert sorted(e["episode_id"] for e in eps) == [
        "train:trial_T00000000_000000_000001",
        "train:trial_T00000000_000000_000002",
    ]
    for e in eps + read_jsonl(out / "valid_seen.jsonl"):
        check_episode(e, e["episode_id"])
        assert e["source"] == "alfred" and e["subset"] == "base"
    assert m["conversion_notes"]["faucet"] == 2 and m["conversion_notes"]["drop_tool"] == 1
    assert m["unaddressable_types"] == {"TeddyBear": 1}
    assert sorted(p.name for p in out.iterdir()) == ["train.jsonl", "valid_seen.jsonl"]  # no temp files left


def test_raise_stops_at_the_first_bad_file(synthetic, tmp_path):
    with pytest.raises(DataError, match=r"trial_4/traj_data\.json: field 'scene\.scene_num' must be int, got str '7'"):
        run_prepare_alfred(_cfg(synthetic), tmp_path / "out")
    assert not (tmp_path / "out" / "train.jsonl").exists()


@pytest.mark.parametrize(("mode", "ids"), [("all", [""]), ("first", [""]), ("per_annotation", [":0", ":1"])])
def test_annotation_modes(synthetic, tmp_path, mode, ids):
    m = run_prepare_alfred(_cfg(synthetic, splits=["train"], on_error="skip", annotations=mode), tmp_path / "o")
    eps = [e for e in read_jsonl(tmp_path / "o/train.jsonl") if e["task_type"] == "pick_heat_then_place_in_recep"]
    assert [e["episode_id"] for e in eps] == [f"train:trial_T00000000_000000_000001{i}" for i in ids]
    texts = ["Put a warm apple slice in the fridge.", "Heat a slice of apple and chill it."]
    assert [e["instruction"] for e in eps] == texts[: len(ids)]
    assert ("annotations" in eps[0]["meta"]) == (mode == "all")
    if mode == "all":
        assert eps[0]["meta"]["annotations"] == texts
    assert m["splits"]["train"]["episodes"] == len(ids) + 1


def test_eb_split_file_makes_labelled_eval_episodes(synthetic, tmp_path):
    split = tmp_path / "eb.json"
    rec = {
        "repeat_idx": 0,
        "full_scene_name": "pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-12/trial_9",
        "task type": "pick_clean_then_place_in_recep",
        "task description": "Clean a cup for coffee.",
        "NL Steps": [
            "find a mug",
            "pick up a mug",
            "find a sinkbasin",
            "put down the mug",
            "find a mug",
            "pick up the mug",
            "find a coffeemachine",
            "put down the mug",
        ],
    }
    split.write_text(json.dumps({"base": [rec], "common_sense": [dict(rec, **{"task description": "Wash it."})]}))
    m = run_prepare_alfred(_cfg(synthetic, splits=["valid_seen"], eb_split_file=str(split)), tmp_path / "o")
    eps = read_jsonl(tmp_path / "o/eb_valid.jsonl")
    assert [(e["episode_id"], e["subset"], e["instruction"]) for e in eps] == [
        ("eb_valid:base:1", "base", "Clean a cup for coffee."),
        ("eb_valid:common_sense:1", "common_sense", "Wash it."),
    ]
    meta = eps[0]["meta"]
    assert meta["repeat_idx"] == 0 and meta["expert_replay_ok"] is True and meta["nl_steps_equal"] is False
    assert meta["alfred_instruction"] == "Wash a mug and put it under the coffee maker."
    nl = m["eb"]["nl_steps"]
    assert (nl["compared"], nl["equal"], nl["documented_differences"], nl["unexplained"]) == (2, 0, 2, {})
    assert m["eb"]["subset"] == {"base": 1, "common_sense": 1}
    for e in eps:
        check_episode(e, e["episode_id"])


def test_eb_record_whose_task_type_disagrees(synthetic, tmp_path):
    split = tmp_path / "base.json"
    split.write_text(
        json.dumps(
            [
                {
                    "repeat_idx": 0,
                    "full_scene_name": "pick_clean_then_place_in_recep-Mug-None-CoffeeMachine-12/trial_9",
                    "task type": "pick_two_obj_and_place",
                    "task description": "x",
                }
            ]
        )
    )
    with pytest.raises(
        DataError, match=r"base\.json: field 'base\[0\]\.task type': 'pick_two_obj_and_place' but .* is a pick_clean"
    ):
        run_prepare_alfred(_cfg(synthetic, splits=["valid_seen"], eb_split_file=str(split)), tmp_path / "o")


# ---- real ALFRED (../shared) ------------------------------------------------------------------


def _check_real(m: dict, out: Path) -> None:
    rep = m["replay"]
    assert rep["success_rate"] >= 0.99, m["failures"]
    listed = sum(g["count"] for r, g in m["failures"]["by_reason"].items() if r.startswith("replay: "))
    assert listed == rep["trajectories"] - rep["ok"]  # every failure is listed with its reason
    for split in ("train", "valid_seen"):
        eps = read_jsonl(out / f"{split}.jsonl")
        assert (
            len(eps)
            == m["splits"][split]["episodes"]
            == rep["ok"] - sum(m["splits"][s]["episodes"] for s in ("train", "valid_seen") if s != split)
        )
        for e in eps[:: max(1, len(eps) // 50)]:
            check_episode(e, e["episode_id"])
            assert len(e["expert_plan"]) <= 32


def test_real_subset_replays_and_matches_eb(shared, tmp_path):
    """Default tier: 150 train + 150 valid_seen trajectories, evenly spread, and the 18 EB examples."""
    cfg = _cfg(
        shared / "alfred/json_2.1.0",
        splits=["train", "valid_seen"],
        max_trajectories=150,
        eb_split_file=str(shared / "embodiedbench/eb_alfred_examples.json"),
    )
    m = run_prepare_alfred(cfg, tmp_path)
    assert m["replay"]["trajectories"] == 300
    assert len(m["splits"]["train"]["task_type"]) == 7  # the spread covers every task type
    _check_real(m, tmp_path)
    eb = m["eb"]
    assert eb["episodes"] == 18 and eb["expert_replay_failures"] == 0
    assert eb["nl_steps"]["equal"] == 10 and eb["nl_steps"]["documented_differences"] == 8
    assert eb["nl_steps"]["unexplained"] == {}


@pytest.mark.slow
def test_all_real_trajectories_replay(shared, tmp_path):
    """All 6,825 shared trajectories (train + valid_seen): >= 99% of converted plans reach the goal."""
    m = run_prepare_alfred(_cfg(shared / "alfred/json_2.1.0", on_error="skip"), tmp_path)
    assert m["splits"]["train"]["trajectories"] == 6574 and m["splits"]["valid_seen"]["trajectories"] == 251
    assert m["replay"]["trajectories"] == 6825
    _check_real(m, tmp_path)
