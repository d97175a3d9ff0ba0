"""ReGRPO in the GRPO engine and in the experiment table: the regrpo reward drives a local run and its reflection
tokens are logged (mean reward = success rate − η · tokens / 100, exactly), the prompt options (RoT states, on-policy
failure states), the executed success, old fingerprints kept, and the comparison table's pooled tests and checks."""

from __future__ import annotations

import json

import pytest

from embodied_rft.data.jsonl import DataError
from embodied_rft.evaluate.aggregate import mcnemar_exact
from embodied_rft.regrpo.execute import Executor
from embodied_rft.regrpo.report import HELDOUT_ROT, checks, merge, render, summarise
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


def _steps(kinds: dict[str, tuple[int, int, int]]) -> dict:
    """A regrpo/steps.py result: per kind (calls, reflecting answers, reflection tokens)."""
    return {"kinds": {k: {"calls": c, "reflecting": r, "reflection_tokens": t} for k, (c, r, t) in kinds.items()}}


def _plans(first_correct: int, repeat: int, silent_correct: int) -> dict:
    """A regrpo/steps.py result on held-out near-misses: 10 after a rejected action, 5 after a silent one."""
    return {
        "plans": {
            "after_failure": {"calls": 10, "first_correct": first_correct, "repeat": repeat},
            "after_success": {"calls": 5, "first_correct": silent_correct, "repeat": 0},
        }
    }


def _outcomes() -> tuple[dict[str, bool], dict[str, bool]]:
    """Two arms' success on ten episodes: the first solves e0-e3, the second loses e0 and gains e4, e5."""
    eps = [f"e{i}" for i in range(10)]
    return {e: i < 4 for i, e in enumerate(eps)}, {e: 1 <= i < 6 for i, e in enumerate(eps)}


def test_the_table_pools_paired_outcomes_and_checks_the_issue_s_thresholds():
    plain, rot = _outcomes()
    shuf = dict(plain)
    records = {
        s: {
            ("plain", "free"): _record(plain, (40, 100), (20, 100)),
            ("rot", "free"): _record(rot, (25, 100), (35, 100)),
            ("shuffled", "free"): _record(shuf, (38, 100), (22, 100)),
            ("regrpo", "free"): _record(rot, (25, 100), (35, 100), refl=(10, 50)),
            ("regrpo_eta0", "free"): _record(rot, (25, 100), (35, 100), refl=(100, 50)),
            # held-out steps: η = 0.1 reflects on 2 of 50 after-success calls (7 + 9 tokens), η = 0 on 40 (400)
            ("regrpo", "steps:valid_unseen"): _steps({"after_success": (50, 2, 16), "first": (10, 0, 0)}),
            ("regrpo_eta0", "steps:valid_unseen"): _steps({"after_success": (50, 40, 400), "first": (10, 1, 5)}),
            ("regrpo", "steps:valid_seen"): _steps({"after_success": (50, 30, 300)}),
            ("regrpo_eta0", "steps:valid_seen"): _steps({"after_success": (50, 30, 300)}),
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
    # the η check reads the held-out steps of the report's split, pooled over seeds: 32 / 100 against 800 / 100
    assert summ["steps"]["valid_unseen"]["regrpo_eta0"]["pooled"] == {
        "after_success": {"calls": 100, "reflecting": 80, "reflection_tokens": 800, "tokens_per_call": 8.0,
                          "reflection_rate": 0.8},
        "first": {"calls": 20, "reflecting": 2, "reflection_tokens": 10, "tokens_per_call": 0.5,
                  "reflection_rate": 0.1},
    }  # fmt: skip
    assert summ["eta"]["regrpo vs regrpo_eta0 (steps, valid_unseen)"] == {
        "seeds": [0, 1],
        "tokens_per_call": [8.0, 0.32],
        "reflection_rate": [0.8, 0.04],
    }
    assert summ["eta"]["regrpo vs regrpo_eta0 (steps, valid_seen)"]["tokens_per_call"] == [6.0, 6.0]
    assert summ["checks"] == {
        "rot_recovered_next_call_+10pts": True,
        "rot_repeat_after_failure_-10pts": True,
        "rot_success_not_lower_than_3pts": True,
        "shuffled_does_not_reproduce_the_gain": True,
        "regrpo_eta_reflection_tokens_after_success_<=20pct_of_eta0": True,
    }
    # the check is the floor, at 20%: 8.0 -> 1.6 passes, 1.62 does not
    at = {"regrpo vs regrpo_eta0 (steps, valid_unseen)": {"tokens_per_call": [8.0, 1.6]}}
    assert checks({}, at) == {"regrpo_eta_reflection_tokens_after_success_<=20pct_of_eta0": True}
    at["regrpo vs regrpo_eta0 (steps, valid_unseen)"]["tokens_per_call"] = [8.0, 1.62]
    assert checks({}, at) == {"regrpo_eta_reflection_tokens_after_success_<=20pct_of_eta0": False}
    at["regrpo vs regrpo_eta0 (steps, valid_unseen)"]["tokens_per_call"] = [0.0, 0.0]  # η = 0 never reflects: no check
    assert checks({}, at) == {"regrpo_eta_reflection_tokens_after_success_<=20pct_of_eta0": None}
    table = render(summ)
    assert "| valid_unseen | regrpo_eta0 | s0, s1 | 10.0 | 80.0 | 8.00 |" in table
    assert "regrpo vs regrpo_eta0 (steps, valid_unseen) over s0, s1: 0.32 vs 8.00 reflection tokens" in table
    assert "| rot vs plain (free) | s0 +10.0 (1), s1 +10.0 (1) | 2 | 4 | +10.0 | 0.688 | -15.0 | +15.0 |" in table
    assert "| rot/free | s0 50.0, s1 50.0 | 50.0 |" in table
    assert checks({}) == {}


def test_arms_run_on_different_seeds_are_named_by_seed_and_compared_where_both_ran():
    plain, rot = _outcomes()
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


def test_an_arm_under_the_trigger_is_compared_with_a_baseline_answering_freely():
    plain, rot = _outcomes()
    records = {
        0: {
            ("plain", "free"): _record(plain, (40, 100), (20, 100)),
            ("rot", "free"): _record(plain, (38, 100), (22, 100)),
            ("rot", "regrpo"): _record(rot, (25, 100), (35, 100)),
        }
    }
    c = summarise(records)["comparisons"]
    # each arm in its own mode: RoT-SFT with ReGRPO's inference trigger, the plain recovery policy as it answers
    cross = c["rot (regrpo) vs plain (free)"]
    assert (cross["only_a"], cross["only_b"], cross["success_gap_pooled"]) == (1, 2, 10.0)
    assert cross["behaviour_gap_pts"]["repeat_after_failure_rate"] == -15.0
    assert cross["behaviour_gap_pts"]["recovered_next_call_rate"] == 15.0
    assert c["rot vs plain (free)"]["behaviour_gap_pts"]["recovered_next_call_rate"] == 2.0
    assert "rot vs plain (regrpo)" not in c  # plain was not evaluated under the trigger
    assert "| rot (regrpo) vs plain (free) | s0 +10.0 (1) | 1 | 2 | +10.0 |" in render(summarise(records))


def test_the_rl_arms_differ_only_in_the_reward_and_each_override_composes():
    from embodied_rft.params import compose, section_configs
    from embodied_rft.tools.regrpo_seeds import ARMS, DEFAULT_ARMS, RECIPE, RL

    assert ARMS["paper"] == RL
    assert ARMS["regrpo"] == [*RL, "reward=regrpo", "reward.regrpo.success=executed"]
    assert ARMS["regrpo_eta0"] == [*ARMS["regrpo"], "reward.regrpo.eta=0.0"]
    assert ARMS["regrpo_offline"] == [*RL, "reward=regrpo"]
    assert DEFAULT_ARMS == ["plain", "rot", "shuffled", "paper", "regrpo", "regrpo_eta0"]
    rewards, prompts, uppers = {}, {}, {}
    arms = ("paper", "regrpo", "regrpo_eta0", "regrpo_offline", "paper_steps", "regrpo_steps", "regrpo_steps_eta0")
    for arm in (*arms, "regrpo_steps_kept"):
        cfg = compose("conf", [*RECIPE, *ARMS[arm]])
        section_configs(cfg)  # every value builds its stage config
        assert cfg["grpo"]["onpolicy"]["failed_only"] is True and cfg["grpo"]["kl_coef"] == 0.04
        rewards[arm] = (cfg["reward"]["variant"], cfg["reward"]["regrpo"]["success"], cfg["reward"]["regrpo"]["eta"])
        prompts[arm] = cfg["grpo"]["decomposed_prompts"]
        uppers[arm] = cfg["grpo"]["filter"]["upper"]
    assert rewards.pop("regrpo_steps_kept") == rewards["regrpo_steps"]
    assert prompts.pop("regrpo_steps_kept") == "all"
    # the kept arm keeps all-success groups (upper = G); every other arm drops them (upper = null: G - 1)
    assert uppers == {**dict.fromkeys(arms), "regrpo_steps_kept": 8} and cfg["grpo"]["group_size"] == 8
    assert rewards == {
        "paper": ("paper", "offline", 0.1),
        "regrpo": ("regrpo", "executed", 0.1),
        "regrpo_eta0": ("regrpo", "executed", 0.0),
        "regrpo_offline": ("regrpo", "offline", 0.1),
        "paper_steps": ("paper", "offline", 0.1),
        "regrpo_steps": ("regrpo", "executed", 0.1),
        "regrpo_steps_eta0": ("regrpo", "executed", 0.0),
    }
    # the *_steps arms add the clean decomposed steps to the same prompts, and differ in nothing else
    assert prompts == {a: "all" if a.endswith("steps") or a.endswith("steps_eta0") else "recovery" for a in prompts}


def test_a_second_sft_cycle_starts_from_its_arm_s_model_on_its_samples(tmp_path, monkeypatch):
    from embodied_rft.params import compose, section_configs
    from embodied_rft.tools import regrpo_seeds as rs

    calls = []

    def fake(seed, stage, args, done, log_base, force):
        calls.append((stage, log_base.parent.name, dict(a.split("=", 1) for a in args), force))
        return stage == "sft" and log_base.parent.name == "rot"  # rot's first cycle "reran"; plain's was reused

    monkeypatch.setattr(rs, "_run_stage", fake)
    monkeypatch.setattr(rs, "_run", lambda *a, **k: None)
    rs.run_seed(4, tmp_path / "seed-4", "regrpo", ["plain_x2", "rot_x2"], [], [])
    sft = {arm: (args, force) for stage, arm, args, force in calls if stage == "sft"}
    assert [(s, a) for s, a, _, _ in calls if a in ("plain", "rot")] == [
        (stage, arm) for arm in ("plain", "rot") for stage in ("distill", "base", "sft")
    ]  # the first cycles, then only an `sft` stage per continued arm, no evaluation (no modes)
    assert [a for s, a, _, _ in calls if a.endswith("_x2")] == ["plain_x2", "rot_x2"]
    base = (tmp_path / "seed-4" / "regrpo").as_posix()
    for arm in ("plain", "rot"):
        args, force = sft[f"{arm}_x2"]
        assert args["paths.base_model"] == f"{base}/{arm}/models/sft"  # the first cycle's model
        assert args["paths.distilled"] == sft[arm][0]["paths.distilled"] == f"{base}/{arm}/distilled/sft.jsonl"
        assert args["paths.sft_model"] == f"{base}/{arm}_x2/models/sft"
        assert args["sft.lr"] == "1e-3" and args["teacher.rot.reflection"] == sft[arm][0]["teacher.rot.reflection"]
        assert force is (arm == "rot")  # retrained when its first cycle reran
    cfg = compose("conf", [*rs.RECIPE, *rs.ARMS["shuffled_x2"]])
    section_configs(cfg)
    assert (
        cfg["sft"]["lr"] == 1e-3
        and cfg["sft"]["max_steps"] == 700
        and cfg["teacher"]["rot"]["reflection"] == "shuffled"
    )
    gaps = {"recovered_next_call_rate": 12.0, "repeat_after_failure_rate": -9.0}
    twice = {"rot_x2 vs plain_x2 (free)": {"behaviour_gap_pts": gaps, "success_gap_pooled": -2.0}}
    assert checks(twice) == {
        "rot_x2_recovered_next_call_+10pts": True,
        "rot_x2_repeat_after_failure_-10pts": False,
        "rot_x2_success_not_lower_than_3pts": True,
    }


def test_the_x2_rl_arms_start_from_the_second_cycle_s_rot_policy_and_share_states_only_with_it(tmp_path, monkeypatch):
    from embodied_rft.params import compose
    from embodied_rft.tools import regrpo_seeds as rs

    calls, runs = [], []

    def fake(seed, stage, args, done, log_base, force):
        calls.append((stage, log_base.parent.name, dict(a.split("=", 1) for a in args), force))
        return stage == "sft" and log_base.parent.name == "rot_x2"  # the second cycle "reran"

    monkeypatch.setattr(rs, "_run_stage", fake)
    monkeypatch.setattr(rs, "_run", lambda cmd, log: runs.append(cmd))
    base = tmp_path / "seed-3" / "regrpo"
    # states collected from the first-cycle rot policy must not reach an arm that starts from rot_x2
    old = base / "regrpo_steps" / "work" / "grpo_states"
    old.mkdir(parents=True)
    for name in ("states.jsonl", "states.meta.json"):
        (old / name).write_text("{}\n")
    rs.run_seed(3, tmp_path / "seed-3", "regrpo", ["regrpo_steps_kept_x2", "regrpo_steps_eta0_x2"], ["regrpo"], [])
    order = [(s, a) for s, a, _, _ in calls if a not in ("logs",)]
    assert order[:4] == [("distill", "rot"), ("base", "rot"), ("sft", "rot"), ("sft", "rot_x2")]
    assert order[4][0] == "grpo"
    grpo = {a: (args, force) for s, a, args, force in calls if s == "grpo"}
    assert list(grpo) == ["regrpo_steps_kept_x2", "regrpo_steps_eta0_x2"]
    b = base.as_posix()
    for arm, (args, force) in grpo.items():
        assert args["paths.sft_model"] == f"{b}/rot_x2/models/sft"  # the policy and the KL reference
        assert args["paths.grpo_model"] == f"{b}/{arm}/models/grpo"
        assert force is True  # retrained after its start reran
        assert not (base / arm / "work" / "grpo_states").exists()
    # the first arm's states (collected from rot_x2) are shared with the second only
    (base / "regrpo_steps_kept_x2" / "work" / "grpo_states").mkdir(parents=True)
    for name in ("states.jsonl", "states.meta.json"):
        (base / "regrpo_steps_kept_x2" / "work" / "grpo_states" / name).write_text("x2\n")
    rs._share_states(base, "regrpo_steps_eta0_x2")
    shared = base / "regrpo_steps_eta0_x2" / "work" / "grpo_states" / "states.jsonl"
    assert shared.read_text() == "x2\n"
    # the held-out steps of both starts and both arms, each on valid_seen's and valid_unseen's samples
    models = {f"{b}/rot/models/sft", f"{b}/rot_x2/models/sft", *(f"{b}/{a}/models/grpo" for a in grpo)}
    steps = [c[c.index("--model") + 1] for c in runs if "--rot-episodes" not in c]
    assert set(steps) == models and len(steps) == 2 * len(models)
    # and both SFT policies answer the engine's held-out near-misses
    near = [c[c.index("--model") + 1] for c in runs if "--rot-episodes" in c]
    assert near == [f"{b}/rot/models/sft", f"{b}/rot_x2/models/sft"]
    # each arm composes as its first-cycle twin: kept keeps all-success groups, eta0 has no cost
    for arm, twin in (("regrpo_steps_kept_x2", "regrpo_steps_kept"), ("regrpo_steps_eta0_x2", "regrpo_steps_eta0")):
        assert rs.ARMS[arm] == rs.ARMS[twin]
    cfg = compose("conf", [*rs.RECIPE, *rs.ARMS["regrpo_steps_kept_x2"]])
    assert cfg["grpo"]["filter"]["upper"] == 8 and cfg["reward"]["regrpo"]["eta"] == 0.1
    eta = {"regrpo_steps_kept_x2 vs regrpo_steps_eta0_x2 (steps, valid_unseen)": {"tokens_per_call": [10.0, 1.9]}}
    assert checks({}, eta) == {"regrpo_steps_kept_x2_eta_reflection_tokens_after_success_<=20pct_of_eta0": True}
    eta["regrpo_steps_kept_x2 vs regrpo_steps_eta0_x2 (steps, valid_unseen)"]["tokens_per_call"] = [10.0, 2.1]
    assert checks({}, eta) == {"regrpo_steps_kept_x2_eta_reflection_tokens_after_success_<=20pct_of_eta0": False}


def test_the_no_kl_x2_arms_differ_from_their_kl_twins_only_in_the_kl_and_start_from_rot_x2(tmp_path, monkeypatch):
    from embodied_rft.params import compose
    from embodied_rft.tools import regrpo_seeds as rs

    calls = []
    monkeypatch.setattr(rs, "_run_stage", lambda seed, stage, args, *a: calls.append((stage, args)) or False)
    monkeypatch.setattr(rs, "_run", lambda cmd, log: None)
    arms = ["regrpo_steps_kept_x2_nokl", "regrpo_steps_eta0_x2_nokl", "paper_steps_x2_nokl"]
    rs.run_seed(5, tmp_path / "seed-5", "regrpo", arms, ["regrpo"], [])
    b = (tmp_path / "seed-5" / "regrpo").as_posix()
    grpo = [dict(a.split("=", 1) for a in args) for stage, args in calls if stage == "grpo"]
    assert [g["paths.grpo_model"] for g in grpo] == [f"{b}/{a}/models/grpo" for a in arms]
    assert all(g["paths.sft_model"] == f"{b}/rot_x2/models/sft" for g in grpo)  # the policy; no reference
    for arm in arms:  # each against its KL twin, the arm of the same name without `_nokl`
        cfg, ref = (compose("conf", [*rs.RECIPE, *rs.ARMS[a]]) for a in (arm, arm.removesuffix("_nokl")))
        assert cfg["grpo"]["kl_coef"] == 0.0 and ref["grpo"]["kl_coef"] == 0.04
        cfg["grpo"]["kl_coef"] = ref["grpo"]["kl_coef"]
        assert cfg == ref  # nothing else differs
    # the paper reward on the kept arm's prompts: the reward is the only other difference (the filter's upper bound
    # only matters where a cost splits all-success groups)
    paper, kept = (compose("conf", [*rs.RECIPE, *rs.ARMS[a]]) for a in ("paper_steps_x2_nokl", arms[0]))
    assert (paper["reward"]["variant"], kept["reward"]["variant"]) == ("paper", "regrpo")
    assert kept["grpo"]["filter"]["upper"] == kept["grpo"]["group_size"] and paper["grpo"]["filter"]["upper"] is None
    kept["grpo"]["filter"] = paper["grpo"]["filter"]
    assert {k: v for k, v in paper.items() if k != "reward"} == {k: v for k, v in kept.items() if k != "reward"}
    # the pair is an η check of its own, read on valid_unseen
    eta = {"regrpo_steps_kept_x2_nokl vs regrpo_steps_eta0_x2_nokl (steps, valid_unseen)": {"tokens_per_call": [8, 2]}}
    assert checks({}, eta) == {"regrpo_steps_kept_x2_nokl_eta_reflection_tokens_after_success_<=20pct_of_eta0": False}
    eta["regrpo_steps_kept_x2_nokl vs regrpo_steps_eta0_x2_nokl (steps, valid_unseen)"]["tokens_per_call"] = [8, 1.6]
    assert checks({}, eta) == {"regrpo_steps_kept_x2_nokl_eta_reflection_tokens_after_success_<=20pct_of_eta0": True}
    # and an RL check of its own against the paper reward from the same start, on the same prompts
    rl = {"success_gap_pooled": 0.1, "behaviour_gap_pts": {"recovered_next_call_rate": 4.9}}
    c = {"regrpo_steps_kept_x2_nokl vs paper_steps_x2_nokl (regrpo)": rl}
    assert checks(c) == {"regrpo_steps_kept_x2_nokl_success_+3pts_or_recovery_+5pts": False}
    rl["behaviour_gap_pts"]["recovered_next_call_rate"] = 5.0
    assert checks(c) == {"regrpo_steps_kept_x2_nokl_success_+3pts_or_recovery_+5pts": True}


def test_the_engine_logs_silent_near_miss_states_apart_from_clean_calls(monkeypatch):
    """A recovery sample whose last action executed (a RoT GroundingDrift state) is logged as silent, not clean;
    a decomposed step after an executed action is clean; a state after a failed action is neither."""
    from pathlib import Path

    from embodied_rft.train.grpo.engine import GRPOEngine
    from embodied_rft.train.grpo.log import RolloutStats
    from embodied_rft.train.grpo.ray_workers import LocalRollout
    from tests.helpers.grpo_fixtures import grpo_samples

    samples = grpo_samples()
    samples[1] = {**samples[1], "sample_id": samples[1]["sample_id"] + ":recover"}  # executed history: silent
    failed = dict(samples[2]["history"][-1], feedback="Last action is invalid. The object is not reachable.")
    samples[2] = {**samples[2], "sample_id": samples[2]["sample_id"] + ":recover"}
    samples[2]["history"] = [*samples[2]["history"][:-1], failed]
    cfg = tiny_cfg(group_size=4, rollout_batch_size=4)
    eng = GRPOEngine(cfg, sft_policy(), samples, [], Path("unused"), RewardConfig(variant="regrpo"), Path("."), "fp")
    eng.rollout = LocalRollout(eng.model, eng.io, eng.device, eng.sampler)
    scored, added = [], []
    score = eng.reward.score
    monkeypatch.setattr(eng.reward, "score", lambda t, label, s: scored.append(s["sample_id"]) or score(t, label, s))
    stats = RolloutStats(reflection=True)
    add = stats.add
    monkeypatch.setattr(stats, "add", lambda *a: added.append(a[4:]) or add(*a))
    assert eng.rollout_step(stats)
    kinds = dict(zip(scored, added, strict=True))
    assert kinds == {
        "ep0:0": (True, False),  # the first step: clean
        "ep0:1:recover": (False, True),  # a near-miss that executed: silent
        "ep0:2:recover": (False, False),  # after a failed action
        "ep0:3": (True, False),
    }
    row = stats.row()
    assert {"reflection_tokens_clean", "reflection_tokens_silent"} <= set(row)
    assert stats.clean == 8 and stats.silent == 4 and stats.n == 16


def test_rollout_stats_split_the_reflection_tokens_by_kind_of_call():
    from types import SimpleNamespace

    from embodied_rft.train.grpo.log import RolloutStats

    b = SimpleNamespace(total=1.0, structure=1.0, valid=1.0, match=1.0, accuracy=1.0, accuracy_full=1.0)
    stats = RolloutStats(reflection=True)
    for refl, clean, silent in ((0, True, False), (10, True, False), (30, False, True), (20, False, False)):
        stats.add(b, 5, False, refl, clean, silent)
    row = stats.row()
    assert row["reflection_tokens_clean"] == 5.0  # (0 + 10) / 2 clean calls
    assert row["reflection_tokens_silent"] == 30.0
    assert row["reflection_tokens"] == 15.0 and row["reflection_rate"] == 0.75


def test_the_bare_arm_differs_from_plain_only_in_the_reflection_and_is_checked_as_a_second_baseline():
    from embodied_rft.params import compose, section_configs
    from embodied_rft.tools.regrpo_seeds import ARMS, DEFAULT_ARMS, RECIPE

    assert "bare" not in DEFAULT_ARMS
    cfgs = {arm: compose("conf", [*RECIPE, *ARMS[arm]]) for arm in ("plain", "bare")}
    section_configs(cfgs["bare"])  # the value builds the teacher's config
    assert cfgs["bare"]["teacher"]["rot"]["reflection"] == "bare"
    cfgs["bare"]["teacher"]["rot"]["reflection"] = "none"
    assert cfgs["bare"] == cfgs["plain"]
    # the clauses against no reflection at all, named apart from those against the plain replanning reasoning
    bare, rot = _outcomes()
    records = {
        0: {
            ("bare", "free"): _record(bare, (45, 100), (20, 100)),
            ("rot", "free"): _record(rot, (30, 100), (32, 100)),
            ("shuffled", "free"): _record(bare, (40, 100), (26, 100)),
        }
    }
    summ = summarise(records)
    assert summ["comparisons"]["rot vs bare (free)"]["behaviour_gap_pts"]["recovered_next_call_rate"] == 12.0
    assert summ["comparisons"]["shuffled vs bare (free)"]["success_gap_pooled"] == 0.0
    assert summ["checks"] == {
        "rot_vs_bare_recovered_next_call_+10pts": True,
        "rot_vs_bare_repeat_after_failure_-10pts": True,
        "rot_vs_bare_success_not_lower_than_3pts": True,
        "shuffled_vs_bare_does_not_reproduce_the_gain": False,  # +6 is half of rot's +12: not under it
    }
    gaps = {"recovered_next_call_rate": 9.9, "repeat_after_failure_rate": -10.0}
    assert checks({"rot vs bare (free)": {"behaviour_gap_pts": gaps, "success_gap_pooled": -3.1}}) == {
        "rot_vs_bare_recovered_next_call_+10pts": False,
        "rot_vs_bare_repeat_after_failure_-10pts": True,
        "rot_vs_bare_success_not_lower_than_3pts": False,
    }


def test_every_sft_arm_answers_held_out_near_misses_and_on_policy_states_reach_every_stage(tmp_path, monkeypatch):
    from embodied_rft.tools import regrpo_seeds as rs

    stages, runs = [], []
    monkeypatch.setattr(rs, "_run_stage", lambda seed, stage, args, *a: stages.append((stage, args)) or False)
    monkeypatch.setattr(rs, "_run", lambda cmd, log: runs.append(cmd))
    monkeypatch.setattr(
        rs, "onpolicy_states", lambda model, train, base, n, extra: f"decompose.rot.onpolicy_states={n}"
    )
    root = tmp_path / "seed-0"
    rs.run_seed(0, root, "op", ["plain", "rot"], ["free"], ["prompt.style=compact"], ("regrpo/plain/models/sft", 30))
    assert all("decompose.rot.onpolicy_states=30" in args for stage, args in stages if stage != "prepare")
    near = [c for c in runs if "--rot-episodes" in c]
    assert [c[c.index("--model") + 1] for c in near] == [
        (root / f"op/{a}/models/sft").as_posix() for a in ("plain", "rot")
    ]
    for c in near:  # one sample file for every arm, the report's split, the prompt overrides passed on
        assert c[c.index("--samples") + 1] == (root / "op/heldout-rot/valid_unseen.jsonl").as_posix()
        assert c[c.index("--rot-episodes") + 1].endswith("data/episodes/valid_unseen.jsonl")
        assert c[-1] == "prompt.style=compact"
    plain, rot = _outcomes()
    records = {
        s: {("rot", "free"): _record(rot, (1, 2), (1, 2)), ("rot", rs.HELDOUT_ROT): _plans(7, 1, 2 + s)} for s in (0, 1)
    }
    summ = summarise(records)
    assert list(summ["arms"]) == ["rot/free"]  # the near-miss answers are no evaluation mode
    d = summ["heldout_rot"]["rot"]
    assert d["seeds"] == [0, 1] and d["pooled"]["after_failure"] == {
        "calls": 20,
        "first_correct": 14,
        "repeat": 2,
        "first_correct_rate": 0.7,
        "repeat_rate": 0.1,
    }
    assert "| rot | s0, s1 | 20 | 10.0 | 70.0 | 10 | 50.0 |" in render(summ)


def _seed_records(s: int) -> dict:
    """One seed's records, different per seed: paired outcomes, behaviour counts, held-out steps and near-misses."""
    eps = [f"e{i}" for i in range(10)]
    plain = {e: i < 3 + s for i, e in enumerate(eps)}
    rot = {e: 1 <= i < 6 + s for i, e in enumerate(eps)}
    out = {
        ("plain", "free"): _record(plain, (40 + s, 100), (20, 100 + s)),
        ("rot", "free"): _record(rot, (25, 90 + s), (35 + 2 * s, 100)),
        ("regrpo", "steps:valid_unseen"): _steps({"after_success": (50, 2 + s, 16 + s), "first": (10, s, s)}),
        ("regrpo_eta0", "steps:valid_unseen"): _steps({"after_success": (50, 40, 400 - 10 * s)}),
        ("rot", HELDOUT_ROT): _plans(7 - s, 1 + s, 2),
    }
    if s != 1:  # an arm run on some seeds only
        out[("shuffled", "free")] = _record(dict(plain), (38, 100), (22 + s, 100))
    return out


def test_published_summaries_of_disjoint_seeds_merge_into_the_summary_of_all_records():
    records = {s: _seed_records(s) for s in (0, 1, 2)}
    whole = summarise(records)
    # as published: through JSON (int keys become strings), seeds 0-1 in one file, seed 2 in another
    published = [json.loads(json.dumps(summarise({s: records[s] for s in part}))) for part in ((0, 1), (2,))]
    merged = merge(published)
    assert json.loads(json.dumps(merged)) == json.loads(json.dumps(whole))
    assert render(merged) == render(whole)
    c = merged["comparisons"]["rot vs plain (free)"]
    assert c["seeds"] == [0, 1, 2] and c["episodes"] == 30
    assert (c["only_a"], c["only_b"]) == (3, 9)  # e0 lost on every seed; e3-e5, e4-e6, e5-e7 gained
    assert c["p_mcnemar_pooled"] == round(mcnemar_exact(3, 9), 6)
    assert merged["comparisons"]["shuffled vs plain (free)"]["seeds"] == [0, 2]
    assert merged["arms"]["rot/free"]["repeat_after_failure_rate_pooled"] == round(75 / 273, 4)
    assert merged["heldout_rot"]["rot"]["pooled"]["after_failure"]["repeat"] == 1 + 2 + 3
    assert merged["eta"]["regrpo vs regrpo_eta0 (steps, valid_unseen)"]["tokens_per_call"] == [
        round(1170 / 150, 4),
        round(51 / 150, 4),
    ]
    with pytest.raises(ValueError, match=r"seeds \[2\] are already in an earlier part"):
        merge([*published, published[1]])
    with pytest.raises(ValueError, match="not a ReGRPO summary"):
        merge([published[0], {"label": "seeds", "seeds": [5]}])


def test_the_tool_pools_its_seeds_with_a_published_table_of_the_same_recipe_only(tmp_path, monkeypatch):
    from embodied_rft.tools import regrpo_seeds as rs

    records = {s: _seed_records(s) for s in (0, 1, 2)}
    monkeypatch.setattr(rs, "collect", lambda runs, *a: {s: records[s] for s in runs})
    early = tmp_path / "early.json"
    args = ["--arms", "plain", "rot", "shuffled", "--modes", "free", "--summary-only"]
    assert (
        rs.main(["--seeds", "0", "1", *args, "--out-metrics", str(early), "--out-report", str(tmp_path / "e.md")]) == 0
    )
    out = tmp_path / "all.json"
    later = [
        "--seeds",
        "2",
        *args,
        "--merge",
        str(early),
        "--out-metrics",
        str(out),
        "--out-report",
        str(tmp_path / "a.md"),
    ]
    assert rs.main(later) == 0
    pooled = json.loads(out.read_text())
    assert pooled["seeds"] == [0, 1, 2]
    assert pooled["comparisons"] == json.loads(json.dumps(summarise(records)["comparisons"]))
    assert pooled["recipe"] == json.loads(early.read_text())["recipe"]
    # another recipe (here: another policy's failures in the data) is not pooled
    with pytest.raises(SystemExit, match="early.json.*recipe"):
        rs.main([*later, "--onpolicy-from", "regrpo/rot/models/sft"])
    with pytest.raises(SystemExit, match="e.md: cannot read a published table: Expecting value: line 1"):
        rs.main([*later[:-6], "--merge", str(tmp_path / "e.md"), *later[-4:]])
    # a table published beside the main one (regrpo.json) refreshes the main table's clause index and report
    plain, rot = _outcomes()
    engine = {
        ("plain", "free"): _record(plain, (40, 100), (20, 100)),
        ("rot", "free"): _record(rot, (38, 100), (24, 100)),
    }
    (tmp_path / "regrpo.json").write_text(json.dumps(summarise({0: engine})))
    own = ["--seeds", "0", "1", "2", *args, "--out-metrics", str(tmp_path / "regrpo_own.json")]
    assert rs.main([*own, "--out-report", str(tmp_path / "own.md")]) == 0
    index = json.loads((tmp_path / "regrpo.json").read_text())["clauses"]
    assert index["sft_recovered"]["holds_in"] == ["regrpo_own.json"]  # 37.0% vs 19.8% recovered: +17.2 points
    assert [r["seeds"] for r in index["sft_recovered"]["rows"]] == [[0], [0, 1, 2]]
    assert "| regrpo_own.json | rot_recovered_next_call_+10pts | s0, s1, s2 |" in (tmp_path / "regrpo.md").read_text()


def test_the_clause_index_names_for_each_clause_the_tables_where_it_holds(tmp_path):
    from embodied_rft.tools import regrpo_clauses

    plain, rot = _outcomes()
    engine = {
        0: {
            ("plain", "free"): _record(plain, (40, 100), (20, 100)),
            ("rot", "free"): _record(rot, (38, 100), (24, 100)),
        }
    }
    own = {
        s: {
            ("plain", "free"): _record(plain, (40, 100), (20, 100)),
            ("rot", "free"): _record(rot, (25, 100), (35, 100)),
            ("shuffled", "free"): _record(dict(plain), (38, 100), (22, 100)),
        }
        for s in (0, 1)
    }
    metrics, reports = tmp_path / "metrics", tmp_path / "reports"
    metrics.mkdir()
    (metrics / "regrpo.json").write_text(json.dumps(summarise(engine)))
    (metrics / "regrpo_onpolicy.json").write_text(json.dumps(summarise(own)))
    main = ["--main", str(metrics / "regrpo.json"), "--report", str(reports / "regrpo.md")]
    assert regrpo_clauses.main(main) == 0
    index = json.loads((metrics / "regrpo.json").read_text())["clauses"]
    # engine data: recovered +4, repeat -2 (both fail); own failures: +15, -15, and the control's +2 is under half
    assert index["sft_recovered"]["holds_in"] == ["regrpo_onpolicy.json"]
    assert index["sft_repeat"]["holds_in"] == ["regrpo_onpolicy.json"]
    assert index["sft_success"]["holds_in"] == ["regrpo.json", "regrpo_onpolicy.json"]
    assert index["sft_control"]["holds_in"] == ["regrpo_onpolicy.json"]  # engine table: no shuffled arm, no check
    assert index["rl_gain"]["rows"] == [] and index["rl_gain"]["holds_in"] == []  # no RL arms in either table
    rows = {(r["table"], r["check"]): r for r in index["sft_recovered"]["rows"]}
    assert rows[("regrpo.json", "rot_recovered_next_call_+10pts")]["figures"] == {"recovered_pts": 4.0}
    assert rows[("regrpo_onpolicy.json", "rot_recovered_next_call_+10pts")]["seeds"] == [0, 1]
    text = (reports / "regrpo.md").read_text()
    assert "| the shuffled control does not reproduce the recovered gain | regrpo_onpolicy.json | " in text
    assert "Met in: sft_recovered: regrpo_onpolicy.json; sft_repeat: regrpo_onpolicy.json;" in text
    assert regrpo_clauses.main(main) == 0  # rerun on a main table that already carries an index: the same index
    assert json.loads((metrics / "regrpo.json").read_text())["clauses"] == index
    (metrics / "regrpo_bad.json").write_text('{"label": "seeds"}')
    with pytest.raises(SystemExit, match="regrpo_bad.json: not a table of tools/regrpo_seeds.py"):
        regrpo_clauses.main(main)


def test_the_published_tables_are_what_the_report_code_makes_of_them():
    from pathlib import Path

    from embodied_rft.regrpo.report import clauses

    root = Path(__file__).resolve().parents[2]
    tables = {f.name: json.loads(f.read_text()) for f in sorted((root / "metrics").glob("regrpo*.json"))}
    assert "regrpo.json" in tables and "regrpo_onpolicy.json" in tables
    for name, t in tables.items():  # each report is its table rendered, each check recomputed from its figures
        assert (root / "reports" / name.replace(".json", ".md")).read_text() == render(t), name
        assert checks(t["comparisons"], t["eta"]) == t["checks"], name
    # the main table's clause index is the one of every table now published (make regrpo-clauses after each table)
    assert json.loads(json.dumps(clauses(tables))) == tables["regrpo.json"]["clauses"], "run make regrpo-clauses"
