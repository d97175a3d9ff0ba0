"""The verifier's pairwise objective (``verifier.objective: pairwise``; vegas/pairs.py, score.RewardVerifier): pairs
of one prompt context (grouping, only correct-vs-wrong pairs, the seeded cap), its config checks, and on a tiny
Qwen2 a real TRL ``RewardTrainer`` run loaded back through ``Verifier.load`` (batched rewards equal one forward per
prompt, training ranks the correct candidates above the wrong ones on a separable toy set, the stage end to end)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch

from embodied_rft.config import ConfigError, build
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.jsonl import DataError
from embodied_rft.train.sft.config import SFTConfig
from embodied_rft.vegas.pairs import build_pairs, context_key, load_reward_init, pair_records, train_pairwise
from embodied_rft.vegas.score import RewardVerifier, Verifier, is_reward_checkpoint
from embodied_rft.vegas.text import verification_messages
from embodied_rft.vegas.verifier import run_verifier
from embodied_rft.vegas.verifier_config import PairwiseConfig, VerifierConfig
from tests.helpers import tiny_checkpoints as tc

HISTORY = [{"action_id": 12, "action_name": "find a Mug", "feedback": "Last action executed successfully."}]


def _rec(ep: str, step: int, obs: str, action: str, verdict: str, history=(), reasoning: str = "go on") -> dict:
    msgs = verification_messages("Put a mug in the sink.", list(history), obs, reasoning, 5, action)
    return {
        "record_id": f"{ep}:{step}:{action}:{reasoning}",
        "episode_id": ep,
        "step": step,
        "verdict": verdict,
        "messages": [*msgs, {"role": "assistant", "content": f"action_is_correct: {verdict}"}],
    }


def _records() -> list[dict]:
    obs = "You are at the Sink. In hand: nothing."
    return [
        # one context: 2 correct x 3 wrong = 6 pairs
        _rec("e1", 0, obs, "find a Mug", "yes"),
        _rec("e1", 0, obs, "find a Fridge", "no"),
        _rec("e1", 0, obs, "find a Mug", "yes", reasoning="the mug first"),
        _rec("e1", 0, obs, "pick up the Apple", "no"),
        _rec("e1", 0, obs, "open the Fridge", "no"),
        # the same episode and step with another history: another context (1 x 1)
        _rec("e1", 0, obs, "find a Sink", "yes", HISTORY),
        _rec("e1", 0, obs, "find a Cup", "no", HISTORY),
        # the same text in another episode: another context, wrong candidates only -> no pair
        _rec("e2", 0, obs, "find a Fridge", "no"),
        _rec("e2", 0, obs, "find a Cup", "no"),
        # another observation: another context, one correct candidate only -> no pair
        _rec("e1", 1, "You are at the Fridge. In hand: a Mug.", "open the Fridge", "yes"),
    ]


def _side(pair: dict, side: str) -> str:
    [msg] = pair[side]
    assert msg["role"] == "user"
    return msg["content"]


def test_pairs_are_correct_vs_wrong_candidates_of_one_context():
    recs = _records()
    pairs, counts = build_pairs(pair_records(recs), max_pairs_per_context=0)
    assert counts == {
        "records": 10,
        "groups": 4,
        "groups_with_both_labels": 2,
        "pairs_possible": 7,
        "pairs": 7,
        "records_in_pairs": 7,
    }
    by_id = {r["record_id"]: r for r in recs}
    for p in pairs:
        chosen, rejected = by_id[p["chosen_id"]], by_id[p["rejected_id"]]
        assert chosen["verdict"] == "yes" and rejected["verdict"] == "no"
        assert context_key(chosen) == context_key(rejected)  # same episode, step, task, history and observation
        assert (_side(p, "chosen"), _side(p, "rejected")) == (
            chosen["messages"][0]["content"],
            rejected["messages"][0]["content"],
        )
        # TRL's conversational implicit-prompt layout, rendered with the generation prompt as the verifier scores it
        assert p["chat_template_kwargs"] == {"add_generation_prompt": True}
    assert len({p["group"] for p in pairs}) == 2
    # the context key stops before the candidate
    key = context_key(recs[0])
    assert key[:2] == ("e1", "0") and key[2].endswith("In hand: nothing.") and "Candidate" not in key[2]
    assert context_key(recs[0]) == context_key(recs[2]) != context_key(recs[5])


def test_the_cap_is_a_seeded_draw_per_context():
    recs = _records()
    capped, counts = build_pairs(pair_records(recs), max_pairs_per_context=4, seed=3)
    assert counts["pairs_possible"] == 7 and counts["pairs"] == len(capped) == 4 + 1
    again, _ = build_pairs(pair_records(recs), max_pairs_per_context=4, seed=3)
    assert again == capped
    full, _ = build_pairs(pair_records(recs), max_pairs_per_context=0)
    assert all(p in full for p in capped)
    draws = {
        tuple(p["chosen_id"] + "|" + p["rejected_id"] for p in build_pairs(pair_records(recs), 4, seed)[0])
        for seed in range(8)
    }
    assert len(draws) > 1  # the seed decides which 4 of the 6
    # a group's draw does not depend on the records of other groups
    alone, _ = build_pairs(pair_records(recs[:5]), max_pairs_per_context=4, seed=3)
    assert alone == capped[: len(alone)] and len(alone) == 4


def test_pairs_builder_and_config_name_what_is_wrong():
    bad = {"record_id": "x", "episode_id": "e", "step": 0, "verdict": "yes", "messages": [{"role": "user"}]}
    with pytest.raises(DataError, match=r"x: field 'messages' must open with the verification prompt"):
        build_pairs(pair_records([bad]))
    with pytest.raises(DataError, match=r"x: field 'verdict' must be yes or no"):
        build_pairs(pair_records([{**_records()[0], "record_id": "x", "verdict": "maybe"}]))
    with pytest.raises(ValueError, match=r"verifier.objective: 'ranking' is not one of \['sft', 'pairwise'\]"):
        build(VerifierConfig, {"objective": "ranking"}, "verifier")
    with pytest.raises(ConfigError, match=r"verifier.pairwise.max_pairs_per_context: must be >= 0"):
        build(VerifierConfig, {"objective": "pairwise", "pairwise": {"max_pairs_per_context": -1}}, "verifier")
    with pytest.raises(ConfigError, match=r"verifier.sft.lora.enabled: verifier.objective=pairwise trains every"):
        build(VerifierConfig, {"objective": "pairwise", "sft": {"lora": {"enabled": True}}}, "verifier")
    cfg = build(VerifierConfig, {"objective": "pairwise", "pairwise": {"max_pairs_per_context": 2}}, "verifier")
    assert cfg.objective == "pairwise" and cfg.pairwise == PairwiseConfig(max_pairs_per_context=2)
    assert VerifierConfig().objective == "sft"


def _prompts(n_words: tuple[int, ...]) -> list[list[dict]]:
    return [
        verification_messages("Put a mug in the sink.", [], "At the Sink. " * k, "go", 5, "find a Mug") for k in n_words
    ]


def _tiny_llama(out):
    """A random one-layer Llama causal LM with the tiny Qwen2's tokenizer (the pretrained verifier's architecture)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from embodied_rft.core.integrity import save_pretrained_atomic
    from embodied_rft.models.factory import load_tokenizer

    src = tc.text_model()
    tok = load_tokenizer(src)
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    arch = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    save_pretrained_atomic(LlamaForCausalLM(arch), tok, out)
    return out


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_reward_verifier_batches_equal_one_forward_per_prompt(tmp_path, arch):
    with tc.one_thread():
        init = tc.text_model() if arch == "qwen2" else _tiny_llama(tmp_path / "llama")
        model, tok = load_reward_init(init, seed=0)
        assert type(model).__name__ == ("Qwen2" if arch == "qwen2" else "Llama") + "ForSequenceClassification"
        v = RewardVerifier(model, tok, batch_size=3, device="cpu")
        prompts = _prompts((0, 5, 1, 9, 3, 12, 2))
        got = v.rewards(prompts)
        want = []
        for p in prompts:
            ids = tok.apply_chat_template(p, tokenize=True, return_dict=True, add_generation_prompt=True)["input_ids"]
            with torch.inference_mode():
                want.append(float(model(input_ids=torch.tensor([ids])).logits[0, 0]))
        assert len({len(v.prompt_ids(p)) for p in prompts}) == len(prompts)  # every batch is padded
        assert got == pytest.approx(want, abs=1e-4)
        assert v.last_prompt_tokens == [len(v.prompt_ids(p)) for p in prompts]  # the cost column's count
        scored = v.p_yes(prompts)
        assert all(0.0 < p < 1.0 for p, _, _ in scored)
        assert [verdict for _, verdict, _ in scored] == ["yes" if r > 0 else "no" for r in want]
        assert [text for _, _, text in scored] == [""] * len(prompts)
        assert v.verdicts(prompts[:2], 3, 0.7, seed=1) == [[scored[0][1]] * 3, [scored[1][1]] * 3]


def _toy_pairs(path) -> list[dict]:
    """Separable pairs: the correct candidate always finds a Mug, the wrong one a Fridge, in varied contexts."""
    rows = []
    for k in range(8):
        obs = "You are at the Sink. " + "In hand: nothing. " * (k % 3)
        good, bad = (
            verification_messages("Put a mug in the sink.", [], obs, f"step {k}", 5, a)
            for a in ("find a Mug", "find a Fridge")
        )
        rows.append({"chosen": good, "rejected": bad, "chat_template_kwargs": {"add_generation_prompt": True}})
    write_jsonl_atomic(path, rows)
    return rows


def test_reward_trainer_ranks_the_correct_candidate_first_and_loads_as_a_verifier(tmp_path):
    rows = _toy_pairs(tmp_path / "pairs.jsonl")
    sft = SFTConfig(
        lr=3e-3,
        max_steps=12,
        warmup_ratio=0.0,
        scheduler="constant_with_warmup",
        batch_size=4,
        grad_accum=1,
        max_len=512,
        save_steps=6,
        logging_steps=1,
        device="cpu",
    )
    cfg = VerifierConfig(init="sft", objective="pairwise", sft=sft)
    out = tmp_path / "verifier"
    with tc.one_thread():
        m = train_pairwise(cfg, tc.text_model(), tmp_path / "pairs.jsonl", out, tmp_path / "loss.csv", tmp_path / "w")
        assert is_reward_checkpoint(out) and not is_reward_checkpoint(tc.text_model())
        arch = json.loads((out / "config.json").read_text())
        assert arch["architectures"] == ["Qwen2ForSequenceClassification"] and len(arch["id2label"]) == 1
        assert arch["pad_token_id"] is not None and (out / "checksums.sha256").is_file()
        v = Verifier.load(out, backend="fast", max_new_tokens=6, batch_size=3, device="cpu")
        assert isinstance(v, RewardVerifier)
        good = v.p_yes([r["chosen"] for r in rows])
        bad = v.p_yes([r["rejected"] for r in rows])
    assert m["steps"] == 12 and m["pairs_trained"] == 8 and m["final_loss"] < m["first_loss"]
    assert not (tmp_path / "w").exists()  # checkpoints removed after success (sft.keep_checkpoints: false)
    assert (tmp_path / "loss.csv").read_text().startswith("step,loss,lr")
    assert all(0.0 < p < 1.0 for p, _, _ in good + bad)
    # every correct candidate above every wrong one, by a margin, and the verdicts on the right side of 0
    assert min(p for p, _, _ in good) > max(p for p, _, _ in bad) + 0.2
    assert all(v == "yes" for _, v, _ in good) and all(v == "no" for _, v, _ in bad)


def test_pairwise_training_resumes_from_its_last_sealed_checkpoint(tmp_path):
    # a run killed after its step-2 checkpoint resumes there and ends where the uninterrupted run ends
    from safetensors.torch import load_file

    _toy_pairs(tmp_path / "pairs.jsonl")
    sft = SFTConfig(
        lr=1e-3, max_steps=4, batch_size=4, grad_accum=1, max_len=512, save_steps=2, logging_steps=1, device="cpu"
    )
    cfg = VerifierConfig(init="sft", objective="pairwise", sft=replace(sft, keep_checkpoints=True))
    args = (tc.text_model(), tmp_path / "pairs.jsonl")
    with tc.one_thread():
        full = train_pairwise(cfg, *args, tmp_path / "full", tmp_path / "l.csv", tmp_path / "w")
        assert full["resumed_from_step"] == 0 and (tmp_path / "w" / "checkpoint-4").is_dir()
        shutil.rmtree(tmp_path / "w" / "checkpoint-4")  # the kill: step 4 never saved
        again = train_pairwise(cfg, *args, tmp_path / "again", tmp_path / "l.csv", tmp_path / "w")
    assert again["resumed_from_step"] == 2 and again["steps"] == 4
    a, b = load_file(tmp_path / "full" / "model.safetensors"), load_file(tmp_path / "again" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_verifier_stage_trains_the_pairwise_objective_and_scores_held_out_records(records, tmp_path):
    sft = SFTConfig(lr=1e-3, max_steps=2, batch_size=2, grad_accum=1, max_len=1024, save_steps=1, logging_steps=1)
    cfg = VerifierConfig(
        init="sft",
        objective="pairwise",
        target="verdict",  # not read by the pairwise objective
        pairwise=PairwiseConfig(max_pairs_per_context=1),
        sft=sft,
        eval_max_records=6,
        eval_batch_size=4,
    )
    out = tmp_path / "verifier"
    with tc.one_thread():
        m = run_verifier(
            cfg, tc.text_model(), records / "verify", out, tmp_path / "v.json", tmp_path / "loss.csv", tmp_path / "work"
        )
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Qwen2ForSequenceClassification"]
    pairs = m["pairs"]
    assert m["objective"] == "pairwise" and m["steps"] == 2 and pairs["pairs"] == pairs["groups_with_both_labels"] > 0
    assert pairs["records"] == m["records"]["train"] and pairs["trained"] == pairs["pairs"]
    lines = (tmp_path / "work" / "pairs.jsonl").read_text().splitlines()
    assert len(lines) == pairs["pairs"] and not (tmp_path / "work" / "train_verdict.jsonl").exists()
    held = m["heldout"]
    assert held["records"] == 6 and held["verdict_rate"] == 1.0
    assert held["auroc"] is None or 0.0 <= held["auroc"] <= 1.0
    head = json.loads((tmp_path / "v.json").read_text())
    assert set(head) == {"init", "objective", "records", "pairs", "steps", "final_loss", "heldout"}
    assert set(head["pairs"]) == {"groups", "groups_with_both_labels", "pairs"}
