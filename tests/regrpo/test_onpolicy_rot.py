"""RoT samples from a policy's own failures (regrpo/onpolicy.py): the error type by construction, every sample
re-made by replay with the simulator's feedback and the planner's plan reaching the goal, a clear error for states of
another world, the decompose stage adding them beside the engine's samples and checking them apart, and the seeds
tool naming the states by the policy that played."""

from __future__ import annotations

import json

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.decompose import DecomposeConfig, is_recovery, run_decompose
from embodied_rft.data.jsonl import DataError
from embodied_rft.evaluate import EpisodeLimits, RandomPolicy
from embodied_rft.regrpo.onpolicy import error_type, rot_sample, rot_samples
from embodied_rft.regrpo.rot import checks, verify
from embodied_rft.regrpo.text import format_triple
from embodied_rft.regrpo.write import scripted_triple, triple_rng
from embodied_rft.train.grpo.onpolicy import collect_states
from embodied_rft.world.planner import expert_plan
from tests.helpers import tiny_checkpoints as tc
from tests.train.test_grpo_states import WrongFindFirst

PROMPT = tc.PROMPT
LIMITS = EpisodeLimits()


@pytest.mark.parametrize(
    ("failed", "expected", "etype"),
    [
        ("find a Bowl", "find a Mug", "ArgInvalid"),  # a find of an object the scene lacks
        ("pick up the Apple", "pick up the Tomato", "ArgInvalid"),
        ("open the Drawer", "find a Drawer", "ToolMismatch"),  # opened before it was found
        ("open the Fridge", "find a Fridge", "ToolMismatch"),
        ("pick up the Cabinet_2", "find a Cabinet", "ToolMismatch"),  # instances are one object type
        ("put down the object in hand", "find a Apple", "InfoInsufficient"),  # an empty hand
        ("pick up the Knife", "open the Drawer", "InfoInsufficient"),  # inside a closed drawer
        ("turn on the DeskLamp", "put down the object in hand", "InfoInsufficient"),  # already on
    ],
)
def test_the_error_type_is_the_failed_action_s_relation_to_the_corrected_one(failed, expected, etype):
    assert error_type(failed, expected) == etype


@pytest.fixture(scope="module")
def random_states():
    eps = list(tc.episodes(n=4))
    states, summary = collect_states(RandomPolicy(seed=3), eps, PROMPT, LIMITS, batch_size=4)
    return eps, states, summary


def test_a_random_policy_s_failures_become_rot_samples_re_made_by_replay(random_states):
    eps, states, summary = random_states
    by_id = {e["episode_id"]: e for e in eps}
    samples, counts = rot_samples(states, by_id)
    assert counts["after_failed_action"] == summary["after_failed_action"] > 10
    assert counts["samples"] + counts["dropped_corrected_is_failed"] == counts["after_failed_action"]
    assert len(samples) == counts["samples"] == sum(counts["per_type"].values())
    assert "GroundingDrift" not in counts["per_type"] and len(counts["per_type"]) >= 2
    for s in samples:
        rot, last = s["rot"], s["history"][-1]
        assert is_recovery(s) and s["sample_id"].endswith(":recover") and s["step"] == len(s["history"]) - 1
        assert rot["origin"] == "onpolicy" and rot["source"] == "simulator" and not rot["executes"]
        assert rot["failed_action"] == [last["action_id"], last["action_name"]] and rot["feedback"] == last["feedback"]
        assert rot["o_fail"] == f"{last['feedback']}\n{s['observation']}"
        assert rot["corrected"] == json.loads(s["label"])["gold"] and rot["expected"] == rot["corrected"][0]
        assert rot["failed_action"] != rot["corrected"][0]
        assert rot["error_type"] == error_type(last["action_name"], rot["corrected"][0][1])
        assert verify(by_id[s["episode_id"]], s) == (True, True)
    got = checks(samples, by_id, 0)
    assert got["written"] == len(samples) and got["feedback_from_simulator"] == got["corrected_reach_goal"] == 1.0
    assert got["floors"]["feedback_all_from_simulator"] and got["floors"]["corrected_all_reach_goal"]


def test_a_misread_find_gives_an_arg_invalid_sample_whose_triple_quotes_the_simulator():
    eps = list(tc.episodes(n=3))
    states, _ = collect_states(WrongFindFirst(), eps, PROMPT, LIMITS, batch_size=3)
    samples, counts = rot_samples(states, {e["episode_id"]: e for e in eps})
    assert counts["per_type"] == {"ArgInvalid": 3} and counts["episodes"] == 3
    for s, ep in zip(samples, eps, strict=True):
        failed = s["rot"]["failed_action"][1]
        missing = failed.removeprefix("find a ")
        assert [n for _, n in s["rot"]["corrected"]] == expert_plan(ep)  # a failed find changes nothing
        text = format_triple(scripted_triple(s, triple_rng(0, s["sample_id"])))
        assert text.startswith("ErrorType: ArgInvalid. Evidence: ")
        assert f"Cannot find {missing}" in text and failed in text


def test_a_state_of_another_world_is_a_data_error_naming_the_state_and_the_step(random_states):
    eps, states, _ = random_states
    by_id = {e["episode_id"]: e for e in eps}
    state = next(s for s in states if s["failed_last"] and len(s["history"]) >= 2)
    bad = {**state, "history": [dict(h) for h in state["history"]]}
    bad["history"][0]["feedback"] = "Last action executed successfully. (edited)"
    with pytest.raises(DataError, match=r"states.jsonl:7: history\[0\] .*the simulator answers"):
        rot_sample(bad, by_id[state["episode_id"]], "states.jsonl:7")
    ok = {**state, "history": state["history"][:-1] + [{**state["history"][-1]}]}
    assert rot_sample(ok, by_id[state["episode_id"]]) is not None
    with pytest.raises(DataError, match=r"states:1: episode 'nope' is not among the training episodes"):
        rot_samples([{**state, "episode_id": "nope"}], by_id)


def test_the_stage_adds_the_policy_s_failures_and_checks_them_apart_from_the_engine(tmp_path, random_states):
    eps, states, _ = random_states
    (tmp_path / "eps").mkdir()
    write_jsonl_atomic(tmp_path / "eps" / "train.jsonl", eps)
    write_jsonl_atomic(tmp_path / "eps" / "valid_seen.jsonl", list(tc.episodes(n=2)))
    write_jsonl_atomic(tmp_path / "states.jsonl", states)
    opts = {"recovery_per_episode": 1, "rot": {"enabled": True}, "val_split": "valid_seen"}
    m = {}
    for name, extra in (("engine", {}), ("both", {"onpolicy_states": str(tmp_path / "states.jsonl")})):
        cfg = build(DecomposeConfig, {**opts, "rot": {**opts["rot"], **extra}}, "decompose")
        m[name] = run_decompose(cfg, PROMPT, tmp_path / "eps", tmp_path / name, tmp_path / f"{name}.json")
    onp = m["both"]["train"]["rot"]["onpolicy"]
    n = rot_samples(states, {e["episode_id"]: e for e in eps})[1]["samples"]
    assert onp["samples"] == onp["written"] == n > 10 and onp["floors"]["feedback_all_from_simulator"]
    assert m["both"]["train"]["samples"] == m["engine"]["train"]["samples"] + n
    assert m["both"]["train"]["recovery_samples"] == m["engine"]["train"]["recovery_samples"] + n
    # the engine's own report, mix included, reads its samples only
    engine = {k: v for k, v in m["both"]["train"]["rot"].items() if k != "onpolicy"}
    assert engine == m["engine"]["train"]["rot"]
    rows = [json.loads(x) for x in (tmp_path / "both" / "train.jsonl").read_text().splitlines()]
    assert sum(r.get("rot", {}).get("origin") == "onpolicy" for r in rows) == n
    with pytest.raises(ConfigError, match=r"decompose.rot.onpolicy_states: needs decompose.rot.enabled"):
        build(DecomposeConfig, {"recovery_per_episode": 1, "rot": {"onpolicy_states": "x.jsonl"}}, "decompose")
    cfg = build(DecomposeConfig, {**opts, "rot": {"enabled": True, "onpolicy_states": "missing.jsonl"}}, "decompose")
    with pytest.raises(DataError, match=r"decompose.rot.onpolicy_states: missing.jsonl does not exist"):
        run_decompose(cfg, PROMPT, tmp_path / "eps", tmp_path / "x", tmp_path / "x.json")
