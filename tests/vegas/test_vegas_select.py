"""Best-of-N selection (vegas/select.py) on a fake generator whose candidates, log-probs and verifier verdicts are
known: which candidate each selector executes, shared verifications, tie-breaking, the oracle ceiling, the
single-action unit, the cost counts and the live records of the greedy run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from embodied_rft.data.prompt import PromptConfig
from embodied_rft.data.response import format_response
from embodied_rft.evaluate.config import EpisodeLimits
from embodied_rft.evaluate.episode import EpisodeRun, read_plan
from embodied_rft.generation.base import Completion
from embodied_rft.vegas.bon import coverage
from embodied_rft.vegas.bon_config import BonConfig
from embodied_rft.vegas.select import BonPolicy, Candidate, choose
from embodied_rft.world import Simulator
from tests.helpers.world_scenes import simple


def _ep() -> dict:
    ep = simple("Mug", "DiningTable")
    ep["expert_plan"] = ["find a Mug", "pick up the Mug", "find a DiningTable", "put down the object in hand"]
    return ep


SPACE = Simulator.from_episode(_ep()).actions


def _text(*names: str, why: str = "r") -> str:
    return format_response([(SPACE.id(n), n) for n in names], reasoning_and_reflection=why)


class FakeGen:
    """Returns the scripted candidates (text, log-prob) for every prompt; records each call."""

    def __init__(self, cands: list[tuple[str, float]]) -> None:
        self.cands = cands
        self.calls: list[dict] = []

    def complete(self, batch, images=None, *, n=1, temperature=None, top_p=None, seed=None, **kw):
        self.calls.append({"n": n, "temperature": temperature, "prompts": len(batch)})
        cs = [Completion(t, 10, 5, "stop", lp) for t, lp in self.cands[:n]]
        return [list(cs) for _ in batch]


class FakeVerifier:
    """Verdicts by the candidate action's name; records the prompts it saw."""

    def __init__(self, verdicts: dict[str, list[str | None]]) -> None:
        self.verdicts_by_name = verdicts
        self.prompts: list[str] = []

    def _name(self, prompt: list[dict]) -> str:
        """The candidate action's name in a verification prompt (which is recorded)."""
        text = prompt[-1]["content"]
        self.prompts.append(text)
        return text.rsplit("Candidate action: ", 1)[1].split("\n", 1)[0].split(" ", 1)[1]

    def verdicts(self, prompts, m, temperature, seed=0):
        return [self.verdicts_by_name[self._name(p)][:m] for p in prompts]


class FakeProbVerifier(FakeVerifier):
    """P(yes) by the candidate action's name (``score: prob``); sampling verdicts is an error."""

    def __init__(self, p: dict[str, float]) -> None:
        super().__init__({})
        self.p = p

    def verdicts(self, prompts, m, temperature, seed=0):  # pragma: no cover - must not be called
        raise AssertionError("score: prob reads P(yes), it does not sample verdicts")

    def p_yes(self, prompts):
        ps = [self.p[self._name(p)] for p in prompts]
        return [(p, "yes" if p >= 0.5 else "no", "") for p in ps]


def _cand(i: int, first: int | None, lp: float | None) -> Candidate:
    return Candidate(i, "", "ok" if first is not None else "unparseable", (first,) if first else (), lp, "", 1)


def test_choose_rules():
    c = [_cand(0, 5, -3.0), _cand(1, 7, -1.0), _cand(2, 5, -2.0), _cand(3, None, 0.0)]
    assert choose("greedy", c) == 0 and choose("sample", c) == 0
    assert choose("sc", c) == 2  # action 5 has the majority; its most likely candidate
    assert choose("bon_ft", c, {5: 0.5, 7: 0.5}) == 1  # equal scores: the highest log-prob
    assert choose("bon_ft", c, {5: 1.0, 7: 0.5}) == 2
    assert choose("bon_oracle", [_cand(0, 5, None), _cand(1, 5, None)], {5: 1.0}) == 0  # no log-probs: earliest
    assert choose("sc", [_cand(0, None, -9.0), _cand(1, None, -1.0)]) == 1  # nothing readable: most likely
    with pytest.raises(ValueError, match="needs a score"):
        choose("bon_ft", c)


def _setup(cands, selector, **cfg):
    ep = _ep()
    run = EpisodeRun(ep, PromptConfig(style="compact"), EpisodeLimits())
    gen = FakeGen(cands)
    return run, gen, BonConfig(n=len(cands), **cfg), ep


def test_trained_verifier_scores_each_first_action_once_and_the_best_is_executed():
    cands = [
        (_text("find a Fridge", why="fridge first"), -1.0),
        (_text("find a Mug", "pick up the Mug", why="mug, unlikely"), -5.0),
        (_text("find a Mug", why="mug, likely"), -3.0),
        ("not json", 0.0),
    ]
    run, gen, cfg, ep = _setup(cands, "bon_ft", m=2)
    ver = FakeVerifier({"find a Fridge": ["yes", "no"], "find a Mug": ["yes", "yes"]})
    pol = BonPolicy("bon_ft", gen, cfg, verifier=ver)
    (resp,) = pol.plan([run.messages()], None, [run.context()])
    assert read_plan(resp, len(SPACE)) == ("ok", [SPACE.id("find a Mug")])  # score 1.0 beats 0.5
    # two distinct first actions, verified twice each; the prompt shows the likelier Mug candidate's reasoning
    assert len(ver.prompts) == 2 and any("Candidate reasoning: mug, likely" in p for p in ver.prompts)
    assert gen.calls == [{"n": 4, "temperature": 0.7, "prompts": 1}]
    assert pol.pop_stats(ep["episode_id"])["verifications"] == 4
    assert pol.pop_stats(ep["episode_id"]) == {"bon_calls": 0, "policy_samples": 0, "verifications": 0, "seconds": 0.0}


def test_prob_score_ranks_first_actions_by_p_yes_with_one_verification_each():
    # P(yes) 0.30 vs 0.25: both below 0.5 (m = 3 sampled verdicts would often tie at 0 and fall back to the
    # policy's log-prob, which prefers the Fridge); the P(yes) score separates them
    cands = [(_text("find a Fridge"), -1.0), (_text("find a Mug"), -3.0), (_text("find a Mug", why="again"), -4.0)]
    run, gen, cfg, ep = _setup(cands, "bon_ft", m=3, score="prob")
    ver = FakeProbVerifier({"find a Fridge": 0.25, "find a Mug": 0.30})
    pol = BonPolicy("bon_ft", gen, cfg, verifier=ver)
    (resp,) = pol.plan([run.messages()], None, [run.context()])
    assert read_plan(resp, len(SPACE)) == ("ok", [SPACE.id("find a Mug")])
    assert len(ver.prompts) == 2 and pol.pop_stats(ep["episode_id"])["verifications"] == 2
    ver.p["find a Fridge"] = 0.31  # the other way round
    (resp,) = pol.plan([run.messages()], None, [run.context()])
    assert read_plan(resp, len(SPACE)) == ("ok", [SPACE.id("find a Fridge")])


def test_replan_trigger_answers_the_first_call_greedily_and_selects_afterwards():
    cands = [(_text("find a Fridge"), -1.0), (_text("find a Mug"), -3.0)]
    run, gen, cfg, ep = _setup(cands, "bon_ft", score="prob", trigger="replan")
    ver = FakeProbVerifier({"find a Fridge": 0.1, "find a Mug": 0.9})
    pol = BonPolicy("bon_ft", gen, cfg, verifier=ver)
    first = run.context()
    assert first.call_index == 0
    later = dataclasses.replace(first, call_index=1)
    # one batch holding an episode's first call and another's replanning call: greedy's answer, then the verifier's
    resp = pol.plan([run.messages(), run.messages()], None, [first, later])
    assert [read_plan(r, len(SPACE))[1] for r in resp] == [[SPACE.id("find a Fridge")], [SPACE.id("find a Mug")]]
    assert {"n": 1, "temperature": 0.0, "prompts": 1} in gen.calls and {
        "n": 2,
        "temperature": 0.7,
        "prompts": 1,
    } in gen.calls
    assert len(ver.prompts) == 2  # only the replanning call's two first actions were verified
    st = pol.pop_stats(ep["episode_id"])
    assert (st["bon_calls"], st["policy_samples"], st["verifications"]) == (2, 1 + 2, 2)
    assert pol.last_completion_tokens == [5, 5]
    # `always` (the paper) selects on the first call too
    run, gen, cfg, _ = _setup(cands, "bon_ft", score="prob")
    (resp,) = BonPolicy("bon_ft", gen, cfg, verifier=ver).plan([run.messages()], None, [run.context()])
    assert read_plan(resp, len(SPACE))[1] == [SPACE.id("find a Mug")]


def test_no_verdict_counts_as_no():
    cands = [(_text("find a Fridge"), -1.0), (_text("find a Mug"), -2.0)]
    run, gen, cfg, _ = _setup(cands, "bon_zs", m=2)
    ver = FakeVerifier({"find a Fridge": [None, None], "find a Mug": ["yes", None]})
    (resp,) = BonPolicy("bon_zs", gen, cfg, verifier=ver).plan([run.messages()], None, [run.context()])
    assert read_plan(resp, len(SPACE))[1] == [SPACE.id("find a Mug")]


def test_oracle_ceiling_picks_the_correct_first_action_and_single_unit_cuts_the_plan():
    cands = [
        (_text("pick up the Mug", "find a Mug"), -0.5),  # wrong: not within reach
        (_text("find a Fridge"), -1.0),  # neutral
        (_text("find a Mug", "pick up the Mug", "find a DiningTable"), -4.0),  # correct, least likely
    ]
    run, gen, cfg, _ = _setup(cands, "bon_oracle")
    (resp,) = BonPolicy("bon_oracle", gen, cfg).plan([run.messages()], None, [run.context()])
    assert read_plan(resp, len(SPACE))[1] == [
        SPACE.id(n) for n in ("find a Mug", "pick up the Mug", "find a DiningTable")
    ]
    run, gen, cfg, _ = _setup(cands, "bon_oracle", unit="single")
    (resp,) = BonPolicy("bon_oracle", gen, cfg).plan([run.messages()], None, [run.context()])
    assert read_plan(resp, len(SPACE)) == ("ok", [SPACE.id("find a Mug")])
    assert json.loads(resp)["executable_plan"] == [{"action_id": SPACE.id("find a Mug"), "action_name": "find a Mug"}]


def test_greedy_records_live_candidates_for_coverage():
    cands = [(_text("find a Fridge"), -1.0), (_text("pick up the Mug"), -2.0), (_text("find a Mug"), -3.0)]
    run, gen, cfg, ep = _setup(cands, "greedy", coverage_k=(1, 2, 3))
    pol = BonPolicy("greedy", gen, cfg, live=True)
    (resp,) = pol.plan([run.messages()], None, [run.context()])
    assert read_plan(resp, len(SPACE))[1] == [SPACE.id("find a Fridge")]  # greedy: the one answer
    assert [c["n"] for c in gen.calls] == [1, 3] and gen.calls[0]["temperature"] == 0.0
    st = pol.pop_stats(ep["episode_id"])
    assert st["policy_samples"] == 1 and st["verifications"] == 0 and "live_seconds" in st
    (live,) = st["live"]
    assert live["greedy"] == {"a": SPACE.id("find a Fridge"), "label": "neutral"}
    assert [(c["name"], c["label"]) for c in live["cands"]] == [
        ("find a Fridge", "neutral"),
        ("pick up the Mug", "wrong"),
        ("find a Mug", "correct"),
    ]
    cov = coverage([live], (1, 2, 3))
    assert cov["greedy_correct_rate"] == 0.0 and cov["coverage_at"] == {"1": 0.0, "2": 0.0, "3": 1.0}
    assert cov["distinct_first_actions"] == 3.0


def test_a_verified_selector_needs_a_verifier():
    with pytest.raises(ValueError, match="needs a verifier"):
        BonPolicy("bon_ft", FakeGen([]), BonConfig())
