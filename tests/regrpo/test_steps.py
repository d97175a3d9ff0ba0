"""Reflection on held-out per-step calls (regrpo/steps.py): the kind of each call, the tally, the counting through
a real tiny policy's decoding, and the reuse of a finished measurement for the same weights and samples."""

from __future__ import annotations

import json
import shutil

import pytest

from embodied_rft.core.integrity import record_intact, seal_folder
from embodied_rft.regrpo import steps
from embodied_rft.regrpo.text import reflection_tokens
from embodied_rft.train.grpo import heldout, rollout
from tests.helpers.grpo_fixtures import gold_response, grpo_samples, sft_policy, write_jsonl

OK = "Last action executed successfully."
BAD = "Last action is invalid. The object is not in view."


def _samples() -> list[dict]:
    """The fixture task's four steps (a first step, three after a success) and its last step after a failure."""
    ss = grpo_samples()
    failed = json.loads(json.dumps(ss[-1]))
    failed["sample_id"] += ":failed"
    failed["history"][-1]["feedback"] = BAD
    return [*ss, failed]


def test_the_kind_of_a_call_is_read_from_its_history():
    assert steps.call_kind({"history": []}) == "first"
    assert steps.call_kind({"history": [{"feedback": BAD}, {"feedback": OK}]}) == "after_success"
    assert steps.call_kind({"history": [{"feedback": OK}, {"feedback": BAD}]}) == "after_failure"
    assert [steps.call_kind(s) for s in _samples()] == ["first", *["after_success"] * 3, "after_failure"]
    with pytest.raises(ValueError, match="val.jsonl:3: field 'history' must be a list, got NoneType"):
        steps.call_kind({"history": None}, "val.jsonl:3")


def test_the_tally_counts_reflecting_answers_and_their_tokens_per_kind():
    kinds = ["after_success", "first", "after_success", "after_success"]
    t = steps.tally(kinds, [0, 0, 12, 6], [False] * 3 + [True], ["", "", "GroundingDrift", ""])
    assert list(t) == ["first", "after_success"]  # in the order of steps.KINDS
    assert t["first"] == {
        "calls": 1,
        "reflecting": 0,
        "reflection_tokens": 0,
        "truncated": 0,
        "named": {},
        "tokens_per_call": 0.0,
        "reflection_rate": 0.0,
    }
    assert t["after_success"] == {
        "calls": 3,
        "reflecting": 2,
        "reflection_tokens": 18,
        "truncated": 1,
        "named": {"GroundingDrift": 1, "none": 1},  # reflecting answers by the ErrorType they name
        "tokens_per_call": 6.0,
        "reflection_rate": 0.6667,
    }
    assert steps.named_type('{"reasoning_and_reflection": "ErrorType: ToolMismatch. Evidence: x"}') == "ToolMismatch"
    assert steps.named_type('{"reasoning_and_reflection": "Evidence: x"}') == ""
    with pytest.raises(ValueError, match="2 kinds, 1 token counts"):
        steps.tally(["first", "first"], [0], [False, False])


def _answer(sample: dict, reflect: bool) -> str:
    reasoning = (
        "ErrorType: GroundingDrift. Evidence: the Mug is not in hand. FixPlan: find a Mug again." if reflect else ""
    )
    return json.dumps({"reasoning_and_reflection": reasoning, **json.loads(gold_response(sample))})


def test_measure_counts_each_decoded_answer_s_reflection_in_the_policy_tokens(monkeypatch):
    policy, samples = sft_policy(), _samples()
    # the sampler's answers replaced by known texts, the rest real: the tiny policy's tokenizer and decoding
    reflect = [False, True, False, True, True]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(policy)
    texts = [_answer(s, r) for s, r in zip(samples, reflect, strict=True)]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    eos = tok.convert_tokens_to_ids(tok.eos_token)
    # every answer ends with the end token but the last (cut at the cap)
    ids = [[*x, eos] for x in ids[:-1]] + [ids[-1]]

    def fake(model, io, prompts, group_size, **kw):
        assert group_size == 1 and kw["temperature"] == 0.0
        return rollout.Rollout([[ids[p.index]] for p in prompts])

    monkeypatch.setattr(heldout, "sample_groups", fake)  # the greedy decoding steps.py shares with GRPO's check
    res = steps.measure(policy, samples, batch_size=2)
    n = [reflection_tokens(t, lambda s: len(tok(s, add_special_tokens=False)["input_ids"])) for t in texts]
    assert n[1] > 10 and n[0] == n[2] == 0  # the span's length in the policy's tokens
    k = res["kinds"]
    assert (k["first"]["calls"], k["first"]["reflecting"], k["first"]["reflection_tokens"]) == (1, 0, 0)
    assert k["after_success"]["calls"] == 3 and k["after_success"]["reflecting"] == 2
    assert k["after_success"]["reflection_tokens"] == n[1] + n[3]
    assert k["after_failure"] == {
        "calls": 1,
        "reflecting": 1,
        "reflection_tokens": n[4],
        "truncated": 1,
        "named": {"GroundingDrift": 1},
        "tokens_per_call": float(n[4]),
        "reflection_rate": 1.0,
    }
    assert res["samples"] == 5 and res["model_digest"] == steps.model_digest(policy)


def test_a_real_run_is_written_and_reused_for_the_same_weights_and_samples(tmp_path, monkeypatch):
    policy = tmp_path / "policy"
    shutil.copytree(sft_policy(), policy)
    data = write_jsonl(tmp_path / "val.jsonl", _samples())
    out = tmp_path / "steps.json"
    res = steps.run(policy, data, out, max_new_tokens=64)
    # the fixture policy answers with the gold plans it was fitted on: no reflection anywhere
    on_disk = json.loads(out.read_text())
    assert record_intact(on_disk) and {k: v for k, v in on_disk.items() if k != "sha"} == res
    assert {k: (d["calls"], d["reflection_tokens"]) for k, d in res["kinds"].items()} == {
        "first": (1, 0),
        "after_success": (3, 0),
        "after_failure": (1, 0),
    }
    calls = []
    monkeypatch.setattr(steps, "measure", lambda *a, **kw: calls.append(a) or {"kinds": {}, "model_digest": "x"})
    assert steps.run(policy, data, out) == res and calls == []  # same weights, same samples: reused
    out.write_text(json.dumps({**on_disk, "kinds": {**on_disk["kinds"], "first": {"calls": 9}}}))  # edited by hand
    steps.run(policy, data, out)
    assert len(calls) == 1  # not reused: measured again
    out.write_text(json.dumps(on_disk))  # the record as written: reused again
    assert steps.run(policy, data, out) == res and len(calls) == 1
    (policy / "model.safetensors").write_bytes((policy / "model.safetensors").read_bytes()[:-4] + b"\0\0\0\0")
    seal_folder(policy)  # retrained on purpose: the new weights are sealed as the trainer would
    steps.run(policy, data, out)
    assert len(calls) == 2  # other weights: measured again


def test_the_plan_tally_counts_right_first_actions_and_repeats_after_a_failure():
    samples = _samples()
    gold0 = [json.loads(s["label"])["gold"][0][0] for s in samples]
    failed = samples[-1]["history"][-1]["action_id"]
    firsts = [gold0[0], None, gold0[2], failed, failed]  # a wrong action after a success, a repeat after a failure
    kinds = [steps.call_kind(s) for s in samples]
    t = steps.plan_tally(kinds, samples, firsts)
    assert t["first"] == {"calls": 1, "first_correct": 1, "repeat": 0, "first_correct_rate": 1.0, "repeat_rate": 0.0}
    assert (t["after_success"]["first_correct"], t["after_success"]["repeat"]) == (int(failed == gold0[3]) + 1, 0)
    assert t["after_failure"] == {
        "calls": 1,
        "first_correct": int(failed == gold0[4]),
        "repeat": 1,
        "first_correct_rate": float(failed == gold0[4]),
        "repeat_rate": 1.0,
    }
    answer = gold_response(samples[0])
    assert steps.first_action(answer) == gold0[0] and steps.first_action("not json") is None


def test_held_out_near_misses_are_the_engine_s_on_episodes_it_never_trained_on(tmp_path):
    from embodied_rft.core.atomic import write_jsonl_atomic
    from embodied_rft.data.decompose import is_recovery
    from embodied_rft.regrpo.rot import verify
    from tests.helpers import tiny_checkpoints as tc

    eps = list(tc.episodes("valid_unseen", n=8))
    path = tmp_path / "eps.jsonl"
    write_jsonl_atomic(path, eps)
    got = steps.heldout_rot_samples(path, tc.PROMPT)
    by_id = {e["episode_id"]: e for e in eps}
    assert 8 <= len(got) <= 16 and all(is_recovery(s) and "rot" in s for s in got)
    assert all(steps.call_kind(s) in ("after_failure", "after_success") for s in got)
    assert all(verify(by_id[s["episode_id"]], s) == (True, True) for s in got)
    assert got == steps.heldout_rot_samples(path, tc.PROMPT)  # seeded: the same samples for every model
