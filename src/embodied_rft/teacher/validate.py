"""Rejection sampling: is a teacher answer good enough to train on?

Input: the answer text, the decomposed sample it answers, the validation mode and (for ``simulate``) the
sample's episode. Output: a :class:`Verdict` — accepted, or the failure kind (``bad_json``: no response
object could be parsed; ``invalid_plan``: not well formed; ``wrong_plan``: well formed but the plan is not
right) — and, when well formed, the canonical response string to train on.

Well formed: the four EB keys, three string fields, a non-empty ``executable_plan`` whose every step is an
(int ``action_id``, str ``action_name``) pair of the sample's action map (global actions plus the scene's
extras from the label). Right, by mode:

- ``none``: well formed is enough.
- ``prefix`` (default): compared with the gold remaining plan a_n..a_k step by step. With ``min_prefix``
  null the plan must equal the gold plan exactly: a shorter plan would teach the student to stop early,
  and steps past a_k are at best useless (the goal already holds). With ``min_prefix = m`` the plan must be
  a prefix of the gold plan of at least min(m, k) steps — an EB agent replans after executing a plan, so a
  correct partial plan is still a correct answer; steps beyond the gold plan are still rejected.
- ``simulate``: the episode's simulator replays the history's action ids, then runs the plan's ids in order
  (EB executes ids only); accepted iff the goal holds after some step and no step before it failed (EB ends
  the episode at success, so later steps are never run). This accepts
  correct plans that differ from the expert's (another receptacle instance, a different order).

The paper does not say how (or whether) it filtered Gemini's answers; this module is the project's choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..data.response import RESPONSE_KEYS, extract_plan, format_response, parse_response
from .scripted import parse_label


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    kind: str | None = None  # failure kind when not accepted: bad_json | invalid_plan | wrong_plan
    reason: str = ""
    canonical: str | None = None  # the response as format_response writes it (when well formed)


def _well_formed(obj: dict, sample: dict) -> tuple[list[tuple[int, str]] | None, str]:
    missing = [k for k in RESPONSE_KEYS if k not in obj]
    if missing:
        return None, f"missing keys {missing}"
    for k in RESPONSE_KEYS[:3]:
        if not isinstance(obj[k], str):
            return None, f"{k} is {type(obj[k]).__name__}, not a string"
    if not isinstance(obj["executable_plan"], list):
        return None, "executable_plan is not a list"
    steps = extract_plan(obj)
    if not steps:
        return None, "executable_plan is empty"
    _, space = parse_label(sample)
    for i, st in enumerate(steps):
        if not st.well_typed:
            return None, f"executable_plan[{i}] is not an (int action_id, str action_name) pair"
        if not space.valid_pair(st.action_id, st.action_name):
            return None, f"executable_plan[{i}] ({st.action_id}, {st.action_name!r}) is not in the action map"
    return [(s.action_id, s.action_name) for s in steps], ""


def check_prefix(plan: list[tuple[int, str]], gold: list[tuple[int, str]], min_prefix: int | None) -> str | None:
    """None if ``plan`` is right against ``gold`` (see module docstring), else the reason."""
    for i, (p, g) in enumerate(zip(plan, gold)):
        if p != g:
            return f"step {i} is {p[1]!r}, gold has {g[1]!r}"
    if len(plan) > len(gold):
        return f"{len(plan) - len(gold)} step(s) beyond the gold plan's {len(gold)}"
    need = len(gold) if min_prefix is None else min(min_prefix, len(gold))
    if len(plan) < need:
        return f"plan has {len(plan)} step(s), needs {need} of the gold plan's {len(gold)}"
    return None


def check_simulate(plan: list[tuple[int, str]], sample: dict, episode: dict) -> str | None:
    """None if running ``plan`` after the sample's history reaches the episode's goal, else the reason."""
    from ..world import Simulator

    sim = Simulator.from_episode(episode)
    for h in sample.get("history") or []:
        sim.step(int(h["action_id"]))  # replayed as recorded; a step that failed then fails again
    # The goal is checked after each step, never before the first: expert plans end with tidy-up steps
    # (close the drawer) taken after the goal holds, and their samples must still accept the gold plan.
    for i, (aid, name) in enumerate(plan):
        res = sim.step(aid)
        if not res.success:
            return f"step {i} ({name!r}) failed: {res.feedback}"
        if sim.is_success():
            return None
    return f"goal not reached after {len(plan)} step(s) (progress {sim.progress():.2f})"


def validate_answer(
    text: str, sample: dict, mode: str = "prefix", min_prefix: int | None = None, episode: dict | None = None
) -> Verdict:
    obj = parse_response(text)
    if obj is None:
        return Verdict(False, "bad_json", "no JSON response object in the answer")
    plan, why = _well_formed(obj, sample)
    if plan is None:
        return Verdict(False, "invalid_plan", why)
    canonical = format_response(
        plan,
        visual_state_description=obj["visual_state_description"],
        reasoning_and_reflection=obj["reasoning_and_reflection"],
        language_plan=obj["language_plan"],
    )
    if mode == "prefix":
        gold, _ = parse_label(sample)
        why = check_prefix(plan, gold, min_prefix)
    elif mode == "simulate":
        if episode is None:
            raise KeyError(
                f"sample {sample.get('sample_id')}: validate=simulate needs its episode {sample.get('episode_id')!r}"
            )
        why = check_simulate(plan, sample, episode)
    elif mode == "none":
        why = None
    else:
        raise ValueError(f"unknown validation mode {mode!r}")
    if why is not None:
        return Verdict(False, "wrong_plan", why, canonical)
    return Verdict(True, None, "", canonical)
