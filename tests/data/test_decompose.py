"""Decomposition (paper §3): k expert steps -> k samples with the right history, observation and label."""

from __future__ import annotations

import json

import pytest

from embodied_rft.config import build
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.decompose import DecomposeConfig, decompose_episode, run_decompose
from embodied_rft.data.jsonl import DataError, read_jsonl
from embodied_rft.data.prompt import PromptConfig, build_messages, system_prompt
from embodied_rft.world import Simulator
from embodied_rft.world.actions import N_GLOBAL, ActionSpace, split_action
from embodied_rft.world.generator import GeneratorConfig, generate_episodes
from embodied_rft.world.objects import TYPES

EB = PromptConfig(style="eb", action_list="full")
TINY = PromptConfig(style="compact", action_list="none")


@pytest.fixture(scope="module")
def episodes():
    cfg = build(GeneratorConfig, {"n_train": 12, "n_valid_seen": 0, "n_valid_unseen": 6}, "data.generator")
    return {"train": generate_episodes(cfg, "train"), "valid_unseen": generate_episodes(cfg, "valid_unseen")}


def test_k_steps_give_k_samples_with_history_and_remaining_plan(episodes):
    for ep in episodes["train"]:
        samples = list(decompose_episode(ep, EB))
        k = len(ep["expert_plan"])
        assert len(samples) == k
        sim = Simulator.from_episode(ep)
        for n, s in enumerate(samples):
            assert s["sample_id"] == f"{ep['episode_id']}:{n}" and s["step"] == n and s["num_steps"] == k
            assert [h["action_name"] for h in s["history"]] == ep["expert_plan"][:n]
            gold = json.loads(s["label"])["gold"]
            assert [name for _, name in gold] == ep["expert_plan"][n:]
            assert all(sim.actions.name(i) == name for i, name in gold)
            assert s["observation"] == sim.observe_text()  # o_n: the state after a_0..a_{n-1}
            assert s["instruction"] in s["prompt"][1]["content"] and s["observation"] in s["prompt"][1]["content"]
            assert sim.step(ep["expert_plan"][n]).success
        assert sim.is_success()


def test_history_carries_env_feedback_in_eb_format(episodes):
    s = list(decompose_episode(episodes["train"][0], EB))[2]
    h = s["history"][1]
    assert (
        f"Step 2, action id {h['action_id']}, {h['action_name']}, env feedback: {h['feedback']}"
        in s["prompt"][1]["content"]
    )
    tiny = list(decompose_episode(episodes["train"][0], TINY))[2]
    assert f"2. {h['action_id']} {h['action_name']}: ok" in tiny["prompt"][1]["content"]


def test_action_list_modes():
    space = ActionSpace.for_instances(["Cabinet", "Cabinet_2", "Apple"])
    full = system_prompt(EB, space)
    assert "action id 63: find a DeskLamp" in full and f"action id {N_GLOBAL}: find a Cabinet_2" in full
    scene = system_prompt(PromptConfig(style="eb", action_list="scene"), space, ["Cabinet", "Apple"])
    assert "find a Cabinet_2" in scene and "find a Apple" in scene and "find a DeskLamp" not in scene
    assert "put down the object in hand" in scene  # actions without an object stay listed
    extras = system_prompt(PromptConfig(style="compact", action_list="extras"), space)
    assert f"{N_GLOBAL} find a Cabinet_2" in extras and "find a DeskLamp" not in extras
    assert len(system_prompt(TINY, space)) < len(extras) < len(scene) < len(full)


def test_image_observation_writes_deterministic_pngs(tmp_path, episodes):
    ep = episodes["train"][1]
    a = list(decompose_episode(ep, PromptConfig(observation="image"), tmp_path / "a"))
    b = list(decompose_episode(ep, PromptConfig(observation="image"), tmp_path / "b"))
    assert all(s["image"].startswith("images/") and "<image>" in s["prompt"][1]["content"] for s in a)
    for sa, _sb in zip(a, b):
        name = sa["image"].split("/", 1)[1]
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    first, second = (tmp_path / "a" / a[0]["image"].split("/", 1)[1]), (tmp_path / "a" / a[1]["image"].split("/", 1)[1])
    assert first.read_bytes() != second.read_bytes()  # the frame changes as the plan executes


def test_run_decompose_writes_splits_and_metrics(tmp_path, episodes):
    ep_dir = tmp_path / "episodes"
    write_jsonl_atomic(ep_dir / "train.jsonl", episodes["train"])
    write_jsonl_atomic(ep_dir / "valid_unseen.jsonl", episodes["valid_unseen"])
    cfg = DecomposeConfig(max_val_samples=10)
    m = run_decompose(cfg, TINY, ep_dir, tmp_path / "out", tmp_path / "m.json")
    train = read_jsonl(tmp_path / "out" / "train.jsonl")
    assert len(train) == sum(len(e["expert_plan"]) for e in episodes["train"]) == m["train"]["samples"]
    assert len(read_jsonl(tmp_path / "out" / "val.jsonl")) == 10 == m["val"]["samples"]
    assert sum(m["train"]["per_task_type"].values()) == len(train)
    assert json.loads((tmp_path / "m.details.json").read_text()) == m
    assert not list((tmp_path / "out").glob("*.tmp")) and not list((tmp_path / "out").glob(".*"))


def test_steps_per_episode_keeps_step_zero_and_a_fixed_draw(tmp_path, episodes):
    ep_dir = tmp_path / "episodes"
    write_jsonl_atomic(ep_dir / "train.jsonl", episodes["train"])
    write_jsonl_atomic(ep_dir / "valid_unseen.jsonl", episodes["valid_unseen"])
    full = sum(len(e["expert_plan"]) for e in episodes["train"])
    runs = []
    for out in ("a", "b"):
        run_decompose(DecomposeConfig(steps_per_episode=3), TINY, ep_dir, tmp_path / out, tmp_path / f"{out}.json")
        runs.append(read_jsonl(tmp_path / out / "train.jsonl"))
    train = runs[0]
    assert runs[0] == runs[1]  # the draw is fixed by the seed
    per_ep = {}
    for s in train:
        per_ep.setdefault(s["episode_id"], []).append(s["step"])
    assert set(per_ep) == {e["episode_id"] for e in episodes["train"]}
    for e in episodes["train"]:
        steps = per_ep[e["episode_id"]]
        assert steps[0] == 0 and steps == sorted(steps) and len(set(steps)) == len(steps)
        assert len(steps) == min(3, len(e["expert_plan"]))
    assert len(train) < full
    # val keeps every step (held-out metrics stay comparable)
    assert len(read_jsonl(tmp_path / "a" / "val.jsonl")) == sum(len(e["expert_plan"]) for e in episodes["valid_unseen"])
    with pytest.raises(Exception, match="decompose.steps_per_episode"):
        build(DecomposeConfig, {"steps_per_episode": -1}, "decompose")


def test_bad_episode_line_is_named(tmp_path, episodes):
    ep_dir = tmp_path / "episodes"
    bad = dict(episodes["train"][0])
    bad["expert_plan"] = "find a Apple"
    write_jsonl_atomic(ep_dir / "train.jsonl", [episodes["train"][1], bad])
    with pytest.raises(DataError, match=r"train.jsonl:2: field 'expert_plan' must be list"):
        run_decompose(DecomposeConfig(), TINY, ep_dir, tmp_path / "out", tmp_path / "m.json")
    write_jsonl_atomic(ep_dir / "train.jsonl", [])
    with pytest.raises(DataError, match="no episodes in split 'train'"):
        run_decompose(DecomposeConfig(), TINY, ep_dir, tmp_path / "out", tmp_path / "m.json")


def test_unreplayable_expert_plan_is_reported(episodes):
    ep = json.loads(json.dumps(episodes["train"][0]))
    ep["expert_plan"] = [ep["expert_plan"][1]] + ep["expert_plan"]  # act before finding
    with pytest.raises(DataError, match=r"expert_plan\[0\] .* failed in the simulator: Last action is invalid"):
        list(decompose_episode(ep, TINY))


def test_prompt_messages_shape():
    msgs = build_messages(TINY, "Put a mug in the sink.", [], "You see a Mug.", ActionSpace())
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "History:\nnone" in msgs[1]["content"]


def test_prompt_without_system_part():
    cfg = PromptConfig(style="compact", action_list="none", system=False)
    msgs = build_messages(cfg, "Put a mug in the sink.", [], "You see a Mug.", ActionSpace())
    assert [m["role"] for m in msgs] == ["user"] and "Task: Put a mug in the sink." in msgs[0]["content"]


@pytest.mark.parametrize("style", ["compact", "eb"])
def test_instruction_position(style):
    """start: before the history only; end: after the observation only, right before the answer; both: EB's
    two places (stated first, restated as "to achieve the human instruction: '...'" at the end)."""
    task = "Put a mug in the sink."
    history = [{"action_id": 3, "action_name": "find a Mug", "feedback": "Last action executed successfully."}]
    text = {
        at: build_messages(
            PromptConfig(style=style, system=False, instruction_at=at), task, history, "You see a Mug.", ActionSpace()
        )[0]["content"]
        for at in ("start", "end", "both")
    }
    assert text["start"].count(task) == 1 and text["start"].index(task) < text["start"].index("find a Mug")
    assert text["end"].count(task) == 1 and text["end"].index(task) > text["end"].index("You see a Mug.")
    assert text["both"].count(task) == 2
    if style == "eb":
        assert text["both"].startswith(f"## Now the human instruction is: {task}")
        assert text["both"].endswith(f"to achieve the human instruction: '{task}', plan the remaining actions.")
    else:
        assert text["both"].startswith(f"Task: {task}\nHistory:\n1. 3 find a Mug: ok")
        assert text["end"].endswith(f"Observation: You see a Mug.\nTask: {task}\nPlan the remaining actions.")


def test_instruction_position_is_checked():
    with pytest.raises(Exception, match="prompt.instruction_at"):
        PromptConfig(instruction_at="middle")


def test_recovery_samples_follow_one_mistake_and_keep_a_reachable_plan(episodes):
    """recovery_per_episode: extra samples whose history ends with one mistaken action (its real feedback)
    and whose label, the expert's remaining plan, still reaches the goal from the state after the mistake."""
    from embodied_rft.data.decompose import RECOVERY_SUFFIX
    from embodied_rft.world import Simulator

    n_plain = n_rec = failed = 0
    for ep in episodes["train"]:
        samples = list(decompose_episode(ep, TINY, recovery=2, seed=3))
        plain = [s for s in samples if not s["sample_id"].endswith(RECOVERY_SUFFIX)]
        rec = [s for s in samples if s["sample_id"].endswith(RECOVERY_SUFFIX)]
        assert [s["sample_id"] for s in plain] == [s["sample_id"] for s in decompose_episode(ep, TINY)]
        assert len(rec) <= 2
        for s in rec:
            n = s["step"]
            clean = plain[n]
            assert s["history"][:-1] == clean["history"] and s["label"] == clean["label"]
            mistake = s["history"][-1]
            gold = [a for _, a in json.loads(clean["label"])["gold"]]
            assert mistake["action_name"] != gold[0]
            verb, target = split_action(mistake["action_name"])
            expert_verb, expert_target = split_action(gold[0])
            if mistake["action_name"] not in gold[1:2] and expert_verb == "find a":
                # a wrong find looks for the same kind of thing the expert finds here
                assert verb == "find a" and TYPES[target].pickable == TYPES[expert_target].pickable
            sim = Simulator.from_episode(ep)
            for h in s["history"]:
                assert sim.step(h["action_id"]).feedback == h["feedback"]
            assert sim.observe_text() == s["observation"]
            for aid, _ in json.loads(s["label"])["gold"]:
                assert sim.step(aid).success
            assert sim.is_success()
            failed += "invalid" in mistake["feedback"]
        n_plain += len(plain)
        n_rec += len(rec)
    assert n_rec >= len(episodes["train"]) and failed >= n_rec // 3
    again = [s for ep in episodes["train"] for s in decompose_episode(ep, TINY, recovery=2, seed=3)]
    assert len(again) == n_plain + n_rec  # deterministic for a seed


def test_recovery_samples_are_kept_beside_steps_per_episode(episodes, tmp_path):
    ep_dir = tmp_path / "episodes"
    for split, eps in episodes.items():
        write_jsonl_atomic(ep_dir / f"{split}.jsonl", eps)
    m = run_decompose(
        DecomposeConfig(steps_per_episode=2, recovery_per_episode=1),
        TINY,
        ep_dir,
        tmp_path / "out",
        tmp_path / "m.json",
    )
    train = read_jsonl(tmp_path / "out" / "train.jsonl")
    rec = [s for s in train if s["sample_id"].endswith(":recover")]
    assert len(train) - len(rec) == 2 * len(episodes["train"]) and len(rec) >= len(episodes["train"]) // 2
    assert m["train"]["samples"] == len(train) and m["train"]["recovery_samples"] == len(rec)
    assert m["val"]["recovery_samples"] == 0
    assert not any(s["sample_id"].endswith(":recover") for s in read_jsonl(tmp_path / "out" / "val.jsonl"))
