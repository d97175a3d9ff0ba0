"""ReGRPO's constructed group members (``grpo.anchors``, regrpo/anchors.py): the four answers of a RoT state, their
rewards, their tokens as the policy writes them, and the local engine training on groups that hold them."""

from __future__ import annotations

import json

import pytest
import torch

from embodied_rft.config import ConfigError, build
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.response import parse_response
from embodied_rft.regrpo.anchors import AnchorWriter
from embodied_rft.regrpo.text import parse_triple, reflection_tokens
from embodied_rft.reward import BoundReward, RewardConfig
from embodied_rft.schema import read_label
from embodied_rft.teacher.config import TeacherConfig
from embodied_rft.teacher.distill import run_distill
from embodied_rft.train.grpo.config import GRPOConfig
from tests.helpers.grpo import run, tiny_cfg
from tests.helpers.grpo_fixtures import sft_policy
from tests.helpers.rot_samples import rot_samples

KINDS = ("correct", "reflect", "failed", "corrupted")
TEACHER = {"scripted": {"verbosity": "brief"}}


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return rot_samples(tmp_path_factory.mktemp("anchors"), 16)


def _writer(seed: int = 0) -> AnchorWriter:
    t = build(TeacherConfig, TEACHER, "teacher")
    return AnchorWriter(KINDS, t.scripted, t.extensions["rot"].seed, seed)


def _plan(text: str) -> list[str]:
    return [a["action_name"] for a in parse_response(text)["executable_plan"]]


def test_the_four_members_are_the_sft_arms_answers_and_the_failures_and_are_scored_by_the_regrpo_reward(
    tmp_path, samples
):
    path, ss = samples
    rots = [s for s in ss if "rot" in s]
    assert len(rots) >= 10
    out = {}
    for arm, reflection in (("plain", "none"), ("rot", "rot")):
        cfg = build(TeacherConfig, {**TEACHER, "rot": {"reflection": reflection}}, "teacher")
        run_distill(cfg, path, tmp_path / arm / "sft.jsonl", tmp_path / f"cache-{arm}", tmp_path / arm / "m.json")
        recs = [json.loads(x) for x in (tmp_path / arm / "sft.jsonl").read_text().splitlines()]
        out[arm] = {r["sample_id"]: r["messages"][-1]["content"] for r in recs}
    reward = BoundReward(build(RewardConfig, {"variant": "regrpo"}, "reward"), None, None)
    w = _writer()
    for s in rots:
        members = dict(w.answers(s))
        assert list(members) == list(KINDS)
        # correct / reflect: byte for byte what the plain and the rot SFT arms train on
        assert members["correct"] == out["plain"][s["sample_id"]]
        assert members["reflect"] == out["rot"][s["sample_id"]]
        gold = [n for _, n in read_label(s["label"])[0]]
        a_fail = s["rot"]["failed_action"][1]
        assert _plan(members["correct"]) == _plan(members["reflect"]) == gold
        assert _plan(members["failed"]) == [a_fail, *gold]
        corrupt = _plan(members["corrupted"])
        assert corrupt[1:] == gold[1:] and corrupt[0] not in (gold[0], a_fail)
        assert (
            parse_triple(parse_response(members["reflect"])["reasoning_and_reflection"]).error_type
            == (s["rot"]["error_type"])
        )
        # R = success − 0.1 · reflection words / 100 (no tokenizer given: words)
        r = {k: reward.score(t, s["label"], s) for k, t in members.items()}
        words = reflection_tokens(members["reflect"])
        assert words > 5 and reflection_tokens(members["correct"]) == 0
        assert r["correct"].total == pytest.approx(1.0)
        assert r["reflect"].total == pytest.approx(1.0 - 0.1 * words / 100)
        assert r["failed"].total == pytest.approx(0.0) and r["corrupted"].total == pytest.approx(0.0)
        assert [r[k].accuracy_full for k in KINDS] == [1.0, 1.0, 0.0, 0.0]
    # the corrupted action is drawn per sample and seed: another seed draws another action somewhere
    other = _writer(seed=1)
    assert any(dict(other.answers(s))["corrupted"] != dict(w.answers(s))["corrupted"] for s in rots)


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"grpo.anchors: unknown member 'oops'"):
        build(GRPOConfig, {"anchors": ["correct", "oops"]}, "grpo")
    with pytest.raises(ConfigError, match="grpo.anchors: 4 constructed members leave no sampled response"):
        build(GRPOConfig, {"anchors": list(KINDS), "group_size": 4}, "grpo")
    with pytest.raises(ConfigError, match="grpo.anchors: constructed group members are the local engine's"):
        build(GRPOConfig, {"anchors": ["failed"], "backend": "openrlhf"}, "grpo")
    with pytest.raises(ValueError, match="need a RoT sample"):
        _writer().answers({"sample_id": "x", "label": '{"gold": []}'})


def test_the_engine_trains_on_groups_holding_the_constructed_members(tmp_path, samples):
    from embodied_rft.models import load_model
    from embodied_rft.train.grpo.rollout import PolicyIO, sequence_logprobs

    path, ss = samples
    rot_path = tmp_path / "rot.jsonl"
    rots = [s for s in ss if "rot" in s][:6]
    write_jsonl_atomic(rot_path, rots)
    policy = sft_policy()
    cfg = tiny_cfg(
        anchors=KINDS,
        group_size=6,
        max_new_tokens=24,
        max_prompt_tokens=192,
        filter=tiny_cfg().filter.__class__(buffer_size=2, updates_per_buffer=2),
        train_batch_size=12,
        micro_batch_size=6,
        lr=2e-3,
        max_updates=8,
        eval_max_samples=0,
    )
    model0, tok = load_model(policy)
    io = PolicyIO(tok, cfg.max_prompt_tokens)
    io.add_model_eos(model0)
    w = _writer()
    want = {i: [io.response_ids(s, t) for _, t in w.answers(s)] for i, s in enumerate(rots)}
    for i, s in enumerate(rots):  # the ids decode to the answers and end with the end-of-turn token
        assert [io.decode(r) for r in want[i]] == [t for _, t in w.answers(s)]
        assert all(r[-1] in io.eos_ids for r in want[i])
    seen: list = []
    m = run(
        cfg,
        policy,
        rot_path,
        tmp_path / "run",
        reward=build(RewardConfig, {"variant": "regrpo"}, "reward"),
        anchors=w,
        hooks={"on_update": lambda info: seen.append(info)},
    )
    assert m["updates"] == 8 and m["counters"]["anchored_groups"] == m["counters"]["prompts_sampled"] > 0
    first = seen[0]
    for g in first.groups:
        assert g.responses[-4:] == want[g.prompt.index]
        assert g.rewards[-4:][0] == pytest.approx(1.0) and g.rewards[-2:] == [0.0, 0.0]
        # the reflection's cost in the policy's tokens
        refl = reflection_tokens(
            io.decode(g.responses[-3]), lambda t: len(tok(t, add_special_tokens=False)["input_ids"])
        )
        assert refl > 5 and g.rewards[-3] == pytest.approx(1.0 - 0.1 * refl / 100)
        # π_old of the constructed members: the initial policy's forward (the first buffer was sampled before any update)
        ref = sequence_logprobs(model0, [(g.prompt, r) for r in g.responses[-4:]], io, cfg.temperature, 4, "cpu")
        for a, b in zip(g.old_logp[-4:], ref):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # training moved probability from the failing members to the succeeding ones on the trained prompts
    trained, _ = load_model(tmp_path / "run" / "out")
    prompts = {g.prompt.index: g.prompt for info in seen for g in info.groups}

    def margin(model) -> float:
        gaps = []
        for i, p in prompts.items():
            lp = [float(x.sum()) for x in sequence_logprobs(model, [(p, r) for r in want[i]], io, 1.0, 4, "cpu")]
            gaps.append((lp[0] + lp[1]) / 2 - (lp[2] + lp[3]) / 2)
        return sum(gaps) / len(gaps)

    assert margin(trained) > margin(model0) + 1.0
