"""ReGRPO in the GRPO engine and in its studies: the regrpo reward drives a local run and its reflection tokens are
logged (mean reward = success rate − η · tokens / 100, exactly), the prompt options (RoT states, on-policy failure
states), the executed success, old fingerprints kept; and the ReGRPO studies (conf/study/regrpo*.yaml, their arms in
conf/study/arms/regrpo.yaml, ReGRPO's study adapter regrpo/study.py): each arm's recipe and what it starts from, the
table's pooled tests, sections and checks, merging tables of disjoint seeds, and the clause index."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from embodied_rft.core.stats import mcnemar_exact
from embodied_rft.data.jsonl import DataError
from embodied_rft.params import compose, section_configs
from embodied_rft.regrpo.execute import Executor
from embodied_rft.regrpo.study import count_pts, eta_share
from embodied_rft.reward import RewardConfig
from embodied_rft.study.dvcgen import Generator
from embodied_rft.study.layout import Pipeline, arm_dir, chain_overrides, outcome_file
from embodied_rft.study.registry import CHECKS, load_plugins
from embodied_rft.study.spec import Study, StudyError, load
from embodied_rft.study.table import RunContext, build, merge, read_runs, render
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.grpo.driver import config_identity, select_decomposed
from embodied_rft.train.grpo.onpolicy import select_states
from embodied_rft.world import Simulator, expert_plan
from tests.helpers.grpo import run, tiny_cfg
from tests.helpers.grpo_fixtures import make_samples, sft_policy
from tests.helpers.study_stages import arg as _arg
from tests.helpers.study_stages import do as _do
from tests.helpers.world_scenes import KITCHEN, obj, simple

STUDY_DIR = Path(__file__).resolve().parents[2] / "conf" / "study"


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


# --- the studies' tables (conf/study/regrpo*.yaml, ReGRPO's study adapter regrpo/study.py) ---

HELDOUT_ROT = "heldout_rot"
RATES = ("repeat_after_failure_rate", "recovered_next_call_rate", "recovered_next_call_correct_rate")


def _study(name: str, run: list[str] | None = None, modes: tuple[str, ...] | None = None) -> Study:
    """The study ``name`` (conf/study), its plugins loaded; with ``run``/``modes`` cut to those arms and modes and the
    comparisons they allow (its checks, sections and clauses as they are)."""
    s = load(name, STUDY_DIR)
    load_plugins(s.plugins, str(s.file))
    if run is None:
        return s
    modes = modes or s.modes

    def keep(o: str) -> bool:
        arm, mode = o.split("/")
        return arm in run and mode in modes

    cmps = tuple(c for c in s.comparisons if keep(c.a) and keep(c.b))
    return replace(s, run=tuple(run), modes=tuple(modes), comparisons=cmps)


def _build(root: Path, study: Study, records: dict[int, dict], seeds: list[int] | None = None) -> dict:
    """The table of ``records`` (``{seed: {(arm, mode): eval.details.json, (arm, "steps:<split>"): steps result,
    (arm, "heldout_rot"): near-miss result}}``), written where a study run leaves them under ``root``, as published
    (through JSON)."""
    for seed, recs in records.items():
        for (arm, what), rec in recs.items():
            metrics = root / arm_dir(study, arm, seed) / "metrics"
            if what.startswith("steps:"):
                f = metrics / f"steps-{what.removeprefix('steps:')}.json"
            elif what == HELDOUT_ROT:
                f = metrics / "heldout-rot-valid_unseen.json"
            else:  # the model of the arm's evaluation: sft or grpo
                rec = {"models": {study.arms[arm].evals[what].read: rec["models"]["sft"]}}
                f = root / outcome_file(study, arm, what, seed)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(rec))
    ctx = RunContext(study, sorted(seeds if seeds is not None else records), root)
    return json.loads(json.dumps(build(study, read_runs(ctx), ctx)))


def _holds(table: dict) -> dict[str, bool]:
    """The checks of a table that could be read (a check whose runs are missing has no verdict)."""
    return {k: c["holds"] for k, c in table["checks"].items() if c["holds"] is not None}


def _verdicts(study: Study, comparisons: dict | None = None, sections: dict | None = None) -> dict[str, bool]:
    """The study's checks on a table holding only ``comparisons`` and ``sections``."""
    t = {"comparisons": comparisons or {}, "sections": sections or {}, "outcomes": {}, "seeds": [0]}
    out = {}
    for ch in study.checks:
        holds, _ = CHECKS[ch.fn](t, **ch.args)
        if holds is not None:
            out[ch.id] = holds
    return out


def _cmp(gap: float = 0.0, recovered: float = 0.0, repeat: float = 0.0) -> dict:
    """A comparison with a pooled success gap and behaviour gaps (points) only."""
    return {
        "seeds": [0],
        "success_gap_per_seed": [gap],
        "success_gap_pooled": gap,
        "p_mcnemar_pooled": 1.0,
        "positive_seeds": int(gap > 0),
        "counts": {
            "recovered_next_call_rate": [0.5, 0.5 + recovered / 100],
            "repeat_after_failure_rate": [0.5, 0.5 + repeat / 100],
        },
    }


def _eta(pair: str, t0: float, t1: float) -> dict:
    return {"eta": {pair: {"splits": {"valid_unseen": {"tokens_per_call": [t0, t1], "seeds": [0]}}}}}


def _compose(study: Study, arm: str) -> dict:
    return compose("conf", chain_overrides(study, arm))


def test_the_table_pools_paired_outcomes_and_checks_the_issue_s_thresholds(tmp_path):
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
    study = _study("regrpo", ["plain", "rot", "shuffled", "regrpo", "regrpo_eta0"], ("free",))
    t = _build(tmp_path, study, records)
    c = t["comparisons"]["plain_to_rot_free"]
    assert (c["only_a"], c["only_b"], c["episodes"]) == (2, 4, 20)
    assert c["success_gap_pooled"] == 10.0 and c["p_mcnemar_pooled"] == mcnemar_exact(2, 4)
    assert {col: count_pts(c, col) for col in RATES} == {
        "repeat_after_failure_rate": -15.0,
        "recovered_next_call_rate": 15.0,
        "recovered_next_call_correct_rate": 15.0,
    }
    assert t["outcomes"]["rot/free"]["counts_pooled"]["repeat_after_failure_rate"] == 0.25
    assert t["comparisons"]["regrpo_eta0_to_regrpo_free"]["counts"]["reflection_tokens_after_success"] == [2.0, 0.2]
    assert t["outcomes"]["regrpo/free"]["per_seed"][0]["reflection"]["calls_after_success"] == 50
    # the η check reads the held-out steps of the report's split, pooled over seeds: 32 / 100 against 800 / 100
    assert t["sections"]["steps"]["valid_unseen"]["regrpo_eta0"]["pooled"] == {
        "after_success": {"calls": 100, "reflecting": 80, "reflection_tokens": 800, "tokens_per_call": 8.0,
                          "reflection_rate": 0.8},
        "first": {"calls": 20, "reflecting": 2, "reflection_tokens": 10, "tokens_per_call": 0.5,
                  "reflection_rate": 0.1},
    }  # fmt: skip
    g = t["sections"]["eta"]["regrpo"]["splits"]["valid_unseen"]
    assert (g["seeds"], g["tokens_per_call"], g["reflection_rate"]) == ([0, 1], [8.0, 0.32], [0.8, 0.04])
    assert g["counts"] == [
        {"calls": 100, "reflecting": 80, "reflection_tokens": 800},
        {"calls": 100, "reflecting": 4, "reflection_tokens": 32},
    ]
    assert t["sections"]["eta"]["regrpo"]["splits"]["valid_seen"]["tokens_per_call"] == [6.0, 6.0]
    assert _holds(t) == {
        "rot_recovered_next_call_+10pts": True,
        "rot_repeat_after_failure_-10pts": True,
        "rot_success_not_lower_than_3pts": True,
        "shuffled_does_not_reproduce_the_gain": True,
        "regrpo_eta_reflection_tokens_after_success_<=20pct_of_eta0": True,
    }
    # the check is the floor, at 20%: 8.0 -> 1.6 passes, 1.62 does not; η = 0 never reflecting: no verdict
    key = "regrpo_eta_reflection_tokens_after_success_<=20pct_of_eta0"
    assert _verdicts(study, sections=_eta("regrpo", 8.0, 1.6)) == {key: True}
    assert _verdicts(study, sections=_eta("regrpo", 8.0, 1.62)) == {key: False}
    assert _verdicts(study, sections=_eta("regrpo", 0.0, 0.0)) == {}
    assert eta_share({"sections": _eta("regrpo", 0.0, 0.0)}, "regrpo") == (
        None,
        {"tokens_per_call": [0.0, 0.0], "seeds": [0]},
    )
    md = render(t)
    assert "| valid_unseen | regrpo_eta0 | s0, s1 | 10.0 | 80.0 | 8.00 |" in md
    assert "regrpo vs regrpo_eta0 (steps, valid_unseen) over s0, s1: 0.32 vs 8.00 reflection tokens" in md
    assert "| plain_to_rot_free | rot/free vs plain/free | s0 +10.0 (1), s1 +10.0 (1) | 2 | 4 | +10.0 |" in md
    assert "| rot/free | s0 50.0, s1 50.0 | 50.0 ± 0.0 |" in md
    assert _verdicts(study) == {}  # no runs, no verdicts


def test_arms_run_on_different_seeds_are_named_by_seed_and_compared_where_both_ran(tmp_path):
    plain, rot = _outcomes()
    records = {
        0: {
            ("plain", "free"): _record(plain, (40, 100), (20, 100)),
            ("rot", "free"): _record(rot, (25, 100), (35, 100)),
        },
        2: {("rot", "free"): _record(plain, (25, 100), (35, 100))},
    }
    study = _study("regrpo_trigger", ["plain", "rot"], ("free",))
    t = _build(tmp_path / "a", study, records)
    assert [r["seed"] for r in t["outcomes"]["rot/free"]["per_seed"]] == [0, 2]
    assert t["outcomes"]["rot/free"]["success"]["mean"] == 45.0
    c = t["comparisons"]["plain_to_rot_free"]
    assert c["seeds"] == [0] and (c["only_a"], c["only_b"], c["episodes"]) == (1, 2, 10)
    md = render(t)
    assert "| rot/free | s0 50.0, s2 40.0 | 45.0 ± 7.1 |" in md
    assert "| plain/free | s0 40.0 | 40.0 ± 0.0 |" in md
    assert "| plain_to_rot_free | rot/free vs plain/free | s0 +10.0 (1) | 1 | 2 | +10.0 |" in md
    lopsided = {e: True for e in [f"f{i}" for i in range(30)]}
    never = dict.fromkeys(lopsided, False)
    far = {0: {("plain", "free"): _record(never, (1, 2), (1, 2)), ("rot", "free"): _record(lopsided, (1, 2), (1, 2))}}
    far_c = _build(tmp_path / "b", study, far)["comparisons"]["plain_to_rot_free"]
    assert far_c["p_mcnemar_pooled"] == 2 * 0.5**30  # kept whole: only the Markdown rounds
    mid = {e: i < 17 for i, e in enumerate(lopsided)}
    near = {1: {("plain", "free"): _record(never, (1, 2), (1, 2)), ("rot", "free"): _record(mid, (1, 2), (1, 2))}}
    near_c = _build(tmp_path / "c", study, near)["comparisons"]["plain_to_rot_free"]
    assert near_c["p_mcnemar_per_seed"] == [pytest.approx(2 * 0.5**17, abs=5e-5)]
    assert near_c["p_mcnemar_pooled"] == 2 * 0.5**17 and near_c["success_gap_per_seed"] == [56.67]


def test_an_arm_under_the_trigger_is_compared_with_a_baseline_answering_freely(tmp_path):
    plain, rot = _outcomes()
    records = {
        0: {
            ("plain", "free"): _record(plain, (40, 100), (20, 100)),
            ("rot", "free"): _record(plain, (38, 100), (22, 100)),
            ("rot", "regrpo"): _record(rot, (25, 100), (35, 100)),
        }
    }
    t = _build(tmp_path, _study("regrpo_trigger"), records)
    c = t["comparisons"]
    # each arm in its own mode: RoT-SFT with ReGRPO's inference trigger, the plain recovery policy as it answers
    cross = c["plain_free_to_rot_regrpo"]
    assert (cross["a"], cross["b"]) == ("plain/free", "rot/regrpo")
    assert (cross["only_a"], cross["only_b"], cross["success_gap_pooled"]) == (1, 2, 10.0)
    assert count_pts(cross, "repeat_after_failure_rate") == -15.0
    assert count_pts(cross, "recovered_next_call_rate") == 15.0
    assert count_pts(c["plain_to_rot_free"], "recovered_next_call_rate") == 2.0
    assert "plain_to_rot_regrpo" not in c  # plain was not evaluated under the trigger
    assert "| plain_free_to_rot_regrpo | rot/regrpo vs plain/free | s0 +10.0 (1) | 1 | 2 | +10.0 |" in render(t)


def test_the_rl_arms_differ_only_in_the_reward_and_each_override_composes():
    s = _study("regrpo")
    ov = {a: s.arms[a].overrides for a in s.arms}
    rl = ov["paper"]
    assert rl == ("grpo.onpolicy.failed_only=true", "grpo.kl_coef=0.04", "grpo.decomposed_prompts=recovery")
    assert ov["regrpo"] == (*rl, "reward=regrpo", "reward.regrpo.success=executed")
    assert ov["regrpo_eta0"] == (*ov["regrpo"], "reward.regrpo.eta=0.0")
    assert ov["regrpo_offline"] == (*rl, "reward=regrpo")
    assert {"plain", "rot", "shuffled", "paper", "regrpo", "regrpo_eta0"} <= set(s.run)  # the main table's arms
    rewards, prompts, uppers = {}, {}, {}
    arms = ("paper", "regrpo", "regrpo_eta0", "regrpo_offline", "paper_steps", "regrpo_steps", "regrpo_steps_eta0")
    for arm in (*arms, "regrpo_steps_kept"):
        assert s.arms[arm].start == "rot" and s.arms[arm].stages == ("grpo",)  # from the RoT-SFT policy
        cfg = _compose(s, arm)
        section_configs(cfg)  # every value builds its stage config
        assert cfg["grpo"]["onpolicy"]["failed_only"] is True and cfg["grpo"]["kl_coef"] == 0.04
        assert cfg["decompose"]["rot"]["enabled"] is True and cfg["decompose"]["recovery_per_episode"] == 2
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


def test_a_second_sft_cycle_starts_from_its_arm_s_model_on_its_samples():
    s = _study("regrpo", ["plain_x2", "rot_x2"], ("free",))
    st = Generator(s).stages()
    r = "runs/regrpo/seed-${item}"
    first = ["distill", "base", "sft"]
    assert [n for n in st if n.split("-")[0] in ("plain", "rot")] == [
        *(f"plain-{x}" for x in (*first, "heldout-rot")),
        *(f"rot-{x}" for x in (*first, "steps-valid_unseen", "steps-valid_seen", "heldout-rot")),
    ]  # the first cycles (their held-out measurements too); not evaluated: they are not run arms here
    assert [n for n in st if n.endswith("-sft") and "_x2" in n] == ["plain_x2-sft", "rot_x2-sft"]
    assert not any(n.startswith(("plain_x2-distill", "plain_x2-base", "rot_x2-distill", "rot_x2-base")) for n in st)
    for arm in ("plain", "rot"):
        x2, first = _do(st, f"{arm}_x2-sft"), _do(st, f"{arm}-sft")
        assert _arg(x2["cmd"], "paths.base_model") == f"{r}/{arm}/models/sft"  # the first cycle's model
        assert _arg(x2["cmd"], "paths.distilled") == _arg(first["cmd"], "paths.distilled")
        assert _arg(x2["cmd"], "paths.distilled") == f"{r}/{arm}/data/distilled/sft.jsonl"
        assert _arg(x2["cmd"], "paths.sft_model") == f"{r}/{arm}_x2/models/sft"
        assert f"{r}/{arm}/models/sft" in x2["deps"]  # retrained when its first cycle reran (DVC)
        assert s.arms[f"{arm}_x2"].overrides == ("sft.lr=1e-3",) and s.arms[f"{arm}_x2"].start == arm
    cfg = _compose(s, "shuffled_x2")
    section_configs(cfg)
    assert (
        cfg["sft"]["lr"] == 1e-3
        and cfg["sft"]["max_steps"] == 700
        and cfg["teacher"]["rot"]["reflection"] == "shuffled"
    )
    twice = {"plain_x2_to_rot_x2_free": _cmp(gap=-2.0, recovered=12.0, repeat=-9.0)}
    assert _verdicts(s, twice) == {
        "rot_x2_recovered_next_call_+10pts": True,
        "rot_x2_repeat_after_failure_-10pts": False,
        "rot_x2_success_not_lower_than_3pts": True,
    }


def test_the_x2_rl_arms_start_from_the_second_cycle_s_rot_policy_and_collect_their_own_states():
    s = _study("regrpo", ["regrpo_steps_kept_x2", "regrpo_steps_eta0_x2"], ("regrpo",))
    st = Generator(s).stages()
    r = "runs/regrpo/seed-${item}"
    order = list(st)
    assert order.index("rot-sft") < order.index("rot_x2-sft") < order.index("regrpo_steps_kept_x2-grpo")
    for arm in ("regrpo_steps_kept_x2", "regrpo_steps_eta0_x2"):
        grpo = _do(st, f"{arm}-grpo")
        assert _arg(grpo["cmd"], "paths.sft_model") == f"{r}/rot_x2/models/sft"  # the policy and the KL reference
        assert _arg(grpo["cmd"], "paths.grpo_model") == f"{r}/{arm}/models/grpo"
        assert f"{r}/rot_x2/models/sft" in grpo["deps"]  # retrained after its start reran (DVC)
        # its on-policy states are collected in its own work dir, never copied from another arm's
        assert _arg(grpo["cmd"], "paths.work_dir") == f"{r}/{arm}/.cache/work"
    # the held-out steps of both starts and both arms, each on valid_seen's and valid_unseen's samples
    steps = {_arg(_do(st, n)["cmd"], "--model") for n in st if "-steps-" in n}
    models = {f"{r}/rot/models/sft", f"{r}/rot_x2/models/sft", *(f"{r}/{a}/models/grpo" for a in s.run)}
    assert steps == models and sum("-steps-" in n for n in st) == 2 * len(models)
    # and both SFT policies answer the engine's held-out near-misses
    near = [_arg(_do(st, n)["cmd"], "--model") for n in st if n.endswith("-heldout-rot")]
    assert near == [f"{r}/rot/models/sft", f"{r}/rot_x2/models/sft"]
    # each arm composes as its first-cycle twin: kept keeps all-success groups, eta0 has no cost
    for arm, twin in (("regrpo_steps_kept_x2", "regrpo_steps_kept"), ("regrpo_steps_eta0_x2", "regrpo_steps_eta0")):
        assert s.arms[arm].overrides == s.arms[twin].overrides and s.arms[arm].start == "rot_x2"
    cfg = _compose(s, "regrpo_steps_kept_x2")
    assert cfg["grpo"]["filter"]["upper"] == 8 and cfg["reward"]["regrpo"]["eta"] == 0.1
    key = "regrpo_steps_kept_x2_eta_reflection_tokens_after_success_<=20pct_of_eta0"
    assert _verdicts(s, sections=_eta("regrpo_steps_kept_x2", 10.0, 1.9)) == {key: True}
    assert _verdicts(s, sections=_eta("regrpo_steps_kept_x2", 10.0, 2.1)) == {key: False}


def test_the_no_kl_x2_arms_differ_from_their_kl_twins_only_in_the_kl_and_start_from_rot_x2():
    s = _study("regrpo_nokl")
    st = Generator(s).stages()
    r = "runs/regrpo_nokl/seed-${item}"
    arms = ["regrpo_steps_kept_x2_nokl", "regrpo_steps_eta0_x2_nokl", "paper_steps_x2_nokl"]
    for arm in arms:
        grpo = _do(st, f"{arm}-grpo")["cmd"]
        assert _arg(grpo, "paths.grpo_model") == f"{r}/{arm}/models/grpo"
        assert _arg(grpo, "paths.sft_model") == f"{r}/rot_x2/models/sft"  # the policy; no reference
    twins = {
        "regrpo_steps_kept_x2_nokl": "regrpo_steps_kept_x2",
        "regrpo_steps_eta0_x2_nokl": "regrpo_steps_eta0_x2",
        "paper_steps_x2_nokl": "paper_steps_x2",
    }
    for arm, twin in twins.items():  # each against its KL twin
        cfg, ref = _compose(s, arm), _compose(s, twin)
        assert cfg["grpo"]["kl_coef"] == 0.0 and ref["grpo"]["kl_coef"] == 0.04
        cfg["grpo"]["kl_coef"] = ref["grpo"]["kl_coef"]
        assert cfg == ref  # nothing else differs
    # the paper reward on the kept arm's prompts: the reward is the only other difference (the filter's upper bound
    # only matters where a cost splits all-success groups)
    paper, kept = _compose(s, "paper_steps_x2_nokl"), _compose(s, arms[0])
    assert (paper["reward"]["variant"], kept["reward"]["variant"]) == ("paper", "regrpo")
    assert kept["grpo"]["filter"]["upper"] == kept["grpo"]["group_size"] and paper["grpo"]["filter"]["upper"] is None
    kept["grpo"]["filter"] = paper["grpo"]["filter"]
    assert {k: v for k, v in paper.items() if k != "reward"} == {k: v for k, v in kept.items() if k != "reward"}
    # the pair is an η check of its own, read on valid_unseen
    key = "regrpo_steps_kept_x2_nokl_eta_reflection_tokens_after_success_<=20pct_of_eta0"
    assert _verdicts(s, sections=_eta("regrpo_steps_kept_x2_nokl", 8, 2)) == {key: False}
    assert _verdicts(s, sections=_eta("regrpo_steps_kept_x2_nokl", 8, 1.6)) == {key: True}
    # and an RL check of its own against the paper reward from the same start, on the same prompts
    cid, key = (
        "paper_steps_x2_nokl_to_regrpo_steps_kept_x2_nokl_regrpo",
        "regrpo_steps_kept_x2_nokl_success_+3pts_or_recovery_+5pts",
    )
    assert _verdicts(s, {cid: _cmp(gap=0.1, recovered=4.9)}) == {key: False}
    assert _verdicts(s, {cid: _cmp(gap=0.1, recovered=5.0)}) == {key: True}
    assert _verdicts(s, {cid: _cmp(gap=3.0, recovered=-1.0)}) == {key: True}


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


def test_the_bare_arm_differs_from_plain_only_in_the_reflection_and_is_checked_as_a_second_baseline(tmp_path):
    s = _study("regrpo_bare")
    assert "bare" in s.run and "bare" not in _study("regrpo").run  # a study of its own, not the main table's
    cfgs = {arm: _compose(s, arm) for arm in ("plain", "bare")}
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
    t = _build(tmp_path, _study("regrpo_bare", ["bare", "rot", "shuffled"]), records)
    assert count_pts(t["comparisons"]["bare_to_rot_free"], "recovered_next_call_rate") == 12.0
    assert t["comparisons"]["bare_to_shuffled_free"]["success_gap_pooled"] == 0.0
    assert _holds(t) == {
        "rot_vs_bare_recovered_next_call_+10pts": True,
        "rot_vs_bare_repeat_after_failure_-10pts": True,
        "rot_vs_bare_success_not_lower_than_3pts": True,
        "shuffled_vs_bare_does_not_reproduce_the_gain": False,  # +6 is half of rot's +12: not under it
    }
    assert _verdicts(s, {"bare_to_rot_free": _cmp(gap=-3.1, recovered=9.9, repeat=-10.0)}) == {
        "rot_vs_bare_recovered_next_call_+10pts": False,
        "rot_vs_bare_repeat_after_failure_-10pts": True,
        "rot_vs_bare_success_not_lower_than_3pts": False,
    }


def test_every_sft_arm_answers_held_out_near_misses_and_the_on_policy_states_reach_the_data(tmp_path):
    s = replace(_study("regrpo_onpolicy"), overrides=("prompt.style=compact",))
    st = Generator(s).stages()
    r = "runs/regrpo_onpolicy/seed-${item}"
    states = f"{r}/regrpo_data_onpolicy/onpolicy/states.jsonl"
    collect = _do(st, "regrpo_data_onpolicy-onpolicy-states")
    assert _arg(collect["cmd"], "--model") == f"{r}/plain/models/sft"  # the plain arm's own failures
    assert "prompt.style=compact" in collect["cmd"].split()  # the prompt its decompose gets
    assert _arg(_do(st, "regrpo_data_onpolicy-decompose")["cmd"], "decompose.rot.onpolicy_states") == states
    for arm in ("plain_onpolicy", "rot_onpolicy", "shuffled_onpolicy"):  # every arm's samples hold them
        assert f"{r}/regrpo_data_onpolicy/data/decomposed/train.jsonl" in _do(st, f"{arm}-distill")["deps"]
    near = {n.removesuffix("-heldout-rot"): _do(st, n)["cmd"] for n in st if n.endswith("-heldout-rot")}
    assert set(near) == {"plain", "plain_onpolicy", "rot_onpolicy", "shuffled_onpolicy"}
    for arm, cmd in near.items():  # each arm's own sample file, the report's split, the prompt overrides passed on
        assert _arg(cmd, "--model") == f"{r}/{arm}/models/sft"
        assert _arg(cmd, "--samples") == f"{r}/{arm}/heldout-rot/valid_unseen.jsonl"
        assert _arg(cmd, "--rot-episodes") == f"{r}/regrpo_data/data/episodes/valid_unseen.jsonl"
        assert "prompt.style=compact" in cmd.split()
    plain, rot = _outcomes()
    records = {
        s: {("rot", "free"): _record(rot, (1, 2), (1, 2)), ("rot", HELDOUT_ROT): _plans(7, 1, 2 + s)} for s in (0, 1)
    }
    t = _build(tmp_path, _study("regrpo_trigger", ["rot"], ("free",)), records)
    assert list(t["outcomes"]) == ["rot/free"]  # the near-miss answers are no evaluation mode
    d = t["sections"]["heldout_rot"]["rot"]
    assert d["seeds"] == [0, 1] and d["pooled"]["after_failure"] == {
        "calls": 20,
        "first_correct": 14,
        "repeat": 2,
        "first_correct_rate": 0.7,
        "repeat_rate": 0.1,
    }
    assert "| rot | s0, s1 | 20 | 10.0 | 70.0 | 10 | 50.0 |" in render(t)


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
        ("rot", "steps:valid_unseen"): _steps({"after_success": (20, 5 + s, 50)}),
        ("rot", HELDOUT_ROT): _plans(7 - s, 1 + s, 2),
    }
    if s != 1:  # an arm run on some seeds only
        out[("shuffled", "free")] = _record(dict(plain), (38, 100), (22 + s, 100))
    return out


def test_tables_of_disjoint_seeds_merge_into_the_table_of_all_runs(tmp_path):
    study = _study("regrpo", ["plain", "rot", "shuffled"], ("free",))
    records = {s: _seed_records(s) for s in (0, 1, 2)}
    whole = _build(tmp_path, study, records)
    # as published: seeds 0-1 in one table, seed 2 in another
    parts = [_build(tmp_path, study, {s: records[s] for s in part}) for part in ((0, 1), (2,))]
    merged = json.loads(json.dumps(merge(parts, study)))
    assert merged == whole and render(merged) == render(whole)
    c = merged["comparisons"]["plain_to_rot_free"]
    assert c["seeds"] == [0, 1, 2] and c["episodes"] == 30
    assert (c["only_a"], c["only_b"]) == (3, 9)  # e0 lost on every seed; e3-e5, e4-e6, e5-e7 gained
    assert c["p_mcnemar_pooled"] == mcnemar_exact(3, 9)
    assert merged["comparisons"]["plain_to_shuffled_free"]["seeds"] == [0, 2]
    assert merged["outcomes"]["rot/free"]["counts_pooled"]["repeat_after_failure_rate"] == round(75 / 273, 4)
    assert merged["sections"]["heldout_rot"]["rot"]["pooled"]["after_failure"]["repeat"] == 1 + 2 + 3
    assert merged["sections"]["steps"]["valid_unseen"]["rot"]["pooled"]["after_success"]["reflecting"] == 18
    assert merged["sections"]["eta"]["regrpo"]["splits"]["valid_unseen"]["tokens_per_call"] == [
        round(1170 / 150, 4),
        round(51 / 150, 4),
    ]
    with pytest.raises(ValueError, match=r"seed 2 is already in part 1"):
        merge([*parts, parts[1]], study)
    with pytest.raises(ValueError, match="not a study table"):
        merge([parts[0], {"label": "seeds", "seeds": [5]}], study)


def test_a_study_pools_its_seeds_with_a_published_table_of_the_same_study_only(tmp_path, monkeypatch):
    from embodied_rft.study.__main__ import table

    monkeypatch.chdir(tmp_path)
    shutil.copytree(STUDY_DIR / "arms", tmp_path / "conf" / "study" / "arms")
    spec = (STUDY_DIR / "regrpo_trigger.yaml").read_text()
    study_file = tmp_path / "conf" / "study" / "pool.yaml"
    study_file.write_text(spec)
    records = {s: _seed_records(s) for s in (0, 1, 2)}
    whole = _build(Path("."), _study("regrpo_trigger"), records)  # under runs/regrpo_trigger/
    shutil.copytree("runs/regrpo_trigger", "runs/pool")
    early = table("pool", [0, 1])
    Path("results/pool/table.json").rename("results/pool/early.json")
    study_file.write_text(spec.replace("seeds: [0, 1, 2]", "seeds: [2]\nmerge: [results/pool/early.json]"))
    pooled = table("pool", None)
    assert early["seeds"] == [0, 1] and pooled["seeds"] == [0, 1, 2]
    assert pooled["comparisons"] == whole["comparisons"] and pooled["outcomes"] == whole["outcomes"]
    assert pooled["sections"] == whole["sections"] and pooled["checks"] == whole["checks"]
    # a table of another recipe (here: the silent twins in the data) is not pooled
    study_file.write_text(
        spec.replace(
            "seeds: [0, 1, 2]",
            "seeds: [2]\nmerge: [results/pool/early.json]\noverrides: [decompose.rot.silent_twins=true]",
        )
    )
    with pytest.raises(ValueError, match="its study differs in overrides"):
        table("pool", None)
    # nor one whose seeds this run has, before anything runs
    study_file.write_text(spec.replace("seeds: [0, 1, 2]", "seeds: [1, 2]\nmerge: [results/pool/early.json]"))
    with pytest.raises(StudyError, match=r"seeds \[1\] are already in this run's seeds"):
        Generator(
            load("pool"), Pipeline.read(STUDY_DIR.parents[1] / "dvc.yaml", STUDY_DIR.parent / "config.yaml")
        ).check_merge()


def test_the_clause_index_names_for_each_clause_the_tables_where_it_holds(tmp_path, monkeypatch):
    from embodied_rft.study import clauses

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
    tables = {
        "regrpo_trigger": _build(tmp_path, _study("regrpo_trigger", ["plain", "rot"], ("free",)), engine),
        "regrpo_bare": _build(tmp_path, _study("regrpo_bare", ["plain", "rot", "shuffled"]), own),
    }
    idx = clauses.index(tables, _study("regrpo").clauses)
    # engine data: recovered +4, repeat -2 (both fail); own failures: +15, -15, and the control's +2 is under half
    assert idx["sft_recovered"]["holds_in"] == ["regrpo_bare"]
    assert idx["sft_repeat"]["holds_in"] == ["regrpo_bare"]
    assert idx["sft_success"]["holds_in"] == ["regrpo_trigger", "regrpo_bare"]
    assert idx["sft_control"]["holds_in"] == ["regrpo_bare"]  # engine table: no shuffled arm, no check
    assert idx["rl_gain"]["rows"] == [] and idx["rl_gain"]["holds_in"] == []  # no RL arms in either table
    rows = {(r["table"], r["check"]): r for r in idx["sft_recovered"]["rows"]}
    assert rows[("regrpo_trigger", "rot_recovered_next_call_+10pts")]["figures"] == {
        "recovered_next_call_rate_pts": 4.0
    }
    assert rows[("regrpo_bare", "rot_recovered_next_call_+10pts")]["seeds"] == [0, 1]
    files = []
    for name, t in tables.items():
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(t))
    monkeypatch.chdir(STUDY_DIR.parents[1])  # the clause texts come from the tables' study files
    out, js = tmp_path / "clauses.md", tmp_path / "clauses.json"
    assert clauses.main([*map(str, files), "--out", str(out), "--json", str(js)]) == 0
    text = out.read_text()
    assert "| the shuffled control does not reproduce the recovered gain | regrpo_bare | " in text
    assert "Met in: sft_recovered: regrpo_bare; sft_repeat: regrpo_bare;" in text
    assert json.loads(js.read_text())["sft_success"]["holds_in"] == ["regrpo_trigger", "regrpo_bare"]
    (tmp_path / "bad.json").write_text('{"label": "seeds"}')
    assert clauses.main([str(tmp_path / "bad.json"), "--out", str(out)]) == 2
