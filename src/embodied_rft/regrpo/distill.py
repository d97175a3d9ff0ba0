"""Distillation's RoT options (``teacher.rot``, docs/regrpo.md §3): the reasoning of each RoT sample, and the
clean:RoT mix of ``sft.jsonl``.

Input: the decomposed samples distillation answered, their accepted canonical responses (``None`` where none was
kept), the :class:`~.config.RotDistillConfig` and, for the paper-scale recipe, the teacher and distillation's
request machinery (``teacher/distill.py`` ``_Run``: retries, pacing, budget, the persistent answer cache). Output:
the accepted responses rewritten in place — a RoT sample's ``reasoning_and_reflection`` becomes its triple
(``reflection: rot``), another sample's triple of about the same length (``shuffled``) or the reasoning of a step
after a successful action, with no word on the failure (``bare``: the scripted teacher's brief wording); its plan
stays the validated corrected plan — records dropped to reach ``clean_ratio``, and the counters for
``metrics/distill.json``.

Who writes a triple: the scripted teacher (``write.scripted_triple``: from the simulator's feedback, several
wordings) or, with ``teacher.backend: openai``, the teacher itself through :func:`triple_request` — asked once per
sample and cached like a plan (a rerun is free), its JSON read back, and kept only if it passes the gates
(``text.gate``); a request that gave up or a triple that fails a gate keeps the scripted triple and is counted
(``fallback``), so the data never holds an ungrounded reflection.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from typing import Any

from ..data.response import parse_response
from ..teacher.scripted import brief_next
from .config import ERROR_TYPES, RotDistillConfig
from .text import Triple, clause, format_triple, gate, parse_triple
from .write import scripted_triple, shuffled, triple_rng

log = logging.getLogger(__name__)

DEFINITIONS = {
    "GroundingDrift": "the right verb on the wrong object or place (it executed, silently)",
    "ToolMismatch": "the wrong action for the object (e.g. picking up before finding it)",
    "ArgInvalid": "an object that does not exist here or is out of reach",
    "InfoInsufficient": "a precondition not met yet (a closed container, a full or empty hand, no knife)",
}
SYSTEM = (
    "You write the reflection of a household robot whose last action went wrong. You are given what the robot was "
    "shown, its failed action, the simulator's feedback after it, the error type and the corrected plan. Return "
    'STRICT JSON only: {"error_type": <the given type>, "evidence": <one short sentence quoting a concrete phrase of '
    'the feedback or observation>, "fix_plan": <one short sentence saying what to do next, in words>}.'
)


def triple_request(sample: dict) -> dict:
    """The teacher 'sample' that asks for one RoT sample's triple: its id and chat messages."""
    rot = sample["rot"]
    plan = "; ".join(f"{i}. {name}" for i, (_, name) in enumerate(rot["corrected"], 1))
    user = (
        f"{sample['prompt'][-1]['content']}\n\n"
        f"Failed action: '{rot['failed_action'][1]}'\n"
        f"Error type: {rot['error_type']} ({DEFINITIONS[rot['error_type']]})\n"
        f"Simulator feedback and observation after it:\n{rot['o_fail']}\n"
        f"Corrected remaining plan: {plan}"
    )
    return {
        "sample_id": f"{sample['sample_id']}:rot",
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
        "image": None,
    }


def read_teacher_triple(text: str, max_chars: int) -> Triple | None:
    """The triple of a teacher's JSON answer (fields cut at ``max_chars``), or None."""
    obj = parse_response(text)
    if not isinstance(obj, dict):
        return parse_triple(text)
    vals = [obj.get(k) for k in ("error_type", "evidence", "fix_plan")]
    if not all(isinstance(v, str) and v.strip() for v in vals):
        return None
    return Triple(*(clause(str(v)[: 4 * max_chars])[:max_chars] for v in vals))


def _teacher_triples(cfg: RotDistillConfig, samples: list[dict], idx: list[int], teacher: Any, run: Any):
    from ..teacher.cache import cache_key

    todo: dict[str, tuple[dict, int]] = {}
    key_of: dict[int, str] = {}
    for i in idx:
        req = triple_request(samples[i])
        key_of[i] = cache_key(teacher.request(req, 0), 0)
        todo.setdefault(key_of[i], (req, 0))
    got, missing = run.answers(todo, desc="RoT triples")
    out: dict[int, Triple | None] = {}
    for i in idx:
        answer = got.get(key_of[i])
        out[i] = read_teacher_triple(answer.text, cfg.max_chars) if answer is not None else None
    return out, Counter(missing.values())


def _mix(cfg: RotDistillConfig, samples: list[dict], accepted: list) -> dict[str, int]:
    """Drop records (``accepted[i] = None``) until clean / (clean + RoT) is ``cfg.clean_ratio``."""
    clean = [i for i, s in enumerate(samples) if accepted[i] is not None and "rot" not in s]
    rot = [i for i, s in enumerate(samples) if accepted[i] is not None and "rot" in s]
    r = float(cfg.clean_ratio or 0.5)
    if len(clean) * (1 - r) > len(rot) * r:  # more clean records than the ratio allows: subsample them
        keep_clean, keep_rot = min(len(clean), round(len(rot) * r / (1 - r))), len(rot)
    else:
        keep_clean, keep_rot = len(clean), min(len(rot), round(len(clean) * (1 - r) / r))

    def order(ix: list[int]) -> list[int]:
        return sorted(ix, key=lambda i: hashlib.sha256(f"{cfg.seed}:{samples[i]['sample_id']}".encode()).digest())

    for i in order(clean)[keep_clean:] + order(rot)[keep_rot:]:
        accepted[i] = None
    return {"clean": len(clean), "rot": len(rot), "kept_clean": keep_clean, "kept_rot": keep_rot}


def apply_rot(
    cfg: RotDistillConfig, samples: list[dict], accepted: list, *, teacher: Any = None, run: Any = None
) -> dict[str, Any]:
    """Rewrite and subsample ``accepted`` in place (module docstring); returns the counters."""
    idx = [i for i, s in enumerate(samples) if "rot" in s and accepted[i] is not None]
    info: dict[str, Any] = {"reflection": cfg.reflection, "rot_samples": len(idx)}
    if cfg.reflection == "bare" and idx:
        for i in idx:
            obj = json.loads(accepted[i])
            s = samples[i]
            # the next step as the answer's language plan words it (the brief wording joins its steps with ", ")
            nxt = str(obj["language_plan"]).split(", ")[0]
            obj["reasoning_and_reflection"] = brief_next(
                triple_rng(cfg.seed, s["sample_id"]), len(s["history"]), len(obj["executable_plan"]), nxt
            )
            accepted[i] = json.dumps(obj, ensure_ascii=False)
    elif cfg.reflection != "none" and idx:
        asked, gave_up = ({}, Counter())
        if teacher is not None and getattr(teacher, "cached", False) and run is not None:
            asked, gave_up = _teacher_triples(cfg, samples, idx, teacher, run)
        source: Counter[str] = Counter()
        problems: Counter[str] = Counter()
        texts: dict[int, str] = {}
        for i in idx:
            s = samples[i]
            t = asked.get(i)
            bad = gate(t, s["rot"], s["prompt"][-1]["content"], s["step"]) if i in asked else ["not asked"]
            if i in asked:
                problems.update(b.split(":")[0] for b in bad)
            if bad:
                t = scripted_triple(s, triple_rng(cfg.seed, s["sample_id"]))
                source["fallback" if i in asked else "scripted"] += 1
            else:
                source["teacher"] += 1
            texts[i] = format_triple(t)
        info.update(source=dict(source), teacher_problems=dict(problems), gave_up=dict(gave_up))
        if cfg.reflection == "shuffled":
            sh = shuffled([(samples[i]["sample_id"], texts[i]) for i in idx], cfg.seed)
            diffs = [abs(len(sh[samples[i]["sample_id"]]) - len(texts[i])) for i in idx]
            texts = {i: sh[samples[i]["sample_id"]] for i in idx}
            info["shuffled_mean_abs_len_diff"] = round(sum(diffs) / len(diffs), 2)
        for i in idx:
            obj = json.loads(accepted[i])
            obj["reasoning_and_reflection"] = texts[i]
            accepted[i] = json.dumps(obj, ensure_ascii=False)
        info["reflection_chars_mean"] = round(sum(len(texts[i]) for i in idx) / len(idx), 1)
        info["per_type"] = {t: sum(samples[i]["rot"]["error_type"] == t for i in idx) for t in ERROR_TYPES}
    if cfg.clean_ratio is not None:
        info["mix"] = _mix(cfg, samples, accepted)
    return info


__all__ = ["DEFINITIONS", "SYSTEM", "apply_rot", "read_teacher_triple", "triple_request"]
