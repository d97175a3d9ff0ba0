"""Best-of-N action selection as an evaluation policy (VeGAS §3.3; docs/vegas.md §5).

Input to :meth:`BonPolicy.plan`: a batch of planning prompts with their :class:`~embodied_rft.evaluate.policy.PlanContext`
(the episode and what has been executed), as every evaluation policy gets them. Output: one response per prompt,
which the episode runner parses and executes under EB's rules (``evaluate/episode.py``).

Per planner call the policy samples candidates through its generation backend (``complete(..., n=N)``; the
``fast`` backend prefills each prompt once for its N samples), then a selector picks one:

- ``greedy``: one greedy answer (temperature 0), EB's evaluation; ``sample``: one draw at temperature T;
- ``sc``: self-consistency, the first action most candidates start with;
- ``bon_zs``, ``bon_zs_smollm2``, ``bon_ft``: each distinct first action among the readable candidates is verified
  ``m`` times by a verifier (sampled at ``verifier_temperature``; ``yes`` = 1, ``no`` or no verdict = 0); its score
  is the mean. With ``score: prob`` it is instead the verifier's P(yes) (``Verifier.p_yes``, one greedy
  verification): the value the mean of m draws estimates. Candidates with the same first action share those
  verifications (the prompt shows the reasoning of the most likely of them). With ``prior_weight`` > 0 the score
  is the verifier score's log-odds plus that weight times the log of the share of the N candidates that start with
  the action (:func:`with_prior`: the policy's own prior, which the argmax of P(yes) alone throws away);
- ``bon_oracle``: the world oracle's label of the first action (correct 1, neutral 0.5, wrong 0): the ceiling
  of what any verifier can pick from this candidate set.

:func:`choose` takes the candidate with the best score; among equal scores (and for ``sc``, equal counts) the
one with the highest policy log-prob (the sampler's summed token log-probs; the earliest sample when the backend
reports none). Unreadable candidates are chosen only when nothing else is left (then the call is a parse
failure, EB's rule). ``unit: first`` executes the chosen candidate's whole plan, as EB does; ``unit: single``
executes only its first action, so the policy replans after every step. ``trigger: replan`` (not the paper's)
answers an episode's first planner call greedily and selects only on the replanning calls that follow.

Per episode the policy counts its planner calls, policy samples, verifications, the policy's generated tokens, the
verification prompts' tokens and seconds (:meth:`pop_stats`,
stored with the episode's result; the live candidates' sampling is timed apart). With ``live=True`` (the greedy run) it also samples N candidates at each call
without executing them and records each distinct first action with its oracle label and the verification
prompt's inputs: candidate coverage and the verifiers' AUROC on the policy's own states (``vegas/bon.py``).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import as_dict
from ..data.response import parse_response
from ..evaluate.episode import read_plan
from ..world.oracle import Judgement, WorldOracle
from .bon_config import VERIFIED_SELECTORS as VERIFIED
from .bon_config import BonConfig
from .calls import combined_score
from .text import facts_for, verification_messages

ORACLE_SCORE = {"correct": 1.0, "neutral": 0.5, "wrong": 0.0}


@dataclass(frozen=True)
class Candidate:
    """One sampled response: its plan as EB reads it, its log-prob and its reasoning."""

    index: int
    text: str
    status: str
    ids: tuple[int, ...]
    logprob: float | None
    reasoning: str
    tokens: int

    @property
    def first(self) -> int | None:
        return self.ids[0] if self.status == "ok" and self.ids else None


def candidates_of(completions: Sequence[Any], n_actions: int) -> list[Candidate]:
    out = []
    for i, c in enumerate(completions):
        status, ids = read_plan(c.text, n_actions)
        obj = parse_response(c.text)
        reasoning = obj.get("reasoning_and_reflection") if isinstance(obj, dict) else None
        out.append(Candidate(i, c.text, status, tuple(ids), c.logprob, str(reasoning or ""), int(c.completion_tokens)))
    return out


def _lp(c: Candidate) -> float:
    return c.logprob if c.logprob is not None and math.isfinite(c.logprob) else -math.inf


def best_per_first(cands: Sequence[Candidate]) -> dict[int, Candidate]:
    """The most likely candidate for each distinct first action (earliest on equal log-probs)."""
    best: dict[int, Candidate] = {}
    for c in cands:
        if c.first is not None and (c.first not in best or _lp(c) > _lp(best[c.first])):
            best[c.first] = c
    return best


def with_prior(scores: Mapping[int, float], cands: Sequence[Candidate], weight: float) -> dict[int, float]:
    """Each first action's verifier score combined with the policy's prior: the share of the N candidates that
    start with it (``bon.prior_weight``; ``vegas/calls.py`` ``combined_score``, which the per-call table's
    weight search uses too)."""
    counts = Counter(c.first for c in cands if c.first is not None)
    return {a: combined_score(p, counts[a], len(cands), weight) for a, p in scores.items()}


def choose(selector: str, cands: Sequence[Candidate], scores: Mapping[int, float] | None = None) -> int:
    """The index (into ``cands``) of the candidate ``selector`` executes (module docstring)."""
    if not cands:
        raise ValueError("no candidates to choose from")
    readable = [c for c in cands if c.first is not None]
    if not readable:
        return max(cands, key=lambda c: (_lp(c), -c.index)).index
    if selector in ("greedy", "sample"):
        return cands[0].index
    if selector == "sc":
        counts = Counter(c.first for c in readable)
        key = lambda c: (counts[c.first], _lp(c), -c.index)  # noqa: E731
    else:
        if scores is None:
            raise ValueError(f"selector {selector!r} needs a score per first action")
        key = lambda c: (scores.get(c.first, 0.0), _lp(c), -c.index)  # noqa: E731
    return max(readable, key=key).index


class BonPolicy:
    """A selector over a policy generator's candidates (see the module docstring)."""

    def __init__(
        self, selector: str, generator: Any, cfg: BonConfig, *, verifier: Any = None, live: bool = False
    ) -> None:
        if selector in VERIFIED and verifier is None:
            raise ValueError(f"selector {selector!r} needs a verifier")
        self.selector = selector
        self.gen = generator
        self.cfg = cfg
        self.verifier = verifier
        self.live = live
        self.rounds = 0
        self.last_completion_tokens: list[int] | None = None
        self._oracles: dict[str, WorldOracle] = {}
        self._stats: dict[str, dict] = {}
        self._prompt_tokens: list[int] = []

    def _oracle(self, ep: dict) -> WorldOracle:
        o = self._oracles.get(ep["episode_id"])
        if o is None:
            o = self._oracles[ep["episode_id"]] = WorldOracle(ep)
        return o

    def pop_stats(self, episode_id: str) -> dict:
        """This episode's counts (calls, policy samples, verifications, seconds, live candidates), then forget it."""
        self._oracles.pop(episode_id, None)
        return self._stats.pop(episode_id, {"bon_calls": 0, "policy_samples": 0, "verifications": 0, "seconds": 0.0})

    def plan(
        self,
        messages_batch: Sequence[list[dict]],
        images: Sequence[Any] | None = None,
        contexts: Sequence[Any] | None = None,
    ) -> list[str]:
        if contexts is None or len(contexts) != len(messages_batch):
            raise ValueError("BonPolicy needs one PlanContext per prompt")
        if self.cfg.trigger == "always" or self.selector == "greedy":
            return self._plan(messages_batch, images, contexts, self.selector)
        # trigger `replan`: an episode's first planner call is answered greedily (EB's one-shot plan), the
        # replanning calls by the selector; both count in this selector's cost columns
        responses: list[str] = [""] * len(contexts)
        tokens: list[int] = [0] * len(contexts)
        for sel in ("greedy", self.selector):
            idx = [i for i, ctx in enumerate(contexts) if (ctx.call_index == 0) == (sel == "greedy")]
            if idx:
                sub_images = None if images is None else [images[i] for i in idx]
                outs = self._plan([messages_batch[i] for i in idx], sub_images, [contexts[i] for i in idx], sel)
                for i, r, t in zip(idx, outs, self.last_completion_tokens, strict=True):
                    responses[i], tokens[i] = r, t
        self.last_completion_tokens = tokens
        return responses

    def _plan(
        self, messages_batch: Sequence[list[dict]], images: Sequence[Any] | None, contexts: Sequence[Any], sel: str
    ) -> list[str]:
        """One batch answered by selector ``sel`` (this policy's, or greedy for the replan trigger's first calls)."""
        t0 = time.perf_counter()
        cfg = self.cfg
        seed = cfg.seed * 100_003 + self.rounds
        self.rounds += sel == self.selector  # the trigger's greedy calls draw nothing: the selector's seeds stay put
        n = 1 if sel in ("greedy", "sample") else cfg.n
        temp = 0.0 if sel == "greedy" else cfg.temperature
        outs = self.gen.complete(list(messages_batch), images, n=n, temperature=temp, top_p=cfg.top_p, seed=seed)
        cand_sets = [candidates_of(cs, len(ctx.space)) for cs, ctx in zip(outs, contexts, strict=True)]
        need_state = sel in VERIFIED or sel == "bon_oracle" or self.live
        states = [self._state(ctx) for ctx in contexts] if need_state else [None] * len(contexts)
        verifications = [0] * len(contexts)
        self._prompt_tokens = [0] * len(contexts)
        scores: list[dict[int, float] | None] = [None] * len(contexts)
        if sel == "bon_oracle":
            scores = [self._oracle_scores(ctx, st, cs) for ctx, st, cs in zip(contexts, states, cand_sets)]
        elif sel in VERIFIED:
            scores, verifications = self._verified_scores(contexts, states, cand_sets, seed)
        t_main = time.perf_counter() - t0
        live = [None] * len(contexts)
        if self.live:
            more = self.gen.complete(
                list(messages_batch), images, n=cfg.n, temperature=cfg.temperature, top_p=cfg.top_p, seed=seed + 7
            )
            live = [
                self._live_record(ctx, st, cands[0], candidates_of(cs, len(ctx.space)))
                for ctx, st, cands, cs in zip(contexts, states, cand_sets, more, strict=True)
            ]
        responses, tokens = [], []
        dt = t_main / len(contexts)
        dt_live = (time.perf_counter() - t0 - t_main) / len(contexts)
        for ctx, cands, sc, k, vt, rec in zip(
            contexts, cand_sets, scores, verifications, self._prompt_tokens, live, strict=True
        ):
            chosen = cands[choose(sel, cands, sc)]
            responses.append(self._response(chosen, ctx))
            tokens.append(chosen.tokens)
            st = self._stats.setdefault(
                ctx.episode["episode_id"], {"bon_calls": 0, "policy_samples": 0, "verifications": 0, "seconds": 0.0}
            )
            st["bon_calls"] += 1
            st["policy_samples"] += n
            st["verifications"] += k
            st["policy_tokens"] = st.get("policy_tokens", 0) + sum(c.tokens for c in cands)
            st["verifier_prompt_tokens"] = st.get("verifier_prompt_tokens", 0) + vt
            st["seconds"] = round(st["seconds"] + dt, 4)
            if rec is not None:
                st.setdefault("live", []).append(rec)
                st["live_seconds"] = round(st.get("live_seconds", 0.0) + dt_live, 4)
        self.last_completion_tokens = tokens
        return responses

    # ------------------------------------------------------------------ scores
    def _state(self, ctx: Any) -> tuple[Any, list[dict]]:
        return self._oracle(ctx.episode).replay(ctx.executed)

    def _oracle_scores(self, ctx: Any, state: tuple, cands: list[Candidate]) -> dict[int, float]:
        sim = state[0]
        oracle = self._oracle(ctx.episode)
        return {a: ORACLE_SCORE[oracle.judge(sim, a).label] for a in best_per_first(cands)}

    def _verified_scores(
        self, contexts: Sequence[Any], states: Sequence[tuple], cand_sets: Sequence[list[Candidate]], seed: int
    ) -> tuple[list[dict[int, float]], list[int]]:
        prompts, owners = [], []
        for i, (ctx, (sim, history), cands) in enumerate(zip(contexts, states, cand_sets, strict=True)):
            obs = sim.observe_text()
            for a, c in best_per_first(cands).items():
                prompts.append(
                    verification_messages(ctx.episode["instruction"], history, obs, c.reasoning, a, ctx.space.name(a))
                )
                owners.append((i, a))
        scores: list[dict[int, float]] = [{} for _ in contexts]
        counts = [0] * len(contexts)
        if self.cfg.score == "prob":
            for (i, a), (p, _, _) in zip(owners, self.verifier.p_yes(prompts), strict=True):
                scores[i][a] = p
                counts[i] += 1
        else:
            verdicts = self.verifier.verdicts(prompts, self.cfg.m, self.cfg.verifier_temperature, seed=seed)
            for (i, a), vs in zip(owners, verdicts, strict=True):
                scores[i][a] = sum(v == "yes" for v in vs) / len(vs)
                counts[i] += len(vs)
        # the cost column: verification prompt tokens per planner call, as the verifier counted them
        for (i, _), n in zip(
            owners, getattr(self.verifier, "last_prompt_tokens", None) or [0] * len(owners), strict=True
        ):
            self._prompt_tokens[i] += n
        if self.cfg.prior_weight:
            scores = [with_prior(s, cands, self.cfg.prior_weight) for s, cands in zip(scores, cand_sets, strict=True)]
        return scores, counts

    def _live_record(self, ctx: Any, state: tuple, greedy: Candidate, cands: list[Candidate]) -> dict:
        """One greedy-run planner call: the greedy first action's label, and each distinct sampled first action
        (in sampling order of first appearance) with its count, label and the verification prompt's inputs."""
        sim, history = state
        oracle = self._oracle(ctx.episode)
        judged: dict[int, Judgement] = {}

        def label(a: int) -> str:
            if a not in judged:
                judged[a] = oracle.judge(sim, a)
            return judged[a].label

        best = best_per_first(cands)
        counts = Counter(c.first for c in cands if c.first is not None)
        order = list(dict.fromkeys(c.first for c in cands if c.first is not None))
        return {
            "call": ctx.call_index,
            "greedy": {"a": greedy.first, "label": label(greedy.first) if greedy.first is not None else None},
            "firsts": [c.first for c in cands],
            "cands": [
                {
                    "a": a,
                    "name": ctx.space.name(a),
                    "n": counts[a],
                    "label": label(a),
                    "reasoning": best[a].reasoning,
                    # what a verification chain of thought about it says (vegas/policy_data.py trains on these)
                    "facts": as_dict(facts_for(sim, ctx.space.name(a), judged[a])),
                }
                for a in order
            ],
            "history": history,
            "observation": sim.observe_text(),
        }

    def _response(self, c: Candidate, ctx: Any) -> str:
        if self.cfg.unit == "single" and c.first is not None:
            step = {"action_id": c.first, "action_name": ctx.space.name(c.first)}
            return json.dumps({"reasoning_and_reflection": c.reasoning, "executable_plan": [step]})
        return c.text

    def close(self) -> None:
        close = getattr(self.gen, "close", None)
        if close is not None:
            close()


__all__ = [
    "ORACLE_SCORE",
    "VERIFIED",
    "BonPolicy",
    "Candidate",
    "best_per_first",
    "candidates_of",
    "choose",
    "with_prior",
]
