"""ReGRPO's inference trigger as an evaluation policy (``evaluate.reflection``; docs/regrpo.md §6).

Input: a generation backend (the ``fast`` one reports each completion's summed token log-prob), the batch of
planning prompts of one lockstep round and their :class:`~embodied_rft.evaluate.policy.PlanContext` (episode and
executed actions). Output: one response per prompt, plus per-episode counts (:meth:`ReflectionPolicy.episode_stats`,
stored in each episode result under ``reflection`` and summed by :func:`summarize`).

A reflection block (``regrpo/text.py``: ErrorType/Evidence/FixPlan in ``reasoning_and_reflection``) is *allowed*
at a planner call iff the trigger fires: the last executed action failed, the observation is empty (the agent
stands at a place that shows nothing but itself: ``You see: <place>.``), or the answer's confidence u = exp(mean
token log-prob of the first answer) is below the mean u of the episode's earlier calls (never at its first call).
How the tiny model is held to it (mode ``regrpo``), at most one reflection and one regeneration per call:

1. the policy answers as usual (greedy): R0, with u;
2. allowed and R0 reflects, or not allowed and R0 does not: R0 is the answer;
3. allowed but R0 does not reflect: the answer is regenerated with the assistant turn prefilled up to the opening
   of a reflection — R0's ``visual_state_description``, then ``"reasoning_and_reflection": "ErrorType:`` — and the
   model continues the triple and the plan (the backend continues a final assistant message marked
   ``"prefix": true``, ``generation/hf.py``);
4. not allowed but R0 reflects: the answer is regenerated with the reflection removed — prefilled with R0's visual
   description, its reasoning before the first marker and ``"language_plan": "`` — so the plan is decoded again
   without the reflection in its context;
5. a regenerated answer whose plan cannot be read falls back to R0 (counted).

Mode ``free`` answers R0 always and only records what the trigger would have done and R0's reflections; every
count is per planner call: calls, calls after a failed / a successful action, triggers by reason, regenerations,
spontaneous reflection tokens (R0's) after a success and after a failure, the final answers' reflection tokens,
and every generated token (the cost of the second pass). Tokens are the policy tokenizer's.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..evaluate.episode import read_plan
from ..evaluate.policy import ModelPolicy, PlanContext
from ..world.oracle import WorldOracle
from .text import MARKERS, reflection_span

MODES = ("none", "free", "regrpo")
STAT_KEYS = (
    "calls",
    "calls_after_failure",
    "calls_after_success",
    "triggered",
    "trigger_failure",
    "trigger_empty",
    "trigger_low_confidence",
    "confidence_calls",
    "regenerated_open",
    "regenerated_suppress",
    "regeneration_fallback",
    "spontaneous_reflections",
    "spontaneous_tokens_after_success",
    "spontaneous_tokens_after_failure",
    "final_reflections",
    "final_reflection_tokens",
    "final_reflection_tokens_after_success",
    "multi_reflection",
    "generated_tokens",
)


def observation_empty(observation: str) -> bool:
    """The agent's place shows nothing but itself (``You see: Drawer (closed).``): nothing to act on there."""
    for line in observation.split("\n"):
        if line.startswith("You see: "):
            rest = line.removeprefix("You see: ")
            return "[" not in rest and ";" not in rest
    return False


def _prefix(r0: str, mode: str) -> str:
    """The assistant prefill of a regeneration (module docstring, steps 3 and 4)."""
    from ..data.response import parse_response

    obj = parse_response(r0)
    obj = obj if isinstance(obj, dict) else {}
    visual = obj.get("visual_state_description")
    head = '{"visual_state_description": ' + json.dumps(visual if isinstance(visual, str) else "", ensure_ascii=False)
    if mode == "open":
        return head + ', "reasoning_and_reflection": "ErrorType:'
    reasoning = obj.get("reasoning_and_reflection")
    reasoning = reasoning if isinstance(reasoning, str) else ""
    cut = min((reasoning.find(m) for m in MARKERS if m in reasoning), default=len(reasoning))
    keep = reasoning[:cut].strip()
    return head + ', "reasoning_and_reflection": ' + json.dumps(keep, ensure_ascii=False) + ', "language_plan": "'


class ReflectionPolicy(ModelPolicy):
    """A model policy under the ReGRPO trigger (module docstring); ``mode`` is ``free`` or ``regrpo``."""

    def __init__(self, generator: Any, mode: str = "regrpo") -> None:
        super().__init__(generator)
        if mode not in ("free", "regrpo"):
            raise ValueError(f"evaluate.reflection: {mode!r} is not one of ['free', 'regrpo']")
        self.mode = mode
        self._stats: dict[str, Counter] = {}
        self._us: dict[str, list[float]] = {}
        self._oracles: dict[str, WorldOracle] = {}
        tok = getattr(generator, "tokenizer", None)
        self._count = (lambda t: len(tok(t, add_special_tokens=False)["input_ids"])) if tok is not None else None

    def tokens(self, text: str) -> int:
        span = reflection_span(text)
        if not span:
            return 0
        return self._count(span) if self._count is not None else len(span.split())

    def episode_stats(self, episode_id: str) -> dict[str, int]:
        """The counts of one finished episode (and forget it)."""
        self._us.pop(episode_id, None)
        self._oracles.pop(episode_id, None)
        st = self._stats.pop(episode_id, Counter())
        return {k: int(st[k]) for k in STAT_KEYS}

    def _observation(self, ctx: PlanContext) -> str:
        eid = ctx.episode["episode_id"]
        if eid not in self._oracles:
            self._oracles[eid] = WorldOracle(ctx.episode)
        return self._oracles[eid].rebuild(ctx.executed).observe_text()

    def plan(
        self,
        messages_batch: Sequence[list[dict]],
        images: Sequence[Any] | None = None,
        contexts: Sequence[PlanContext] | None = None,
    ) -> list[str]:
        if contexts is None or len(contexts) != len(messages_batch):
            raise ValueError("ReflectionPolicy needs one PlanContext per prompt (the trigger reads the episode)")
        outs = self.generator.complete(list(messages_batch), images, n=1)
        texts = [cs[0].text for cs in outs]
        spent = [cs[0].completion_tokens for cs in outs]
        redo: dict[int, str] = {}
        for i, (ctx, cs) in enumerate(zip(contexts, outs, strict=True)):
            c, eid = cs[0], ctx.episode["episode_id"]
            st = self._stats.setdefault(eid, Counter())
            us = self._us.setdefault(eid, [])
            failed = bool(ctx.executed) and not ctx.executed[-1][2]
            u = math.exp(c.logprob / c.completion_tokens) if c.logprob is not None and c.completion_tokens else None
            low = u is not None and bool(us) and u < sum(us) / len(us)
            empty = observation_empty(self._observation(ctx))
            if u is not None:
                us.append(u)
                st["confidence_calls"] += 1
            allowed = failed or empty or low
            refl = self.tokens(c.text)
            st.update(
                calls=1,
                calls_after_failure=failed,
                calls_after_success=not failed,
                triggered=allowed,
                trigger_failure=failed,
                trigger_empty=empty,
                trigger_low_confidence=low,
                spontaneous_reflections=refl > 0,
            )
            st["spontaneous_tokens_after_failure" if failed else "spontaneous_tokens_after_success"] += refl
            if self.mode == "regrpo" and allowed != (refl > 0):
                redo[i] = "open" if allowed else "suppress"
        if redo:
            idx = sorted(redo)
            prefill = [{"role": "assistant", "content": _prefix(texts[i], redo[i]), "prefix": True} for i in idx]
            batch = [[*messages_batch[i], p] for i, p in zip(idx, prefill, strict=True)]
            imgs = [images[i] for i in idx] if images is not None else None
            for i, cs in zip(idx, self.generator.complete(batch, imgs, n=1), strict=True):
                st = self._stats[contexts[i].episode["episode_id"]]
                st["regenerated_" + redo[i]] += 1
                spent[i] += cs[0].completion_tokens
                full = batch[idx.index(i)][-1]["content"] + cs[0].text
                if read_plan(full, len(contexts[i].space))[0] == "ok":
                    texts[i] = full
                else:
                    st["regeneration_fallback"] += 1
        for i, ctx in enumerate(contexts):
            st = self._stats[ctx.episode["episode_id"]]
            tok = self.tokens(texts[i])
            failed = bool(ctx.executed) and not ctx.executed[-1][2]
            st.update(
                final_reflections=tok > 0,
                final_reflection_tokens=tok,
                final_reflection_tokens_after_success=0 if failed else tok,
                multi_reflection=reflection_span(texts[i]).count(MARKERS[0]) > 1,
                generated_tokens=spent[i],
            )
        self.last_completion_tokens = spent
        return texts


def summarize(stats: Sequence[dict]) -> dict[str, Any]:
    """Totals over episodes' ``reflection`` counts, and the rates the report shows (per planner call)."""
    tot = Counter()
    for s in stats:
        tot.update({k: int(s.get(k, 0)) for k in STAT_KEYS})
    calls = tot["calls"]

    def per(num: str, den: str) -> float | None:
        return round(tot[num] / tot[den], 4) if tot[den] else None

    return {
        **{k: tot[k] for k in STAT_KEYS},
        "trigger_rate": per("triggered", "calls"),
        "reflection_rate": per("final_reflections", "calls"),
        "spontaneous_tokens_per_call_after_success": per("spontaneous_tokens_after_success", "calls_after_success"),
        "spontaneous_tokens_per_call_after_failure": per("spontaneous_tokens_after_failure", "calls_after_failure"),
        "final_reflection_tokens_per_call": per("final_reflection_tokens", "calls"),
        "generated_tokens_per_call": round(tot["generated_tokens"] / calls, 2) if calls else None,
    }


__all__ = ["MODES", "STAT_KEYS", "ReflectionPolicy", "observation_empty", "summarize"]
