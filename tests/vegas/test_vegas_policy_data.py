"""On-policy verification records (vegas/policy_data.py, ``verifier.policy_data``): the policy's own candidates on
training episodes, each labelled by the oracle in the state it was proposed in (checked by replaying the history
independently), balanced, resumable, held-out episodes left out, and added to the verifier's training file."""

from __future__ import annotations

import json

import pytest

from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.generation import GenerationConfig
from embodied_rft.teacher.config import ScriptedConfig
from embodied_rft.teacher.scripted import ScriptedTeacher
from embodied_rft.train.sft.config import SFTConfig
from embodied_rft.vegas.config import SynthConfig
from embodied_rft.vegas.policy_data import balanced, policy_records
from embodied_rft.vegas.synth import run_synth
from embodied_rft.vegas.text import parse_verdict
from embodied_rft.vegas.verifier import PolicySource, read_records, run_verifier
from embodied_rft.vegas.verifier_config import PolicyDataConfig, VerifierConfig
from embodied_rft.world.oracle import WorldOracle
from tests.helpers import tiny_checkpoints as tc

GEN = GenerationConfig(backend="fast", max_new_tokens=300, batch_size=8, device="cpu")
# the fitted model answers episode 0's plan (its first actions exist in episode 0's scene), so 4 of the 5 episodes
# are played: episode 0 among them
CFG = PolicyDataConfig(episodes=4, n=3, temperature=0.7, balance=False, episodes_per_task=4, generation=GEN)


@pytest.fixture(scope="module")
def episodes_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pd") / "train.jsonl"
    write_jsonl_atomic(path, [dict(e) for e in tc.episodes("valid_seen", 12)[:5]])
    return path


def test_every_record_carries_the_oracles_label_in_the_state_it_was_proposed_in(episodes_file, tmp_path):
    eps = [json.loads(x) for x in episodes_file.read_text().splitlines()]
    exclude = {eps[4]["episode_id"]}
    with tc.one_thread():
        recs, counts = policy_records(CFG, tc.fitted_model(), episodes_file, exclude, tc.PROMPT, tmp_path)
    assert counts["episodes"] == 4 and counts["candidates"] == len(recs) > 0
    assert exclude.isdisjoint(r["episode_id"] for r in recs)
    by_id = {e["episode_id"]: e for e in eps}
    for r in recs:
        # replay the prompt's history in a fresh simulator: the feedback must match, then judge the candidate there
        oracle = WorldOracle(by_id[r["episode_id"]])
        sim = oracle.initial.copy()
        for h in r["history"]:
            assert sim.step(h["action_id"]).feedback == h["feedback"]
        j = oracle.judge(sim, r["candidate"]["action_id"])
        assert (r["label"], r["reason"], r["executes"]) == (j.label, j.reason, j.executes)
        assert r["verdict"] == ("yes" if j.label == "correct" else "no")
        assert parse_verdict(r["messages"][-1]["content"]) == r["verdict"] and r["source"] == "policy"
        assert r["candidate"]["action_name"] in r["messages"][0]["content"]
    assert counts["positives"] == sum(r["verdict"] == "yes" for r in recs)
    # a second call finds every episode in the work folder: nothing is generated again, the same records come back
    import embodied_rft.generation.fast as fast

    def boom(*a, **k):
        raise AssertionError("generated although every episode was stored")

    orig = fast.FastGenerator._generate_batch
    fast.FastGenerator._generate_batch = boom
    try:
        again, _ = policy_records(CFG, tc.fitted_model(), episodes_file, exclude, tc.PROMPT, tmp_path)
    finally:
        fast.FastGenerator._generate_batch = orig
    assert again == recs
    # synth.find_sentence=relevance words the stored candidates' finds by their role, from the same stored play
    fast.FastGenerator._generate_batch = boom
    try:
        rel, _ = policy_records(
            CFG, tc.fitted_model(), episodes_file, exclude, tc.PROMPT, tmp_path, find_sentence="relevance"
        )
    finally:
        fast.FastGenerator._generate_batch = orig
    assert [r["record_id"] for r in rel] == [r["record_id"] for r in recs]
    for a, b in zip(recs, rel, strict=True):
        same = not a["candidate"]["action_name"].startswith("find a ")
        assert (a["messages"] == b["messages"]) == same and a["verdict"] == b["verdict"]


def test_balance_keeps_as_many_positives_as_negatives_in_order():
    recs = [{"verdict": "yes" if v == "y" else "no", "i": i} for i, v in enumerate("yyynynnyyy")]
    out = balanced(recs, seed=0)
    assert sum(r["verdict"] == "yes" for r in out) == sum(r["verdict"] == "no" for r in out) == 3
    assert [r["i"] for r in out] == sorted(r["i"] for r in out)
    assert balanced(recs, seed=0) == out


def test_the_verifier_trains_on_synthesised_plus_policy_records(episodes_file, tmp_path):
    run_synth(SynthConfig(val_fraction=0.3, reasoning="brief"), episodes_file, tmp_path / "verify", tmp_path / "s.json")
    n_synth = len(read_records(tmp_path / "verify" / "train.jsonl"))
    val_eps = {r["episode_id"] for r in read_records(tmp_path / "verify" / "val.jsonl")}
    sft = SFTConfig(lr=1e-3, max_steps=1, batch_size=2, grad_accum=1, max_len=512, save_steps=1, logging_steps=1)
    cfg = VerifierConfig(
        init="random", sft=sft, eval_max_records=2, eval_batch_size=2, max_new_tokens=6, policy_data=CFG
    )
    args = (cfg, tc.text_model(), tmp_path / "verify", tmp_path / "v", tmp_path / "v.json", tmp_path / "l.csv")
    with pytest.raises(ValueError, match="policy_data.episodes > 0 needs the policy"):
        run_verifier(*args, tmp_path / "work")
    source = PolicySource(tc.fitted_model(), episodes_file, tc.PROMPT)
    with tc.one_thread():
        m = run_verifier(*args, tmp_path / "work", policy=source)
    mixed = read_records(tmp_path / "work" / "train_with_policy.jsonl")
    policy = [r for r in mixed if r.get("source") == "policy"]
    assert m["policy_data"]["episodes"] == min(4, 5 - len(val_eps)) and len(policy) == m["policy_data"]["kept"]
    assert m["records"]["train"] == n_synth + len(policy) == len(mixed)
    assert val_eps.isdisjoint(r["episode_id"] for r in policy)


def test_contrast_records_are_oracle_labelled_alternatives_in_each_calls_state(episodes_file, tmp_path):
    import dataclasses

    import embodied_rft.generation.fast as fast
    from embodied_rft.vegas.policy_data import contrast_records
    from embodied_rft.world.actions import split_action
    from embodied_rft.world.oracle import ReplayError

    eps = [json.loads(x) for x in episodes_file.read_text().splitlines()]
    by_id = {e["episode_id"]: e for e in eps}
    exclude = {eps[4]["episode_id"]}  # as above: episode 0, which the fitted model answers, is played
    with tc.one_thread():
        plain, counts = policy_records(CFG, tc.fitted_model(), episodes_file, exclude, tc.PROMPT, tmp_path)
    store = [json.loads(x) for x in (tmp_path / "policy_episodes.jsonl").read_text().splitlines()]
    results = {r["episode_id"]: r for r in store if "live" in r}

    def boom(*a, **k):
        raise AssertionError("generated although every episode was stored")

    orig = fast.FastGenerator._generate_batch
    fast.FastGenerator._generate_batch = boom
    try:
        recs, c2 = policy_records(
            dataclasses.replace(CFG, contrast=2), tc.fitted_model(), episodes_file, exclude, tc.PROMPT, tmp_path
        )
    finally:
        fast.FastGenerator._generate_batch = orig
    # the sampled candidates' records are unchanged and come first; the alternatives follow
    assert recs[: len(plain)] == plain
    extra = recs[len(plain) :]
    assert extra and all(r["source"] == "contrast" for r in extra)
    assert c2["contrast"]["records"] == len(extra) and c2["contrast"]["positives"] == sum(
        r["verdict"] == "yes" for r in extra
    )
    calls = {(e, c["call"]): c for e, res in results.items() for c in res["live"]}
    per_call: dict = {}
    kinds = {"next": 0, "swap": 0}
    for r in extra:
        c = calls[(r["episode_id"], r["step"])]
        per_call.setdefault((r["episode_id"], r["step"]), []).append(r)
        # an independent replay of the call's history; the alternative is judged there
        oracle = WorldOracle(by_id[r["episode_id"]])
        sim = oracle.initial.copy()
        for h in c["history"]:
            assert sim.step(h["action_id"]).feedback == h["feedback"]
        assert sim.observe_text() == r["observation"] == c["observation"] and r["history"] == c["history"]
        a = r["candidate"]["action_id"]
        j = oracle.judge(sim, a)
        assert (r["label"], r["reason"], r["verdict"]) == (j.label, j.reason, "yes" if j.label == "correct" else "no")
        assert a not in {x["a"] for x in c["cands"]} and r["candidate"]["reasoning"]
        assert parse_verdict(r["messages"][-1]["content"]) == r["verdict"]
    for (eid, call), rs in per_call.items():
        c = calls[(eid, call)]
        assert len(rs) <= 2 and len({r["candidate"]["action_id"] for r in rs}) == len(rs)
        oracle = WorldOracle(by_id[eid])
        sim = oracle.rebuild(results[eid]["actions"][: len(c["history"])])
        best = oracle.best_plan(sim)
        nxt = sim.actions.get_id(best[0][0]) if best and best[0] else None
        sampled = {x["a"] for x in c["cands"]}
        verbs = {split_action(x["name"])[0] for x in c["cands"]}
        rest = rs
        if nxt is not None and nxt not in sampled:
            # the planner's next action comes first, labelled correct
            assert rs[0]["candidate"]["action_id"] == nxt and rs[0]["verdict"] == "yes"
            rest = rs[1:]
            kinds["next"] += 1
        assert all(split_action(r["candidate"]["action_name"])[0] in verbs for r in rest)
        kinds["swap"] += len(rest)
    assert kinds["swap"] > 0, kinds
    # a hand-built call two expert steps in, whose only sample is a find of an object the task does not name: the
    # planner's next action comes first (correct), then another find
    ep = eps[1]
    oracle = WorldOracle(ep)
    executed = [(oracle.initial.actions.id(a), a, True) for a in ep["expert_plan"][:2]]
    sim, history = oracle.replay(executed)
    goal = {sim.goal.object_target, sim.goal.parent_target, sim.goal.toggle_target, sim.goal.mrecep_target}
    wrong = next(n for n in sim.actions.names if n.startswith("find a ") and n[7:] not in goal)
    call = {
        "call": 1,
        "history": history,
        "observation": sim.observe_text(),
        "cands": [{"a": sim.actions.id(wrong), "name": wrong}],
    }
    reasoner = ScriptedTeacher(ScriptedConfig(seed=0, verbosity="brief"))
    hand = contrast_records(ep, {"actions": executed, "live": [call]}, 2, 0, reasoner)
    nxt = oracle.best_plan(sim)[0][0]
    assert [r["candidate"]["action_name"] for r in hand][0] == nxt and hand[0]["verdict"] == "yes"
    assert len(hand) == 2 and hand[1]["candidate"]["action_name"].startswith("find a ")
    assert hand[1]["candidate"]["action_name"] not in (wrong, nxt)
    assert contrast_records(ep, {"actions": executed, "live": [call]}, 0, 0, reasoner) == []
    # a stored call whose state the replay does not reproduce is an error naming the episode and call
    eid, call = next(iter(per_call))
    bad = json.loads(json.dumps(results[eid]))
    at = next(i for i, c in enumerate(bad["live"]) if c["call"] == call)
    bad["live"][at]["observation"] += " (edited)"
    with pytest.raises(ReplayError, match=f"episode {eid} call {call}: the rebuilt state"):
        contrast_records(by_id[eid], bad, 2, 0, reasoner)
