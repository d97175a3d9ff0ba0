"""The RoT data engine (regrpo/rot.py) on a generated world and on a hand-built kitchen: the issue's floors, each
error type's near-miss executed in the simulator with its real feedback, the corrected plan reaching the goal, the
mix against its target, provenance re-checked by replay, and the default decomposition left untouched."""

from __future__ import annotations

import json
import random

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.decompose import DecomposeConfig, decompose_episodes, run_decompose
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.regrpo.config import ERROR_TYPES, RotConfig
from embodied_rft.regrpo.rot import RotEngine, report, verify
from embodied_rft.world import GeneratorConfig, Simulator, expert_plan, generate_episodes, split_action
from embodied_rft.world.oracle import WorldOracle
from tests.helpers.world_scenes import KITCHEN, obj, simple

WORLD = GeneratorConfig(
    seed=5,
    task_types=("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep"),
    target_types=("Apple", "Tomato", "Mug", "Plate", "Bowl", "SoapBar", "Cloth", "Book", "CellPhone", "KeyChain"),
)
PROMPT = PromptConfig(style="compact", action_list="none", system=False, instruction_at="end")


@pytest.fixture(scope="module")
def world():
    eps = generate_episodes(WORLD, "train", 160)
    engine = RotEngine(RotConfig())
    samples = decompose_episodes(eps, PROMPT, recovery=1, seed=3, source=engine)
    return eps, engine, samples, report(engine, samples, {e["episode_id"]: e for e in eps}, 3)


def test_floors_hold_on_a_generated_world(world):
    _, _, samples, m = world
    assert m["floors"] == {
        "feedback_all_from_simulator": True,
        "gates_95pct": True,
        "corrected_all_reach_goal": True,
        "mix_within_5pts": True,
    }
    assert m["written"] == sum("rot" in s for s in samples) == m["rot_samples"] > 140
    assert m["infeasible_share"] < 0.05 and m["gates"]["pass_rate"] >= 0.95
    assert sum(m["per_type"].values()) == m["rot_samples"] and set(m["per_type"]) == set(ERROR_TYPES)
    assert all(abs(m["share"][t] - m["target"][t]) <= 0.05 for t in ERROR_TYPES)


def test_each_type_is_what_its_name_says(world):
    eps, _, samples, _ = world
    by_id = {e["episode_id"]: e for e in eps}
    for s in (s for s in samples if "rot" in s):
        rot = s["rot"]
        failed, expected = rot["failed_action"], rot["expected"]
        fv, ft = split_action(failed[1])
        ev, et = split_action(expected[1])
        assert failed != expected and failed[0] < 162 and rot["source"] == "simulator"
        assert s["history"][-1] == {"action_id": failed[0], "action_name": failed[1], "feedback": rot["feedback"]}
        assert rot["o_fail"] == f"{rot['feedback']}\n{s['observation']}"
        assert json.loads(s["label"])["gold"] == rot["corrected"]
        if rot["error_type"] == "GroundingDrift":  # silent, the right verb, and the oracle says it does not help
            assert rot["executes"] and rot["feedback"] == "Last action executed successfully." and fv == ev
            sim = Simulator.from_episode(by_id[s["episode_id"]])
            for h in s["history"][:-1]:
                sim.step(h["action_id"])
            assert WorldOracle(by_id[s["episode_id"]]).judge(sim, failed[0]).label != "correct"
        else:  # loud, with the simulator's reason
            assert not rot["executes"] and rot["feedback"].startswith("Last action is invalid. ")
        if rot["error_type"] == "ToolMismatch":
            assert ft == et and fv != ev
        if rot["error_type"] == "ArgInvalid":
            assert fv == ev and ft != et


def test_provenance_is_checked_by_replay(world):
    eps, _, samples, _ = world
    by_id = {e["episode_id"]: e for e in eps}
    s = next(s for s in samples if "rot" in s and not s["rot"]["executes"])
    assert verify(by_id[s["episode_id"]], s) == (True, True)
    forged = {**s, "rot": {**s["rot"], "o_fail": s["rot"]["o_fail"].replace("invalid", "fine")}}
    assert verify(by_id[s["episode_id"]], forged) == (False, True)
    wrong = {**s, "label": json.dumps({"gold": s["rot"]["corrected"][1:], "extra_actions": []})}
    assert verify(by_id[s["episode_id"]], wrong)[1] is False


def _kitchen():
    """Put the fork (on the CounterTop beside an Apple and a Bowl) in the closed Drawer."""
    ep = simple(
        "Fork", "Drawer", objects=[o for o in KITCHEN if o["id"] != "Fork"] + [obj("Fork", "Fork", "CounterTop")]
    )
    ep["expert_plan"] = expert_plan(ep)
    sim = Simulator.from_episode(ep)
    return ep, sim, [(sim.actions.id(a), a) for a in ep["expert_plan"]]


def _at(sim, pairs, n):
    s = sim.copy()
    for a, _ in pairs[:n]:
        s.step(a)
    return s


def _one(ep, sim, pairs, n, etype):
    return RotEngine(RotConfig(mix={etype: 1.0})).near_miss(ep, _at(sim, pairs, n), pairs, n, random.Random(0))


def test_literal_near_misses_in_a_hand_built_kitchen():
    ep, sim, pairs = _kitchen()
    assert ep["expert_plan"] == [
        "find a Fork",
        "pick up the Fork",
        "find a Drawer",
        "open the Drawer",
        "put down the object in hand",
        "close the Drawer",
    ]
    bad = "Last action is invalid. "
    nm, feasible = _one(ep, sim, pairs, 3, "InfoInsufficient")  # put down before opening: EB's own words
    assert (nm.action[1], nm.feedback) == (
        "put down the object in hand",
        bad + "Putting the object on Drawer failed. The Drawer is closed; open it first",
    )
    assert nm.corrected == pairs[3:] and nm.corrected_source == "expert" and feasible == ["InfoInsufficient"]
    nm, _ = _one(ep, sim, pairs, 0, "ToolMismatch")  # pick up before finding
    assert (nm.action[1], nm.feedback) == (
        "pick up the Fork",
        bad + "Cannot pick up the Fork: it is not within reach. Find the object before picking up it",
    )
    nm, _ = _one(ep, sim, pairs, 2, "ToolMismatch")  # open before finding
    assert (nm.action[1], nm.feedback) == (
        "open the Drawer",
        bad + "Open action failed. The Drawer is not within reach; find it first",
    )
    nm, _ = _one(ep, sim, pairs, 3, "ArgInvalid")  # the right verb, an out-of-reach container
    assert (nm.action[1], nm.feedback) == (
        "open the Cabinet",
        bad + "Open action failed. The Cabinet is not within reach; find it first",
    )
    nm, _ = _one(ep, sim, pairs, 4, "InfoInsufficient")  # a full hand
    assert (nm.action[1], nm.feedback) == ("pick up the Bowl", bad + "Robot is currently holding Fork")
    assert _one(ep, sim, pairs, 3, "GroundingDrift") is None  # nothing silent goes wrong at "open the Drawer"


def test_grounding_drift_after_a_wrong_pick_gets_the_planner_s_plan():
    ep, sim, pairs = _kitchen()
    nm, _ = _one(ep, sim, pairs, 1, "GroundingDrift")  # at the CounterTop: Apple, Bowl and Fork within reach
    assert (nm.action[1], nm.executes, nm.feedback) == ("pick up the Apple", True, "Last action executed successfully.")
    # the expert's "pick up the Fork" fails with the Apple in hand: the planner drops it first
    assert nm.corrected_source == "planner"
    assert [n for _, n in nm.corrected] == ["drop the object in hand", *ep["expert_plan"][1:]]
    end = nm.after.copy()
    assert all(end.step(a).success for a, _ in nm.corrected) and end.is_success()


def test_the_mix_takes_the_feasible_type_furthest_below_its_target():
    ep, sim, pairs = _kitchen()
    engine = RotEngine(RotConfig())  # at "open the Drawer" only ArgInvalid and InfoInsufficient are feasible
    nm, feasible = engine.near_miss(ep, _at(sim, pairs, 3), pairs, 3, random.Random(0))
    assert feasible == ["ArgInvalid", "InfoInsufficient"] and nm.error_type == "ArgInvalid"  # (0+1)/0.308 < 1/0.152
    engine.counts["ArgInvalid"] = 2  # 3/0.308 > 1/0.152: InfoInsufficient is now further below its share
    nm, _ = engine.near_miss(ep, _at(sim, pairs, 3), pairs, 3, random.Random(0))
    assert nm.error_type == "InfoInsufficient"
    engine.near_miss(ep, _at(sim, pairs, 5), pairs, 5, random.Random(0))  # only ArgInvalid: close the Cabinet
    m = engine.metrics()
    assert (
        m["recovery_steps"] == 3 and m["per_type"]["InfoInsufficient"] == 1 and m["feasible_share"]["ArgInvalid"] == 1.0
    )


def test_defaults_keep_decomposition_unchanged_and_rot_needs_recovery(tmp_path):
    eps = generate_episodes(WORLD, "train", 12)
    plain = decompose_episodes(eps, PROMPT, recovery=1, seed=3)
    rot = decompose_episodes(eps, PROMPT, recovery=1, seed=3, source=RotEngine(RotConfig()))
    assert not any("rot" in s for s in plain)
    clean = lambda ss: [s for s in ss if not s["sample_id"].endswith(":recover")]  # noqa: E731
    assert clean(plain) == clean(rot)  # only the recovery samples differ
    assert build(DecomposeConfig, {}, "decompose").extensions["rot"] == RotConfig(enabled=False)
    with pytest.raises(ConfigError, match=r"decompose.rot.enabled: needs decompose.recovery_per_episode > 0"):
        build(DecomposeConfig, {"rot": {"enabled": True}}, "decompose")
    with pytest.raises(ConfigError, match=r"decompose.rot.mix: unknown error types \['Typo'\]"):
        build(DecomposeConfig, {"rot": {"mix": {"Typo": 1.0}}}, "decompose")
    # the stage writes the engine's report beside the split metrics
    (tmp_path / "eps").mkdir()
    write_jsonl_atomic(tmp_path / "eps" / "train.jsonl", eps)
    write_jsonl_atomic(tmp_path / "eps" / "valid_unseen.jsonl", generate_episodes(WORLD, "valid_unseen", 2))
    cfg = build(DecomposeConfig, {"recovery_per_episode": 1, "rot": {"enabled": True}}, "decompose")
    m = run_decompose(cfg, PROMPT, tmp_path / "eps", tmp_path / "dec", tmp_path / "decompose.json")
    assert m["train"]["rot"]["written"] == m["train"]["recovery_samples"] > 0 and "rot" not in m["val"]


def test_silent_twins_keep_the_expert_s_next_state_beside_each_silent_near_miss(world):
    from embodied_rft.data.decompose import _steps_per_episode

    eps, _, samples, _ = world
    drawn = _steps_per_episode(samples, 2, 3)
    paired = _steps_per_episode(samples, 2, 3, RotEngine(RotConfig(silent_twins=True)).prefer)
    by_id = {s["sample_id"]: s for s in samples}
    silent = [s for s in samples if s.get("rot", {}).get("executes")]
    twin_id = lambda s: f"{s['episode_id']}:{s['step'] + 1}"  # noqa: E731
    has_twin = [s for s in silent if twin_id(s) in by_id]
    assert len(has_twin) > 20
    # the same budget: step 0 plus one other clean step per trajectory, every recovery sample kept
    clean = lambda ss: [s for s in ss if not s["sample_id"].endswith(":recover")]  # noqa: E731
    assert len(clean(paired)) == len(clean(drawn)) and len(paired) == len(drawn)
    assert {s["sample_id"] for s in paired if "rot" in s} == {s["sample_id"] for s in samples if "rot" in s}
    assert sum(s["step"] == 0 for s in clean(paired)) == sum(s["step"] == 0 for s in clean(drawn)) == len(eps)
    # every silent near-miss (one recovery step per trajectory here) has its twin, a uniform draw only some
    kept = {s["sample_id"] for s in paired}
    assert all(twin_id(s) in kept for s in has_twin)
    assert sum(twin_id(s) in {d["sample_id"] for d in drawn} for s in has_twin) < len(has_twin)
    for s in has_twin:  # the twin: the same history, the last action the expert's (executed), no `rot` field
        twin = by_id[twin_id(s)]
        assert twin["history"][:-1] == s["history"][:-1] and "rot" not in twin
        assert twin["history"][-1]["action_name"] == s["rot"]["expected"][1] != s["rot"]["failed_action"][1]
        assert twin["history"][-1]["feedback"] == s["history"][-1]["feedback"]  # both executed, silently
    # trajectories without a silent near-miss keep the uniform draw
    noisy = {s["episode_id"] for s in silent}
    assert [s for s in drawn if s["episode_id"] not in noisy] == [s for s in paired if s["episode_id"] not in noisy]
    assert build(DecomposeConfig, {}, "decompose").extensions["rot"].silent_twins is False
    with pytest.raises(ConfigError, match=r"decompose.rot.silent_twins: needs decompose.rot.enabled"):
        build(DecomposeConfig, {"recovery_per_episode": 1, "rot": {"silent_twins": True}}, "decompose")
    with pytest.raises(ConfigError, match=r"decompose.rot.silent_twins: .*steps_per_episode > 0"):
        build(DecomposeConfig, {"recovery_per_episode": 1, "rot": {"enabled": True, "silent_twins": True}}, "decompose")
    on = {"recovery_per_episode": 1, "steps_per_episode": 2, "rot": {"enabled": True, "silent_twins": True}}
    assert build(DecomposeConfig, on, "decompose").extensions["rot"].silent_twins is True


def test_the_stage_passes_silent_twins_through_and_reports_their_coverage(tmp_path):
    eps = generate_episodes(WORLD, "train", 40)
    (tmp_path / "eps").mkdir()
    write_jsonl_atomic(tmp_path / "eps" / "train.jsonl", eps)
    write_jsonl_atomic(tmp_path / "eps" / "valid_unseen.jsonl", generate_episodes(WORLD, "valid_unseen", 2))
    cov = {}
    for on in (False, True):
        opts = {"recovery_per_episode": 1, "steps_per_episode": 2, "rot": {"enabled": True, "silent_twins": on}}
        cfg = build(DecomposeConfig, opts, "decompose")
        out = tmp_path / f"dec-{on}"
        m = run_decompose(cfg, PROMPT, tmp_path / "eps", out, tmp_path / f"decompose-{on}.json")
        cov[on] = m["train"]["rot"]["silent_with_clean_twin"]
        assert m["train"]["samples"] == len(eps) * 2 + m["train"]["recovery_samples"]  # the same budget either way
    # with the option every silent sample not on its trajectory's last step keeps its twin; the draw, some
    assert cov[True] > 0.8 and cov[False] < cov[True]
