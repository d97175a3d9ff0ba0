"""On-policy verification records (vegas/policy_data.py, ``verifier.policy_data``): the policy's own candidates on
training episodes, each labelled by the oracle in the state it was proposed in (checked by replaying the history
independently), balanced, resumable, held-out episodes left out, and added to the verifier's training file."""

from __future__ import annotations

import json

import pytest

from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.generation import GenerationConfig
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
