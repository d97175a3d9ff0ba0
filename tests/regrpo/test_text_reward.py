"""The triple's text, the quality gates, the reflection span and ReGRPO's reward on literal cases: R = success −
0.1 · reflection tokens / 100 (+ λ_val · V), in the project's reward module, its config, and OpenRLHF's reward file."""

from __future__ import annotations

import json

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.data.response import format_response
from embodied_rft.regrpo.text import (
    Triple,
    format_triple,
    gate,
    grounded,
    parse_triple,
    reflection_span,
    reflection_tokens,
)
from embodied_rft.regrpo.write import shuffled
from embodied_rft.reward import BoundReward, RewardConfig, score

LABEL = json.dumps({"gold": [[12, "find a Apple"], [107, "pick up the Apple"]], "extra_actions": []})
GOLD = [(12, "find a Apple"), (107, "pick up the Apple")]
TRIPLE = Triple("ArgInvalid", "'find a Kettle' was rejected: Cannot find Kettle", "find the apple then pick it up")
TEXT = "ErrorType: ArgInvalid. Evidence: 'find a Kettle' was rejected: Cannot find Kettle. FixPlan: find the apple then pick it up."
ROT = {
    "error_type": "ArgInvalid",
    "failed_action": [13, "find a Kettle"],
    "o_fail": "Last action is invalid. Cannot find Kettle. This object may not exist in this scene.\nYou are in the middle of the kitchen.",
    "corrected": [[12, "find a Apple"], [107, "pick up the Apple"]],
}
PROMPT = (
    "History:\n1. 13 find a Kettle: Last action is invalid. Cannot find Kettle.\nObservation: ...\nTask: get an apple"
)


def _response(reasoning: str, plan=GOLD) -> str:
    return format_response(plan, visual_state_description="I am in the kitchen.", reasoning_and_reflection=reasoning)


def test_the_triple_reads_back_and_is_the_reflection_span():
    assert format_triple(TRIPLE) == TEXT and parse_triple(TEXT) == TRIPLE
    assert parse_triple("2 done, 1 left; next find the apple.") is None and parse_triple(None) is None
    r = _response(TEXT)
    assert reflection_span(r) == TEXT and reflection_tokens(r) == 19  # words without a tokenizer
    assert reflection_tokens(r, count=len) == len(TEXT)  # the caller's tokens (the policy tokenizer)
    plain = _response("2 done, 1 left; next find the apple.")
    assert reflection_span(plain) == "" and reflection_tokens(plain) == 0
    # a reflection after other reasoning: the span starts at its first marker
    assert reflection_span(_response("Replan. " + TEXT)) == TEXT
    # an unreadable answer: the raw text from the marker to the end of its string
    assert reflection_span('{"reasoning_and_reflection": "ErrorType: ToolMismatch. Evidence: x", "execut') == (
        "ErrorType: ToolMismatch. Evidence: x"
    )


def test_evidence_grounding_literal_cases():
    assert grounded("'find a Kettle' was rejected: Cannot find Kettle", ROT["o_fail"])  # "kettle" (>= 4 chars)
    assert not grounded("the last action was invalid", ROT["o_fail"])  # EB's fixed words are not evidence
    assert not grounded("I should look elsewhere", ROT["o_fail"])
    # two shared short tokens suffice when no long one is quoted
    assert grounded("a cd on a pc", "Last action is invalid. Cannot find CD near the PC.")
    assert not grounded("a cd here", "Last action is invalid. Cannot find CD near the PC.")


def test_gates_literal_cases():
    assert gate(TRIPLE, ROT, PROMPT, 0) == []
    assert gate(None, ROT, PROMPT, 0) == ["schema: no 'ErrorType: ... Evidence: ... FixPlan: ...' triple"]
    assert gate(TRIPLE._replace(error_type="ToolMismatch"), ROT, PROMPT, 0) == [
        "schema: error type 'ToolMismatch', the near-miss is 'ArgInvalid'"
    ]
    assert gate(TRIPLE._replace(error_type="Oops"), ROT, PROMPT, 0)[0].startswith("schema: error type 'Oops' is not")
    assert gate(TRIPLE._replace(evidence="it went wrong"), ROT, PROMPT, 0) == [
        "evidence: no token of the failure observation"
    ]
    # the corrected action in the prompt before its turn is a leak, unless it is one of the expert's own steps
    leak = "History:\n1. 12 find a Apple: ok\n2. 13 find a Kettle: Last action is invalid.\nfind a Apple"
    assert gate(TRIPLE, ROT, leak, 1) == [
        "leak: the corrected action 'find a Apple' occurs in the prompt before its turn"
    ]
    assert gate(TRIPLE, ROT, leak.rsplit("\n", 1)[0], 1) == []
    same = {**ROT, "failed_action": [12, "find a Apple"]}
    assert "failed == corrected" in gate(TRIPLE, same, PROMPT, 0)


def test_shuffled_swaps_length_matched_neighbours():
    texts = [("a", "x" * 10), ("b", "y" * 11), ("c", "z" * 30), ("d", "w" * 31), ("e", "v" * 50)]
    out = shuffled(texts, seed=0)
    assert sorted(out.values()) == sorted(t for _, t in texts)  # the same reflections, moved
    assert all(out[sid] != t for sid, t in texts)  # none keeps its own
    assert {out["a"], out["b"]} == {"x" * 10, "y" * 11}  # neighbours in length
    with pytest.raises(ValueError, match="at least two RoT samples"):
        shuffled(texts[:1], seed=0)


@pytest.mark.parametrize(
    "reasoning,plan,opts,total,success",
    [
        ("2 done, 1 left.", GOLD, {}, 1.0, 1.0),  # a one-shot success costs nothing
        (TEXT, GOLD, {}, 1.0 - 0.1 * 19 / 100, 1.0),  # success after a 19-word reflection
        (TEXT, GOLD[:1], {}, -0.1 * 19 / 100, 0.0),  # failure after it
        ("2 done, 1 left.", GOLD[:1], {}, 0.0, 0.0),
        (TEXT, GOLD, {"eta": 0.0}, 1.0, 1.0),  # eta = 0: no cost
        (TEXT, GOLD, {"cost_tokens": 19, "eta": 0.5}, 0.5, 1.0),
        ("x", GOLD[:1], {"lambda_val": 0.5}, 0.5 * (1 * 2) / (2 * 3), 0.0),  # V = the prefix accuracy 1/3
        ("x", GOLD[:1], {"executed": (1.0, 1.0)}, 1.0, 1.0),  # success executed from the state
        ("x", GOLD, {"executed": (0.0, 0.4), "lambda_val": 1.0}, 0.4, 0.0),
    ],
)
def test_regrpo_reward_literal_cases(reasoning, plan, opts, total, success):
    b = score(_response(reasoning, plan), LABEL, "regrpo", **opts)
    assert b.total == pytest.approx(total) and b.accuracy_full == success
    assert b.structure == 0.125  # the paper's terms are kept for logging


def test_reward_config_and_bound_reward():
    cfg = build(RewardConfig, {"variant": "regrpo", "regrpo": {"eta": 0.2}}, "reward")
    r = _response(TEXT)
    assert cfg.score(r, LABEL).total == pytest.approx(1 - 0.2 * 19 / 100)
    assert cfg.score(r, LABEL, count_tokens=lambda s: 100).total == pytest.approx(0.8)
    bound = BoundReward(cfg, count_tokens=lambda s: 50, executor=lambda resp, sample: (0.0, 0.0))
    assert bound.score(r, LABEL).total == pytest.approx(0.9)  # offline: the executor is not asked
    ex = build(RewardConfig, {"variant": "regrpo", "regrpo": {"success": "executed"}}, "reward")
    assert BoundReward(ex, None, lambda resp, sample: (0.0, 0.0)).score(r, LABEL, {"sample_id": "s"}).total < 0
    # the paper's reward through a bound config is the paper's reward
    paper = RewardConfig()
    assert BoundReward(paper, len).score(r, LABEL) == paper.score(r, LABEL) == score(r, LABEL)
    # fingerprints: other variants do not see the regrpo block; options only for regrpo
    assert "regrpo" not in paper.identity() and cfg.identity()["regrpo"]["eta"] == 0.2
    assert paper.openrlhf_options() is None and cfg.openrlhf_options()["eta"] == 0.2
    with pytest.raises(ConfigError, match="executed runs on the local engine only"):
        ex.openrlhf_options()
    with pytest.raises(ConfigError, match=r"reward.regrpo.eta: must be >= 0"):
        build(RewardConfig, {"regrpo": {"eta": -1}}, "reward")


def test_openrlhf_reward_file_scores_regrpo_with_the_job_s_options(monkeypatch):
    from embodied_rft.train.openrlhf import reward as shim

    monkeypatch.setenv("EMBODIED_RFT_REWARD_VARIANT", "regrpo")
    monkeypatch.setenv("EMBODIED_RFT_REWARD_OPTIONS", json.dumps({"eta": 0.5, "cost_tokens": 100}))
    monkeypatch.delenv("EMBODIED_RFT_TOKENIZER", raising=False)
    monkeypatch.setattr(shim, "_OPTIONS", {})
    q = [f"<|im_start|>assistant\n{_response(TEXT)}<|im_end|>", f"<|im_start|>assistant\n{_response('ok')}<|im_end|>"]
    out = shim.reward_func(q, ["<|im_start|>assistant\n"] * 2, [LABEL, LABEL])
    assert [round(float(x), 4) for x in out["rewards"]] == [round(1 - 0.5 * 0.19, 4), 1.0]
    assert [float(x) for x in out["scores"]] == [1.0, 1.0]
    assert [float(x) for x in out["extra_logs"]["reflection_tokens"]] == [19.0, 0.0]


@pytest.mark.parametrize("eta", [0.1, 0.0])
def test_keeping_all_success_groups_changes_the_filter_only_where_the_cost_differs(eta):
    """Arm regrpo_steps_kept (filter upper = G) against regrpo_steps (upper = G - 1): with η > 0 an all-success group
    whose members reflect differently is kept, with η = 0 its rewards are equal and the zero-variance drop removes it
    under both bounds, so the two filters decide alike and regrpo_steps_eta0 is the kept arm's η = 0 arm."""
    from embodied_rft.filtering import FilterConfig, GroupBuffer

    def group(plans, reasonings):
        bs = [score(_response(r, p), LABEL, "regrpo", eta=eta) for r, p in zip(reasonings, plans, strict=True)]
        return [b.accuracy_full for b in bs], [b.total for b in bs]

    all_success = group([GOLD] * 8, [TEXT] * 4 + ["2 done, 1 left."] * 4)
    mixed = group([GOLD] * 4 + [GOLD[:1]] * 4, [TEXT, "2 done."] * 4)
    all_failed = group([GOLD[:1]] * 8, [TEXT] * 4 + ["2 done."] * 4)
    kept = {}
    for upper in (None, 8):
        buf = GroupBuffer(FilterConfig(upper=upper), 8)
        kept[upper] = [buf.offer(name, *g) for name, g in (("s", all_success), ("m", mixed), ("f", all_failed))]
    assert kept[None] == [False, True, False]
    assert kept[8] == ([True, True, False] if eta > 0 else [False, True, False])
