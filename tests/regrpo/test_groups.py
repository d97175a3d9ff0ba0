"""regrpo/groups.py: the kind of each training state, and which way the success term pushes reflection there
(the mixed groups' success of reflecting vs non-reflecting answers; the all-success groups where the cost is the
only difference)."""

from __future__ import annotations

import json

import pytest

from embodied_rft.regrpo import groups, steps
from embodied_rft.train.grpo import rollout
from tests.helpers.grpo_fixtures import grpo_samples, sft_policy

OK = "Last action executed successfully."
BAD = "Last action is invalid. The object is not in view."


def test_the_kind_of_a_state_splits_executed_calls_into_clean_steps_and_silent_near_misses():
    assert steps.state_kind({"sample_id": "e:0", "history": []}) == "first"
    assert steps.state_kind({"sample_id": "e:2", "history": [{"feedback": OK}]}) == "clean"
    assert steps.state_kind({"sample_id": "e:2:recover", "history": [{"feedback": OK}]}) == "silent"
    assert steps.state_kind({"sample_id": "e:2:recover", "history": [{"feedback": BAD}]}) == "failed"
    assert steps.state_kind({"sample_id": "gen-1:call3", "history": [{"feedback": BAD}]}) == "failed"


def test_the_tally_reads_the_success_term_s_push_in_the_mixed_groups_only():
    t, f = True, False
    kinds = ["clean", "clean", "clean", "silent", "silent"]
    answers = [
        [(t, f), (t, t), (f, t), (f, t)],  # mixed: reflecting 1 of 2 succeed, plain 2 of 2
        [(t, t), (f, t), (f, t), (f, t)],  # all succeed, one reflects: the cost is the only difference
        [(f, f), (t, f), (f, f), (f, f)],  # all fail: no push
        [(t, t), (t, t), (f, f), (f, f)],  # mixed: reflecting 2 of 2, plain 0 of 2
        [(t, t), (t, t), (t, t), (t, t)],  # all succeed, all reflect: equal rewards but for the cost's length
    ]
    out = groups.tally(kinds, answers)
    assert list(out) == ["clean", "silent"]
    c, s = out["clean"], out["silent"]
    assert (c["states"], c["answers"], c["reflecting"], c["reflecting_share"]) == (3, 12, 4, 0.3333)
    assert c["bands"] == {"all_success": 1, "mixed": 1, "all_failure": 1}
    assert c["mixed_reflecting"] == [1, 2] and c["mixed_plain"] == [2, 2]
    assert (c["mixed_success_reflecting"], c["mixed_success_plain"]) == (0.5, 1.0)
    assert c["all_success_cost_only"] == 1
    assert (s["mixed_success_reflecting"], s["mixed_success_plain"]) == (1.0, 0.0)
    assert s["all_success_cost_only"] == 0 and s["reflecting_share"] == 0.75
    assert groups.tally(["failed"], [[(f, f)]])["failed"]["mixed_success_plain"] is None  # no mixed group


def test_pick_draws_at_most_n_states_per_kind_in_order():
    ss = [{"sample_id": f"e{i}:{i % 3}", "history": [{"feedback": OK}] * (i % 3)} for i in range(30)]
    got = groups.pick(ss, 4, 0)
    kinds = [steps.state_kind(s) for s in got]
    assert kinds.count("first") == 4 and kinds.count("clean") == 4 and len(got) == 8
    assert [ss.index(s) for s in got] == sorted(ss.index(s) for s in got)
    assert got == groups.pick(ss, 4, 0) and groups.pick(ss, 0, 0) == ss


def test_measure_marks_each_sampled_answer_s_reflection_and_executed_success(monkeypatch):
    policy, samples = sft_policy(), grpo_samples()
    silent = json.loads(json.dumps(samples[2]))
    silent["sample_id"] += ":recover"
    samples = [samples[0], samples[1], silent]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(policy)
    plain = '{"reasoning_and_reflection": "next step.", "executable_plan": [{"action_id": 1, "action_name": "a"}]}'
    refl = plain.replace("next step.", "ErrorType: GroundingDrift. Evidence: the Mug is not here. FixPlan: find it.")
    ids = {t: tok(t, add_special_tokens=False)["input_ids"] for t in (plain, refl)}
    seen = {}

    def fake(model, io, prompts, group_size, **kw):
        assert group_size == 4 and kw["temperature"] == 0.5 and kw["max_new_tokens"] == 50
        return rollout.Rollout([[ids[refl], ids[plain], ids[refl], ids[plain]] for _ in prompts])

    def executor(text, sample):  # reflecting answers succeed on the silent state only
        seen.setdefault(sample["sample_id"], []).append(text)
        ok = ("ErrorType" in text) == sample["sample_id"].endswith(":recover")
        return (1.0 if ok else 0.0), 0.0

    monkeypatch.setattr(rollout, "sample_groups", fake)
    res = groups.measure(policy, samples, executor, group_size=4, temperature=0.5, max_new_tokens=50, batch_size=2)
    k = res["kinds"]
    assert list(k) == ["first", "clean", "silent"]
    assert k["clean"]["reflecting"] == 2 and (
        k["clean"]["mixed_success_reflecting"],
        k["clean"]["mixed_success_plain"],
    ) == (0.0, 1.0)
    assert (k["silent"]["mixed_success_reflecting"], k["silent"]["mixed_success_plain"]) == (1.0, 0.0)
    assert all(len(v) == 4 for v in seen.values()) and len(seen) == 3
    assert res["model_digest"] == groups.model_digest(policy) and res["group_size"] == 4


def test_the_command_refuses_states_whose_episodes_it_was_not_given(tmp_path):
    samples = tmp_path / "train.jsonl"
    samples.write_text("".join(json.dumps(s) + "\n" for s in grpo_samples()))
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(json.dumps({"episode_id": "other"}) + "\n")

    with pytest.raises(SystemExit, match=r"train.jsonl: 1 episode\(s\) not in .*episodes.jsonl, e.g. 'ep0'"):
        groups.main(["--model", "unused", "--samples", str(samples), "--episodes", str(episodes), "--out", "x"])
