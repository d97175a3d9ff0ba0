"""On-policy GRPO prompts (train/grpo/onpolicy.py): the states a policy reaches, their gold plans, the mix with
decomposed prompts, reuse on resume, and the engine and stage taking them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from embodied_rft.config import ConfigError
from embodied_rft.data.response import format_response
from embodied_rft.evaluate import EpisodeLimits, ExpertPolicy, RandomPolicy
from embodied_rft.reward import score
from embodied_rft.train.grpo.onpolicy import (
    OnPolicyConfig,
    collect_states,
    load_or_collect,
    mix_prompts,
)
from embodied_rft.world import Simulator
from embodied_rft.world.planner import expert_plan
from tests.helpers import tiny_checkpoints as tc
from tests.helpers.grpo import run, tiny_cfg
from tests.helpers.grpo_fixtures import grpo_samples, sft_policy, write_jsonl

PROMPT = tc.PROMPT
LIMITS = EpisodeLimits()


class WrongFindFirst:
    """Answers a find of a type the scene lacks on the first call of every episode, the expert plan after."""

    def __init__(self) -> None:
        self.expert = ExpertPolicy()

    def plan(self, messages_batch, images=None, contexts=None):
        out = []
        for msgs, ctx in zip(messages_batch, contexts, strict=True):
            if ctx.call_index == 0:
                present = {o["type"] for o in ctx.episode["scene"]["objects"]}
                name = next(n for n in ctx.space.names if n.startswith("find a ") and n[7:] not in present)
                out.append(format_response([(ctx.space.id(name), name)]))
            else:
                out.extend(self.expert.plan([msgs], None, [ctx]))
        return out


def _gold(sample: dict) -> list[list]:
    return json.loads(sample["label"])["gold"]


def test_the_expert_yields_one_state_per_episode_whose_gold_is_the_expert_plan():
    eps = list(tc.episodes(n=6))
    samples, summary = collect_states(ExpertPolicy(), eps, PROMPT, LIMITS, batch_size=4)
    assert summary["episodes"] == 6 and summary["success"] == 6 and summary["states"] == 6
    assert summary["after_failed_action"] == 0 and summary["unplannable_states"] == 0
    for s, ep in zip(samples, eps, strict=True):  # the first round records the episodes in order
        assert s["sample_id"] == f"{ep['episode_id']}:call0" and s["history"] == [] and s["step"] == 0
        assert [n for _, n in _gold(s)] == expert_plan(ep)
        # the paper's reward gives the expert's answer full marks against this label
        assert score(format_response([tuple(p) for p in _gold(s)]), s["label"]).total == pytest.approx(1.5)


def test_a_failed_action_gives_a_second_state_with_its_feedback_and_the_plan_from_there():
    eps = list(tc.episodes(n=3))
    samples, summary = collect_states(WrongFindFirst(), eps, PROMPT, LIMITS, batch_size=3)
    assert summary["states"] == 6 and summary["after_failed_action"] == 3 and summary["success"] == 3
    by_ep = {}
    for s in samples:
        by_ep.setdefault(s["episode_id"], []).append(s)
    for ep in eps:
        first, second = by_ep[ep["episode_id"]]
        assert first["sample_id"].endswith(":call0") and second["sample_id"].endswith(":call1")
        assert not first["failed_last"] and second["failed_last"]
        (entry,) = second["history"]
        assert entry["action_name"].startswith("find a ") and "invalid" in entry["feedback"].lower()
        assert entry["feedback"] in second["prompt"][-1]["content"]  # the policy sees the failure
        # a failed find changes nothing: the plan from there is still the expert's
        assert [n for _, n in _gold(second)] == expert_plan(ep)


def test_every_state_of_a_random_policy_has_a_gold_plan_that_reaches_the_goal():
    eps = list(tc.episodes(n=4))
    samples, summary = collect_states(RandomPolicy(seed=3), eps, PROMPT, LIMITS, batch_size=4)
    assert summary["success"] == 0 and summary["states"] + summary["unplannable_states"] >= 4 * 5
    assert summary["after_failed_action"] > summary["states"] // 2
    by_id = {ep["episode_id"]: ep for ep in eps}
    for s in samples:
        sim = Simulator.from_episode(by_id[s["episode_id"]])
        for h in s["history"]:  # replay what the random policy did, failures included
            assert sim.step(h["action_id"]).success == ("successfully" in h["feedback"])
        assert sim.observe_text() == s["observation"]
        results = [sim.step(aid).success for aid, _ in _gold(s)]
        assert all(results) and sim.is_success(), s["sample_id"]


def test_worker_processes_collect_the_same_states_in_the_same_order():
    from embodied_rft.evaluate.policy import PolicySpec

    eps = list(tc.episodes(n=7))
    spec = PolicySpec("random", seed=5)
    one, s1 = collect_states(spec, eps, PROMPT, LIMITS, batch_size=2)
    two, s2 = collect_states(spec, eps, PROMPT, LIMITS, batch_size=2, workers=2)
    assert len(one) > 7 and [x["sample_id"] for x in two] == [x["sample_id"] for x in one]
    assert [x["label"] for x in two] == [x["label"] for x in one]
    assert {k: v for k, v in s2.items() if k != "time_s"} == {k: v for k, v in s1.items() if k != "time_s"}
    with pytest.raises(TypeError, match="policy spec"):
        collect_states(RandomPolicy(seed=5), eps, PROMPT, LIMITS, batch_size=2, workers=2)
    with pytest.raises(ConfigError, match="grpo.onpolicy.workers"):
        OnPolicyConfig(workers=0)


def test_states_come_in_lockstep_batch_order_however_many_episodes_are_in_play():
    from embodied_rft.evaluate.policy import PolicySpec

    eps = list(tc.episodes(n=7))
    index = {ep["episode_id"]: i for i, ep in enumerate(eps)}

    def key(sample: dict) -> tuple[int, int, int]:  # lockstep batches of 3: batch, planner call, episode
        ep, call = sample["sample_id"].split(":call")
        return index[ep] // 3, int(call), index[ep]

    spec = PolicySpec("random", seed=5)
    ref, summary = collect_states(spec, eps, PROMPT, LIMITS, batch_size=3)
    assert len(ref) > 10 and [key(s) for s in ref] == sorted(key(s) for s in ref)
    assert len({key(s)[1] for s in ref}) > 2  # episodes ran several planner calls: the order is not trivial
    for inflight, workers in ((1, 1), (5, 1), (7, 1), (2, 2)):
        got, s2 = collect_states(spec, eps, PROMPT, LIMITS, batch_size=3, workers=workers, inflight=inflight)
        assert [x["sample_id"] for x in got] == [x["sample_id"] for x in ref], (inflight, workers)
        assert [x["label"] for x in got] == [x["label"] for x in ref]
        assert {k: v for k, v in s2.items() if k != "time_s"} == {k: v for k, v in summary.items() if k != "time_s"}
    with pytest.raises(ConfigError, match="grpo.onpolicy.inflight"):
        OnPolicyConfig(inflight=-1)


def test_mix_keeps_every_state_and_adds_decomposed_prompts_to_the_fraction():
    states = [{"sample_id": f"s{i}"} for i in range(10)]
    dec = [{"sample_id": f"d{i}"} for i in range(100)]
    assert mix_prompts(dec, states, 1.0, 0) == states
    half = mix_prompts(dec, states, 0.5, 0)
    assert half[:10] == states and len(half) == 20 and {s["sample_id"][0] for s in half[10:]} == {"d"}
    assert mix_prompts(dec, states, 0.5, 0) == half  # fixed seed
    assert len(mix_prompts(dec[:3], states, 0.1, 0)) == 13  # fewer decomposed prompts than asked: all of them
    with pytest.raises(ValueError, match="no states"):
        mix_prompts(dec, [], 0.5, 0)


def test_states_are_collected_once_per_inputs(tmp_path):
    calls = []

    def collect():
        calls.append(1)
        return [{"sample_id": f"x:call{len(calls)}"}], {"states": 1}

    path = tmp_path / "states" / "states.jsonl"
    a = load_or_collect(path, "k1", collect)
    b = load_or_collect(path, "k1", collect)
    assert len(calls) == 1 and a == b == ([{"sample_id": "x:call1"}], {"states": 1})
    c = load_or_collect(path, "k2", collect)  # other inputs: collected again
    assert len(calls) == 2 and c[0] == [{"sample_id": "x:call2"}]


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="grpo.onpolicy.fraction"):
        OnPolicyConfig(fraction=0.0)
    with pytest.raises(ConfigError, match="grpo.onpolicy.episodes"):
        OnPolicyConfig(episodes=-1)


def test_the_engine_trains_on_states_and_reports_them(tmp_path):
    data = write_jsonl(tmp_path / "decomposed" / "train.jsonl", grpo_samples())
    states = [dict(s, sample_id=s["sample_id"] + ":call0") for s in grpo_samples()[:3]]
    cfg = tiny_cfg(onpolicy=OnPolicyConfig(episodes=3, fraction=0.5), max_updates=2)
    m = run(cfg, sft_policy(), data, tmp_path, states=(states, {"states": 3, "success": 0}))
    assert m["updates"] == 2
    assert m["onpolicy"] == {"states": 3, "success": 0, "prompts": 6, "fraction": 0.5}


def test_the_stage_collects_states_with_the_checkpoint_and_reuses_them(tmp_path):
    import embodied_rft.train.grpo.stage as stage
    from embodied_rft.train.grpo.config import GRPOConfig

    eps = list(tc.episodes(n=2))
    ep_dir = tmp_path / "episodes"
    write_jsonl(ep_dir / "train.jsonl", eps)
    paths = SimpleNamespace(episodes_dir=str(ep_dir), work_dir=str(tmp_path / "work"))
    prompt = {"style": "compact", "action_list": "extras"}
    ctx = SimpleNamespace(paths=paths, section=lambda name: prompt)
    gcfg = GRPOConfig(max_new_tokens=24, num_threads=1, onpolicy=OnPolicyConfig(episodes=2, batch_size=2))
    samples, summary = stage._onpolicy_states(ctx, gcfg, str(tc.text_model()))
    # an untrained model's answers are unreadable: every call is one invalid action, so each episode gives
    # max_invalid_actions states, all with the expert's plan (nothing was executed)
    assert summary["episodes"] == 2 and summary["states"] == 2 * LIMITS.max_invalid_actions == len(samples)
    assert summary["end_reasons"] == {"max_invalid_actions": 2}
    assert all(s["history"] == [] for s in samples)
    saved = tmp_path / "work" / "grpo_states" / "states.jsonl"
    assert saved.exists()
    again = stage._onpolicy_states(ctx, gcfg, str(tc.text_model()))
    assert again == (samples, summary)
    # the answers' cap comes from grpo.max_new_tokens when onpolicy.max_new_tokens is 0: changing it recollects
    meta = saved.with_suffix(".meta.json")
    key = json.loads(meta.read_text())["key"]
    stage._onpolicy_states(ctx, gcfg.replace(max_new_tokens=16), str(tc.text_model()))
    assert json.loads(meta.read_text())["key"] != key


def test_the_openrlhf_prompt_file_holds_the_states_and_the_decomposed_share(tmp_path):
    from embodied_rft.train.grpo.config import GRPOConfig
    from embodied_rft.train.openrlhf.cluster import write_job_prompts

    train = write_jsonl(tmp_path / "decomposed" / "train.jsonl", grpo_samples())
    states = [
        dict(s, sample_id=s["sample_id"] + ":call0", label=json.dumps({"gold": [[1, "x"]], "extra_actions": []}))
        for s in grpo_samples()[:2]
    ]
    gcfg = GRPOConfig(onpolicy=OnPolicyConfig(episodes=2, fraction=0.5))
    out = write_job_prompts(train, (states, {}), gcfg, tmp_path / "openrlhf" / "prompts.jsonl", None)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 4 and [r["label"] for r in recs[:2]] == [s["label"] for s in states]
    assert {r["label"] for r in recs[2:]} <= {s["label"] for s in grpo_samples()}
    assert all(isinstance(r["prompt"], list) for r in recs)
    # without states the file is the decomposed set as it was
    plain = write_job_prompts(train, None, gcfg, tmp_path / "plain" / "prompts.jsonl", None)
    assert len(plain.read_text().splitlines()) == len(grpo_samples())
