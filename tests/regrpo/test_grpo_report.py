"""ReGRPO in the GRPO engine and in the experiment table: the regrpo reward drives a local run and its reflection
tokens are logged (mean reward = success rate − η · tokens / 100, exactly), the prompt options (RoT states, on-policy
failure states), the executed success, old fingerprints kept, and the comparison table's pooled tests and checks."""

from __future__ import annotations

import json

import pytest

from embodied_rft.data.jsonl import DataError
from embodied_rft.evaluate.aggregate import mcnemar_exact
from embodied_rft.regrpo.execute import Executor
from embodied_rft.regrpo.report import checks, render, summarise
from embodied_rft.reward import RewardConfig
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.grpo.driver import config_identity, select_decomposed
from embodied_rft.train.grpo.onpolicy import select_states
from embodied_rft.world import Simulator, expert_plan
from tests.helpers.grpo import run, tiny_cfg
from tests.helpers.grpo_fixtures import make_samples, sft_policy
from tests.helpers.world_scenes import KITCHEN, obj, simple


def test_a_local_run_with_the_regrpo_reward_logs_reflection_tokens(tmp_path):
    data = tmp_path / "s.jsonl"
    data.write_text("".join(json.dumps(s) + "\n" for s in make_samples()))
    cfg = tiny_cfg(max_updates=2)
    reward = RewardConfig(variant="regrpo")
    m = run(cfg, sft_policy(), data, tmp_path / "r", reward=reward)
    assert m["updates"] == 2
    for row in m["history"]:
        assert {"reflection_tokens", "reflection_rate", "reflection_tokens_clean"} <= set(row)
        assert row["reward_mean"] == pytest.approx(row["accuracy_full_rate"] - 0.1 * row["reflection_tokens"] / 100)
    paper = run(cfg, sft_policy(), data, tmp_path / "p")
    assert "reflection_tokens" not in paper["history"][0]  # the default run's rows are what they were


def test_prompt_options_and_fingerprints():
    ss = [{"sample_id": "e:0"}, {"sample_id": "e:1:recover"}, {"sample_id": "e:2"}]
    assert select_decomposed(ss, "all", "x") == ss and select_decomposed(ss, "recovery", "x") == [ss[1]]
    with pytest.raises(DataError, match="x: no recovery samples for grpo.decomposed_prompts=recovery"):
        select_decomposed(ss[:1], "recovery", "x")
    states = ([{"sample_id": "a", "failed_last": True}, {"sample_id": "b", "failed_last": False}], {"states": 2})
    assert select_states(states, False) is states
    kept, summary = select_states(states, True)
    assert [s["sample_id"] for s in kept] == ["a"] and summary == {"states": 2, "failed_only": True, "states_kept": 1}
    d = config_identity(GRPOConfig())
    assert "decomposed_prompts" not in d and "failed_only" not in d["onpolicy"]  # runs from before still resume
    assert config_identity(GRPOConfig(decomposed_prompts="recovery"))["decomposed_prompts"] == "recovery"


def test_executed_success_runs_the_plan_from_the_sample_s_state():
    ep = simple(
        "Fork", "Drawer", objects=[o for o in KITCHEN if o["id"] != "Fork"] + [obj("Fork", "Fork", "CounterTop")]
    )
    ep["expert_plan"] = expert_plan(ep)
    space = Simulator.from_episode(ep).actions
    hist = [
        {
            "action_id": space.id("find a Fork"),
            "action_name": "find a Fork",
            "feedback": "Last action executed successfully.",
        },
        {
            "action_id": space.id("find a Kettle"),
            "action_name": "find a Kettle",
            "feedback": "Last action is invalid. x",
        },
    ]
    sample = {"sample_id": "s", "episode_id": ep["episode_id"], "history": hist}
    ex = Executor({ep["episode_id"]: ep})
    plan = lambda names: json.dumps({"executable_plan": [{"action_id": space.id(n), "action_name": n} for n in names]})  # noqa: E731
    assert ex(plan(ep["expert_plan"][1:]), sample) == (1.0, 1.0)
    s, p = ex(plan(["pick up the Fork", "put down the object in hand"]), sample)  # the put fails: EB stops there
    assert s == 0.0 and 0.0 < p < 1.0
    s, p = ex("not json", sample)  # nothing executed: the progress of the sample's own state
    assert s == 0.0 and p == ex._oracle(ep["episode_id"]).progress(ex.state(sample))
    assert ex(plan(ep["expert_plan"]), {**sample, "episode_id": "unknown", "sample_id": "u"}) == (0.0, 0.0)


def _record(success: dict[str, bool], repeat: tuple[int, int], recovered: tuple[int, int], refl=None) -> dict:
    overall = {
        "episodes": len(success),
        "success_rate": round(100 * sum(success.values()) / len(success), 2),
        "failures_followed": repeat[1],
        "repeat_after_failure_rate": repeat[0] / repeat[1],
        "recovery_calls": recovered[1],
        "recovered_next_call_rate": recovered[0] / recovered[1],
        "recovered_next_call_correct_rate": recovered[0] / recovered[1],
    }
    if refl is not None:
        overall["reflection"] = {
            "calls": 100,
            "calls_after_success": refl[1],
            "spontaneous_tokens_after_success": refl[0],
        }
    return {"models": {"sft": {"interactive": {"overall": overall}, "episode_success": success}}}


def test_the_table_pools_paired_outcomes_and_checks_the_issue_s_thresholds():
    eps = [f"e{i}" for i in range(10)]
    plain = {e: i < 4 for i, e in enumerate(eps)}  # solves e0-e3
    rot = {e: 1 <= i < 6 for i, e in enumerate(eps)}  # loses e0, gains e4 e5
    shuf = dict(plain)
    records = {
        s: {
            ("plain", "free"): _record(plain, (40, 100), (20, 100)),
            ("rot", "free"): _record(rot, (25, 100), (35, 100)),
            ("shuffled", "free"): _record(shuf, (38, 100), (22, 100)),
            ("regrpo", "free"): _record(rot, (25, 100), (35, 100), refl=(10, 50)),
            ("regrpo_eta0", "free"): _record(rot, (25, 100), (35, 100), refl=(100, 50)),
        }
        for s in (0, 1)
    }
    summ = summarise(records)
    c = summ["comparisons"]["rot vs plain (free)"]
    assert (c["only_a"], c["only_b"], c["episodes"]) == (2, 4, 20)
    assert c["success_gap_pooled"] == 10.0 and c["p_mcnemar_pooled"] == round(mcnemar_exact(2, 4), 6)
    assert c["behaviour_gap_pts"] == {
        "repeat_after_failure_rate": -15.0,
        "recovered_next_call_rate": 15.0,
        "recovered_next_call_correct_rate": 15.0,
    }
    assert summ["arms"]["rot/free"]["repeat_after_failure_rate_pooled"] == 0.25
    assert summ["comparisons"]["regrpo vs regrpo_eta0 (free)"]["reflection_tokens_after_success"] == [2.0, 0.2]
    assert summ["checks"] == {
        "rot_recovered_next_call_+10pts": True,
        "rot_repeat_after_failure_-10pts": True,
        "rot_success_not_lower_than_3pts": True,
        "shuffled_does_not_reproduce_the_gain": True,
        "eta_reflection_tokens_after_success_<=20pct_of_eta0": True,
    }
    table = render(summ)
    assert "| rot vs plain (free) | s0 +10.0 (1), s1 +10.0 (1) | 2 | 4 | +10.0 | 0.688 | -15.0 | +15.0 |" in table
    assert "| rot/free | s0 50.0, s1 50.0 | 50.0 |" in table
    assert checks({}) == {}


def test_arms_run_on_different_seeds_are_named_by_seed_and_compared_where_both_ran():
    eps = [f"e{i}" for i in range(10)]
    plain = {e: i < 4 for i, e in enumerate(eps)}
    rot = {e: 1 <= i < 6 for i, e in enumerate(eps)}
    records = {
        0: {
            ("plain", "free"): _record(plain, (40, 100), (20, 100)),
            ("rot", "free"): _record(rot, (25, 100), (35, 100)),
        },
        2: {("rot", "free"): _record(plain, (25, 100), (35, 100))},
    }
    summ = summarise(records)
    assert [r["seed"] for r in summ["arms"]["rot/free"]["per_seed"]] == [0, 2]
    assert summ["arms"]["rot/free"]["success_mean"] == 45.0
    c = summ["comparisons"]["rot vs plain (free)"]
    assert c["seeds"] == [0] and (c["only_a"], c["only_b"], c["episodes"]) == (1, 2, 10)
    table = render(summ)
    assert "| rot/free | s0 50.0, s2 40.0 | 45.0 |" in table
    assert "| plain/free | s0 40.0 | 40.0 |" in table
    assert "| rot vs plain (free) | s0 +10.0 (1) | 1 | 2 | +10.0 |" in table
    lopsided = {e: True for e in [f"f{i}" for i in range(30)]}
    never = dict.fromkeys(lopsided, False)
    far = summarise(
        {0: {("plain", "free"): _record(never, (1, 2), (1, 2)), ("rot", "free"): _record(lopsided, (1, 2), (1, 2))}}
    )
    assert far["comparisons"]["rot vs plain (free)"]["p_mcnemar_pooled"] == 0.0  # 2 * 0.5**30, rounded
    # per seed at the same precision: 2 * 0.5**17 = 1.5e-5 is printed, not "<1e-6" (nor 0.0 at 4 decimals)
    mid = {e: i < 17 for i, e in enumerate(lopsided)}
    near = summarise(
        {1: {("plain", "free"): _record(never, (1, 2), (1, 2)), ("rot", "free"): _record(mid, (1, 2), (1, 2))}}
    )
    assert near["comparisons"]["rot vs plain (free)"]["p_mcnemar_per_seed"] == [round(2 * 0.5**17, 6)]
    assert "| s1 +56.7 (1.5e-05) |" in render(near)
    assert "| rot vs plain (free) | s0 +100.0 (<1e-6) | 0 | 30 | +100.0 | <1e-6 |" in render(far)


def test_the_rl_arms_differ_only_in_the_reward_and_each_override_composes():
    from embodied_rft.params import compose, section_configs
    from embodied_rft.tools.regrpo_seeds import ARMS, DEFAULT_ARMS, RECIPE, RL

    assert ARMS["paper"] == RL
    assert ARMS["regrpo"] == [*RL, "reward=regrpo", "reward.regrpo.success=executed"]
    assert ARMS["regrpo_eta0"] == [*ARMS["regrpo"], "reward.regrpo.eta=0.0"]
    assert ARMS["regrpo_offline"] == [*RL, "reward=regrpo"]
    assert {"regrpo_offline", "regrpo_anchored"}.isdisjoint(DEFAULT_ARMS)
    rewards = {}
    for arm in ("paper", "regrpo", "regrpo_eta0", "regrpo_offline"):
        cfg = compose("conf", [*RECIPE, *ARMS[arm]])
        section_configs(cfg)  # every value builds its stage config
        assert cfg["grpo"]["onpolicy"]["failed_only"] is True and cfg["grpo"]["kl_coef"] == 0.04
        rewards[arm] = (cfg["reward"]["variant"], cfg["reward"]["regrpo"]["success"], cfg["reward"]["regrpo"]["eta"])
    assert rewards == {
        "paper": ("paper", "offline", 0.1),
        "regrpo": ("regrpo", "executed", 0.1),
        "regrpo_eta0": ("regrpo", "executed", 0.0),
        "regrpo_offline": ("regrpo", "offline", 0.1),
    }
