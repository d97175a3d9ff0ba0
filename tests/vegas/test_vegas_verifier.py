"""The verifier (vegas/score.py, vegas/verifier.py): AUROC and balanced accuracy values, P(yes) read from the
verdict token, and the verifier stage's library end to end on a tiny model (the project's SFT, held-out scores)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from embodied_rft.config import ConfigError, build
from embodied_rft.data.jsonl import DataError, iter_jsonl
from embodied_rft.generation.base import Completion
from embodied_rft.models import load_model
from embodied_rft.train.sft.config import SFTConfig
from embodied_rft.vegas.score import Verifier, auroc, balanced_accuracy
from embodied_rft.vegas.text import parse_verdict
from embodied_rft.vegas.verifier import init_checkpoint, read_records, run_verifier, verdict_only
from embodied_rft.vegas.verifier_config import VerifierConfig
from tests.helpers import smollm2
from tests.helpers import tiny_checkpoints as tc


def test_auroc_and_balanced_accuracy_values():
    assert auroc([0.9, 0.8, 0.3, 0.1], [True, True, False, False]) == 1.0
    assert auroc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert auroc([0.5, 0.5, 0.5, 0.5], [True, False, True, False]) == 0.5  # ties count half
    assert auroc([0.9, 0.4, 0.6, 0.1], [True, True, False, False]) == 0.75
    assert auroc([0.3], [True]) is None
    assert balanced_accuracy([True, False, True, True], [True, False, False, False]) == pytest.approx((1 + 1 / 3) / 2)
    assert balanced_accuracy([True], [True]) is None


def test_p_yes_is_the_normalised_verdict_probability():
    with tc.one_thread():
        model, tok = load_model(tc.text_model())
        v = Verifier(model, tok, max_new_tokens=5, batch_size=2, device="cpu")
        prompts = [[{"role": "user", "content": "Is it correct?"}], [{"role": "user", "content": "Check this."}]]
        out = v.p_yes(prompts)
        assert len(out) == 2 and all(0.0 < p < 1.0 for p, _, _ in out)
        # the cost column's count: each templated prompt's tokens, as the generator prefilled them
        templated = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        assert v.last_prompt_tokens == [len(tok(t, add_special_tokens=False)["input_ids"]) for t in templated]
        # by hand for the first: the verdict line is appended to the greedy text and the verdict token read
        p, verdict, text = out[0]
        head = tok.apply_chat_template(prompts[0], add_generation_prompt=True, tokenize=False)
        pre = head + text.rstrip() + "\naction_is_correct:"
        yes = tok(pre + " yes", add_special_tokens=False)["input_ids"]
        no = tok(pre + " no", add_special_tokens=False)["input_ids"]
        c = next(i for i, (a, b) in enumerate(zip(yes, no)) if a != b)
        with torch.inference_mode():
            logp = torch.log_softmax(model(input_ids=torch.tensor([yes[:c]])).logits[0, -1], dim=-1)
        y, n = float(logp[yes[c]]), float(logp[no[c]])
        assert p == pytest.approx(math.exp(y) / (math.exp(y) + math.exp(n)), rel=1e-4)
        assert verdict is None and v.calls == 2
        vs = v.verdicts(prompts, 3, 1.0, seed=1)
        assert [len(x) for x in vs] == [3, 3] and v.calls == 8


def _one_forward(model, tok, prefix: str) -> tuple[float, float]:
    """The verdict token's log-probabilities after ``prefix`` by one unpadded forward (what a batch must equal)."""
    yes = tok(prefix + " yes", add_special_tokens=False)["input_ids"]
    no = tok(prefix + " no", add_special_tokens=False)["input_ids"]
    c = next(i for i, (a, b) in enumerate(zip(yes, no)) if a != b)
    with torch.inference_mode():
        logp = torch.log_softmax(model(input_ids=torch.tensor([yes[:c]])).logits[0, -1].float(), dim=-1)
    return float(logp[yes[c]]), float(logp[no[c]])


def _prefixes(tok) -> list[str]:
    """Verification prefixes of mixed lengths (1 to ~40 words of history), each ending at the verdict key."""
    out = []
    for k in (0, 1, 7, 3, 15, 2, 40):
        msgs = [{"role": "user", "content": "Task: put a washed Mug in the Sink. History: " + "find a Mug, " * k}]
        head = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        out.append(head + ("The Mug is in hand.\n" if k % 2 else "") + "action_is_correct:")
    return out


def test_batched_verdict_logprobs_equal_one_forward_per_prefix():
    # padded on the left with a mask and per-row positions, sorted into batches of 3: each row's log-probabilities
    # are those of its own unpadded forward
    with tc.one_thread():
        model, tok = load_model(tc.text_model())
        v = Verifier(model, tok, max_new_tokens=5, batch_size=3, device="cpu")
        prefixes = _prefixes(tok)
        lengths = {len(tok(p, add_special_tokens=False)["input_ids"]) for p in prefixes}
        assert len(lengths) >= 5  # the batches hold rows of different lengths
        got = v.verdict_logprobs_batch(prefixes)
        want = [_one_forward(model, tok, p) for p in prefixes]
    assert len(got) == len(prefixes)
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=1e-4)
    assert v.verdict_logprobs(prefixes[3]) == pytest.approx(want[3], abs=1e-4)


@smollm2.needs_smollm
def test_batched_verdict_logprobs_equal_one_forward_per_prefix_on_smollm2(tmp_path):
    # the same on the Llama architecture (the pretrained verifier's): left padding must not move a row's positions
    smol = smollm2.config()
    with tc.one_thread():
        model, tok = load_model(smol)
        v = Verifier(model, tok, max_new_tokens=5, batch_size=4, device="cpu")
        prefixes = _prefixes(tok)[:5]
        got = v.verdict_logprobs_batch(prefixes)
        want = [_one_forward(model, tok, p) for p in prefixes]
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, abs=1e-3)


@pytest.mark.parametrize(
    "text, read_after",
    [
        # synth.verdict=first: the verdict token is read right after the prompt, whatever rationale follows
        ("action_is_correct: yes\nThe task: put a Mug in the Sink.", "action_is_correct:"),
        # last (the paper's order): after the chain of thought the verifier wrote
        (
            "The task: put a Mug in the Sink.\naction_is_correct: no",
            "The task: put a Mug in the Sink.\naction_is_correct:",
        ),
    ],
)
def test_p_yes_reads_the_verdict_wherever_the_verdict_line_is(monkeypatch, text, read_after):
    with tc.one_thread():
        model, tok = load_model(tc.text_model())
        v = Verifier(model, tok, max_new_tokens=5, batch_size=1, device="cpu")
        prompt = [{"role": "user", "content": "Check this."}]
        monkeypatch.setattr(v.gen, "complete", lambda ps, **kw: [[Completion(text, 1, 1, "stop")] for _ in ps])
        seen = []
        monkeypatch.setattr(v, "verdict_logprobs_batch", lambda ps: seen.extend(ps) or [(-1.0, -2.0)] * len(ps))
        [(p, verdict, out)] = v.p_yes([prompt])
        head = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        assert seen == [head + read_after] and out == text
        assert p == pytest.approx(1 / (1 + math.exp(-1.0))) and verdict == parse_verdict(text)


def test_verifier_stage_trains_with_the_projects_sft_and_scores_held_out_records(records, tmp_path):
    sft = SFTConfig(lr=1e-3, max_steps=2, batch_size=2, grad_accum=1, max_len=512, save_steps=1, logging_steps=1)
    cfg = VerifierConfig(init="random", sft=sft, eval_max_records=6, eval_batch_size=3, max_new_tokens=6)
    out = tmp_path / "verifier"
    with tc.one_thread():
        m = run_verifier(
            cfg, tc.text_model(), records / "verify", out, tmp_path / "v.json", tmp_path / "loss.csv", tmp_path / "work"
        )
    assert (out / "config.json").is_file() and m["steps"] == 2 and m["init"] == "random"
    held = m["heldout"]
    assert held["records"] == 6 and held["positives"] + 0 <= 6
    assert held["auroc"] is None or 0.0 <= held["auroc"] <= 1.0
    assert 0.0 <= held["verdict_rate"] <= 1.0 and set(held["accuracy_by_mode"]) <= {
        "expert",
        "wrong_object",
        "wrong_receptacle",
        "precondition",
    }
    head = json.loads((tmp_path / "v.json").read_text())
    assert set(head) == {"init", "records", "steps", "final_loss", "heldout"} and "example" not in head["heldout"]
    assert (tmp_path / "loss.csv").read_text().startswith("step,loss,lr")


def test_records_reader_names_the_line(tmp_path):
    (tmp_path / "val.jsonl").write_text('{"verdict": "maybe", "messages": []}\n')
    with pytest.raises(DataError, match=r"val.jsonl:1: field 'verdict' must be yes or no"):
        read_records(tmp_path / "val.jsonl")
    with pytest.raises(DataError, match="run the `synth` stage"):
        read_records(tmp_path / "missing.jsonl")


def test_verdict_target_cuts_every_assistant_turn_to_its_verdict_line(records, tmp_path):
    src = records / "verify" / "train.jsonl"
    before = [r for _, r in iter_jsonl(src)]
    n = verdict_only(src, tmp_path / "cut.jsonl")
    after = [r for _, r in iter_jsonl(tmp_path / "cut.jsonl")]
    assert n == len(before) == len(after) > 0
    for b, a in zip(before, after, strict=True):
        assert a["messages"][:-1] == b["messages"][:-1] and a["verdict"] == b["verdict"]
        assert a["messages"][-1] == {**b["messages"][-1], "content": f"action_is_correct: {b['verdict']}"}
        assert len(b["messages"][-1]["content"]) > len(a["messages"][-1]["content"])  # a chain of thought was cut
    # the stage trains on the cut file: its SFT sees only verdict lines
    sft = SFTConfig(lr=1e-3, max_steps=1, batch_size=2, grad_accum=1, max_len=512, save_steps=1, logging_steps=1)
    cfg = VerifierConfig(
        init="random", target="verdict", sft=sft, eval_max_records=2, eval_batch_size=2, max_new_tokens=6
    )
    with tc.one_thread():
        m = run_verifier(
            cfg,
            tc.text_model(),
            records / "verify",
            tmp_path / "v",
            tmp_path / "v.json",
            tmp_path / "l.csv",
            tmp_path / "w",
        )
    assert m["steps"] == 1 and [r for _, r in iter_jsonl(tmp_path / "w" / "train_verdict.jsonl")] == after


def test_verdict_target_names_a_record_without_a_verdict_line(tmp_path):
    rec = {"verdict": "yes", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ok"}]}
    (tmp_path / "t.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.raises(DataError, match=r"t.jsonl:1: field 'messages' must end with an assistant turn holding one"):
        verdict_only(tmp_path / "t.jsonl", tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
    # a verdict line that contradicts the record's label is refused too (it would train the opposite answer)
    rec["messages"][-1]["content"] = "Looks wrong.\naction_is_correct: no"
    (tmp_path / "t.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.raises(DataError, match=r"t.jsonl:1: .* the record's 'verdict' \('yes'\)"):
        verdict_only(tmp_path / "t.jsonl", tmp_path / "out.jsonl")
    with pytest.raises(ValueError, match=r"verifier.target: 'reasons' is not one of \['cot', 'verdict'\]"):
        build(VerifierConfig, {"target": "reasons"}, "verifier")


def test_init_checkpoint_names_the_base_the_sft_policy_or_a_pretrained_model(tmp_path):
    assert str(init_checkpoint(VerifierConfig(init="random"), "m/base", "m/sft", tmp_path)) == "m/base"
    assert str(init_checkpoint(VerifierConfig(init="sft"), "m/base", "m/sft", tmp_path)) == "m/sft"
    with pytest.raises(ConfigError, match=r"verifier.model: verifier.init=pretrained starts from a pretrained model"):
        build(VerifierConfig, {"init": "pretrained", "model": {"name": "tiny", "kind": "tiny"}}, "verifier")


@smollm2.needs_smollm
def test_pretrained_init_fine_tunes_smollm2_as_the_verifier(records, tmp_path):
    # verifier.init=pretrained: SmolLM2 converted into the work folder, then one step of the project's SFT on the
    # verdict target; the verifier is SmolLM2's architecture and tokenizer with moved weights
    from safetensors.torch import load_file

    smol = smollm2.config()
    sft = SFTConfig(
        lr=1e-4,
        max_steps=1,
        warmup_ratio=0.0,
        batch_size=1,
        grad_accum=1,
        max_len=1024,
        save_steps=100,
        logging_steps=1,
    )
    cfg = VerifierConfig(
        init="pretrained",
        model=smol,
        target="verdict",
        sft=sft,
        eval_max_records=2,
        eval_batch_size=2,
        max_new_tokens=8,
    )
    init = init_checkpoint(cfg, "unused/base", "unused/sft", tmp_path / "w")
    assert init == tmp_path / "w" / "pretrained_base"
    assert json.loads((init / "embodied_rft_model.json").read_text())["source"].startswith("de-quantised from GGUF")
    with tc.one_thread():
        m = run_verifier(
            cfg, init, records / "verify", tmp_path / "v", tmp_path / "v.json", tmp_path / "l.csv", tmp_path / "w"
        )
    assert m["init"] == "pretrained" and m["steps"] == 1 and m["heldout"]["records"] == 2
    assert json.loads((tmp_path / "v" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    before, after = load_file(init / "model.safetensors"), load_file(tmp_path / "v" / "model.safetensors")
    assert before.keys() == after.keys()
    moved = [k for k in before if not torch.equal(before[k].float(), after[k].float())]
    assert len(moved) > len(before) // 2  # a full fine-tuning step moves (nearly) every tensor
