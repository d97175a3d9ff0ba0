"""Interactive evaluation: EB's execution rules on crafted cases, the expert/random bounds on generated
episodes, the model path, parallel workers and resuming."""

from __future__ import annotations

import json

import pytest

from embodied_rft.data.prompt import PromptConfig
from embodied_rft.data.response import format_response
from embodied_rft.evaluate import (
    EpisodeLimits,
    EpisodeRun,
    ExpertPolicy,
    ModelPolicy,
    PolicySpec,
    ResultStore,
    aggregate,
    read_plan,
    run_episodes,
    run_lockstep,
)
from embodied_rft.generation import GenerationConfig, make_generator
from embodied_rft.world import Simulator
from tests.helpers import tiny_checkpoints as tc

PROMPT = tc.PROMPT
LIMITS = EpisodeLimits()


def _ep(i: int = 0) -> dict:
    return tc.episodes()[i]


def _resp(space, names) -> str:
    return format_response([(space.id(n), n) for n in names])


class Scripted:
    """Answers a fixed list of responses in turn (last one repeated); records the prompts it saw."""

    def __init__(self, responses):
        self.responses = list(responses)
        self.prompts: list[list[dict]] = []

    def plan(self, messages_batch, images=None, contexts=None):
        self.prompts.extend(messages_batch)
        out = []
        for ctx in contexts:
            out.append(self.responses[min(ctx.call_index, len(self.responses) - 1)])
        return out


def _run_one(policy, ep=None, limits=LIMITS) -> dict:
    (rec,) = list(run_lockstep([ep or _ep()], policy, PROMPT, limits))
    return rec


# ---- reading plans ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, status, ids",
    [
        (
            '{"executable_plan": [{"action_id": 3, "action_name": "x"}, {"action_id": 5, "action_name": "y"}]}',
            "ok",
            [3, 5],
        ),
        ('```json\n{"executable_plan": [{"action_id": 3, "action_name": "x"}]}\n```', "ok", [3]),
        ('{"executable_plan": [{"action_id": 3}, {"action_id": 999}, {"action_id": 4}]}', "ok", [3]),
        ('{"executable_plan": [{"action_id": 999}, {"action_id": 4}]}', "out_of_range", []),
        ('{"executable_plan": [{"action_id": -1}]}', "out_of_range", []),
        ('{"executable_plan": []}', "empty", []),
        ('{"executable_plan": [{"action_id": "3"}]}', "unparseable", []),
        ('{"executable_plan": [{"action_id": 3}, {"action_id": true}]}', "unparseable", []),
        ('{"executable_plan": "find a Apple"}', "unparseable", []),
        ('{"language_plan": "no plan key"}', "unparseable", []),
        ("I would find the apple first.", "unparseable", []),
    ],
)
def test_read_plan_follows_eb_json_to_action(text, status, ids):
    assert read_plan(text, 200) == (status, ids)


# ---- execution rules on crafted cases ------------------------------------------------------------
def test_replans_after_an_invalid_action_with_the_failure_in_the_history():
    ep = _ep()
    space = Simulator.from_episode(ep).actions
    plan = ep["expert_plan"]
    # call 1: the first expert action, then a put-down with empty hands (fails), then the rest of the plan
    first = _resp(space, [plan[0], "put down the object in hand", *plan[1:]])
    policy = Scripted([first, _resp(space, plan[1:])])
    eb_prompt = PromptConfig(style="eb", action_list="extras")
    (rec,) = list(run_lockstep([ep], policy, eb_prompt, LIMITS))
    assert rec["success"] and rec["end_reason"] == "success"
    assert rec["planner_calls"] == 2 and rec["invalid_actions"] == 1 and rec["parse_failures"] == 0
    # the failing step stopped the first plan: nothing after it ran
    assert [a[1] for a in rec["actions"][:2]] == [plan[0], "put down the object in hand"]
    assert rec["actions"][1][2] is False
    assert rec["env_steps"] == len(plan) + 1
    # the second prompt carries both executed steps with EB's history wording and env feedback
    second_user = policy.prompts[1][1]["content"]
    assert (
        f"Step 1, action id {space.id(plan[0])}, {plan[0]}, env feedback: Last action executed successfully."
        in second_user
    )
    assert "Step 2, action id 133, put down the object in hand, env feedback: Last action is invalid." in second_user
    assert "Step 3" not in second_user


def test_thirty_environment_steps_end_the_episode():
    ep = _ep()
    space = Simulator.from_episode(ep).actions
    # "find a <object in the scene>" always succeeds and never completes the task
    target = next(o["type"] for o in ep["scene"]["objects"] if f"find a {o['type']}" in space.index)
    policy = Scripted([_resp(space, [f"find a {target}"] * 20)])
    rec = _run_one(policy, ep)
    assert (rec["success"], rec["end_reason"], rec["env_steps"], rec["planner_calls"]) == (
        False,
        "max_env_steps",
        30,
        2,
    )
    assert rec["invalid_actions"] == 0
    assert rec["progress"] < 1.0


def test_ten_invalid_actions_end_the_episode_and_parse_failures_count_as_invalid():
    rec = _run_one(Scripted(["Sorry, I cannot help with that."]))
    assert (
        rec["end_reason"],
        rec["invalid_actions"],
        rec["parse_failures"],
        rec["env_steps"],
        rec["planner_calls"],
    ) == (
        "max_invalid_actions",
        10,
        10,
        0,
        10,
    )
    # out-of-range first ids are invalid actions too, but not parse failures
    rec = _run_one(Scripted(['{"executable_plan": [{"action_id": 100000, "action_name": "x"}]}']))
    assert (rec["invalid_actions"], rec["parse_failures"], rec["out_of_range_plans"], rec["env_steps"]) == (
        10,
        0,
        10,
        0,
    )
    # failing environment steps: each call executes one failing put-down
    space = Simulator.from_episode(_ep()).actions
    rec = _run_one(Scripted([_resp(space, ["put down the object in hand", "drop the object in hand"])]))
    assert (rec["end_reason"], rec["invalid_actions"], rec["env_steps"], rec["planner_calls"]) == (
        "max_invalid_actions",
        10,
        10,
        10,
    )


def test_empty_plan_ends_the_episode_and_planner_call_cap_binds():
    rec = _run_one(Scripted(['{"executable_plan": []}']))
    assert (rec["end_reason"], rec["planner_calls"], rec["env_steps"], rec["invalid_actions"]) == (
        "empty_plan",
        1,
        0,
        0,
    )
    rec = _run_one(Scripted(["garbage"]), limits=EpisodeLimits(max_planner_calls=3))
    assert (rec["end_reason"], rec["planner_calls"]) == ("max_planner_calls", 3)


def test_a_plan_is_cut_to_the_steps_left():
    ep = _ep()
    space = Simulator.from_episode(ep).actions
    target = next(o["type"] for o in ep["scene"]["objects"] if f"find a {o['type']}" in space.index)
    run = EpisodeRun(ep, PROMPT, EpisodeLimits(max_env_steps=5))
    run.apply(_resp(space, [f"find a {target}"] * 8))
    assert run.env_steps == 5 and run.end_reason == "max_env_steps"
    with pytest.raises(RuntimeError, match="after it ended"):
        run.apply("{}")


# ---- the harness tells policies apart -----------------------------------------------------------
def _steps_to_success(ep: dict) -> int:
    sim = Simulator.from_episode(ep)
    for i, name in enumerate(ep["expert_plan"], 1):
        assert sim.step(name).success
        if sim.is_success():
            return i
    raise AssertionError(f"{ep['episode_id']}: the expert plan does not reach the goal")


def test_expert_succeeds_everywhere_and_random_nowhere(tmp_path):
    eps = list(tc.episodes("valid_seen", 12))
    assert {e["subset"] for e in eps} == {
        "base",
        "common_sense",
        "complex_instruction",
        "spatial",
        "visual_appearance",
        "long_horizon",
    }
    expert = run_episodes(eps, PolicySpec("expert"), PROMPT, LIMITS, ResultStore(tmp_path / "e.jsonl", "e"))
    rand = run_episodes(eps, PolicySpec("random", seed=0), PROMPT, LIMITS, ResultStore(tmp_path / "r.jsonl", "r"))
    e, r = aggregate(expert), aggregate(rand)
    assert e["overall"]["success_rate"] == 100.0 and e["overall"]["progress"] == 100.0
    assert all(s["success_rate"] == 100.0 for s in e["per_subset"].values())
    assert e["overall"]["invalid_action_rate"] == 0.0 and e["overall"]["avg_planner_calls"] == 1.0
    # each episode took exactly the expert actions up to the first state where the goal holds (EB stops
    # there: a trailing "close the Cabinet" after the goal is met is never executed)
    assert [r["env_steps"] for r in expert] == [_steps_to_success(x) for x in eps]
    assert r["overall"]["success_rate"] == 0.0
    assert r["overall"]["invalid_action_rate"] > 0.5
    assert set(r["overall"]["end_reasons"]) <= {"max_invalid_actions", "max_env_steps"}
    assert list(e["per_subset"]) == [
        "base",
        "common_sense",
        "complex_instruction",
        "spatial",
        "visual_appearance",
        "long_horizon",
    ]
    assert sum(v["episodes"] for v in e["per_task_type"].values()) == 12


def test_model_policy_through_the_hf_backend():
    """The fitted tiny model answers episode 0's expert plan: executed in the simulator, it succeeds; on
    another episode its (wrong) answer fails and the episode runs into a limit (3 planner calls, to keep
    the test short)."""
    ep0, ep1 = tc.episodes()[:2]
    with tc.one_thread():
        gen = make_generator(tc.fitted_model(), GenerationConfig(max_new_tokens=200, device="cpu"))
        limits = EpisodeLimits(max_planner_calls=3)
        recs = {r["episode_id"]: r for r in run_lockstep([ep0, ep1], ModelPolicy(gen), PROMPT, limits)}
    r0, r1 = recs[ep0["episode_id"]], recs[ep1["episode_id"]]
    assert r0["success"] and r0["planner_calls"] == 1 and r0["env_steps"] == len(ep0["expert_plan"])
    assert r0["response_tokens"] and r0["response_tokens"][0] < 200
    assert not r1["success"] and r1["end_reason"] in (
        "max_planner_calls",
        "max_invalid_actions",
        "max_env_steps",
        "empty_plan",
    )
    assert r1["invalid_actions"] >= 1


# ---- workers and resuming ---------------------------------------------------------------------------
def _strip(recs):
    return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in recs]


def test_process_workers_give_the_same_results_as_inline(tmp_path):
    eps = list(tc.episodes("valid_seen", 12))
    inline = run_episodes(eps, PolicySpec("random", seed=3), PROMPT, LIMITS, ResultStore(tmp_path / "a.jsonl", "x"))
    spread = run_episodes(
        eps,
        PolicySpec("random", seed=3),
        PROMPT,
        LIMITS,
        ResultStore(tmp_path / "b.jsonl", "x"),
        workers=2,
        episodes_per_task=3,
    )
    assert _strip(inline) == _strip(spread)


class Counting(ExpertPolicy):
    def __init__(self, fail_after: int | None = None):
        self.calls = 0
        self.fail_after = fail_after

    def plan(self, messages_batch, images=None, contexts=None):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        self.calls += len(messages_batch)
        return super().plan(messages_batch, images, contexts)


def test_resume_skips_finished_episodes(tmp_path):
    eps = list(tc.episodes("valid_seen", 6))
    path = tmp_path / "m" / "episodes.jsonl"
    # first run: killed during its third task (two tasks of 2 episodes finished and were written)
    with pytest.raises(KeyboardInterrupt):
        run_episodes(eps, Counting(fail_after=4), PROMPT, LIMITS, ResultStore(path, "fp1"), episodes_per_task=2)
    assert len(path.read_text().splitlines()) == 4
    # a crash mid-write leaves half a record: it is dropped and its episode runs again
    with path.open("a") as fh:
        fh.write('{"episode_id": "' + eps[4]["episode_id"] + '", "succ')
    again = Counting()
    recs = run_episodes(eps, again, PROMPT, LIMITS, ResultStore(path, "fp1"), episodes_per_task=2)
    assert again.calls == 2  # only episodes 5 and 6 were planned
    assert [r["episode_id"] for r in recs] == [e["episode_id"] for e in eps]
    assert all(r["success"] for r in recs)
    assert len(path.read_text().splitlines()) == 6 and path.read_text().endswith("\n")
    # a finished run resumes to nothing
    idle = Counting()
    run_episodes(eps, idle, PROMPT, LIMITS, ResultStore(path, "fp1"))
    assert idle.calls == 0
    # a changed episode under the same id runs again; other settings (fingerprint) discard everything
    changed = [dict(eps[0], instruction=eps[0]["instruction"] + " Quickly.")] + eps[1:]
    one = Counting()
    run_episodes(changed, one, PROMPT, LIMITS, ResultStore(path, "fp1"))
    assert one.calls == 1
    fresh = Counting()
    run_episodes(eps, fresh, PROMPT, LIMITS, ResultStore(path, "fp2"))
    assert fresh.calls == 6
    meta = json.loads(path.with_name("episodes.jsonl.meta.json").read_text())
    assert meta == {"fingerprint": "fp2"}


def test_duplicate_episode_ids_are_rejected(tmp_path):
    ep = _ep()
    with pytest.raises(ValueError, match="unique"):
        run_episodes([ep, ep], ExpertPolicy(), PROMPT, LIMITS, ResultStore(tmp_path / "d.jsonl", "d"))


@pytest.mark.slow
def test_ray_actors_give_the_same_results_as_inline(tmp_path):
    pytest.importorskip("ray")
    eps = list(tc.episodes("valid_seen", 8))
    inline = run_episodes(eps, PolicySpec("random", seed=5), PROMPT, LIMITS, ResultStore(tmp_path / "a.jsonl", "x"))
    ray = run_episodes(
        eps,
        PolicySpec("random", seed=5),
        PROMPT,
        LIMITS,
        ResultStore(tmp_path / "b.jsonl", "x"),
        workers=2,
        parallel="ray",
        episodes_per_task=2,
    )
    assert _strip(inline) == _strip(ray)


def test_image_observation_reaches_the_policy():
    ep = _ep()
    seen = {}

    class Looker(ExpertPolicy):
        def plan(self, messages_batch, images=None, contexts=None):
            seen["images"] = images
            seen["user"] = messages_batch[0][1]["content"]
            return super().plan(messages_batch, images, contexts)

    (rec,) = list(
        run_lockstep([ep], Looker(), PromptConfig(style="compact", action_list="extras", observation="image"), LIMITS)
    )
    assert rec["success"]
    assert "<image>" in seen["user"]
    assert seen["images"][0].size == (224, 224)


def test_vision_model_plays_from_rendered_frames():
    ep = _ep()
    prompt = PromptConfig(style="compact", action_list="extras", observation="image")
    with tc.one_thread():
        gen = make_generator(tc.vl_model(), GenerationConfig(max_new_tokens=8, device="cpu"))
        (rec,) = list(run_lockstep([ep], ModelPolicy(gen), prompt, EpisodeLimits(max_planner_calls=2)))
    # the untrained model writes no plan: two unreadable answers, each an invalid action, no env step
    assert (rec["planner_calls"], rec["parse_failures"], rec["env_steps"]) == (2, 2, 0)
    assert rec["response_tokens"] == [8, 8]
