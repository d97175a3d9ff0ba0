"""The verifier's text: the verification prompt, the templated verification chain of thought, the verdict parser.

Input: what the verifier is shown — the instruction, the action history with the simulator's feedback, the current
observation, the candidate's reasoning and the candidate action — and, to write a training target, the simulator
facts of that action (:class:`Facts`: the goal, what is held, where the agent is, whether the action executes and
why not, the world oracle's label). Output:

- :func:`verification_messages`: the chat prompt (one user turn; the tiny preset's compact history format,
  docs/facts.md §4.2, and last the instruction to end with the verdict line, so a zero-shot model knows the format);
- :func:`verification_cot`: a short chain of thought over those facts, each sentence drawn from several
  wordings by a seeded RNG, ending with ``action_is_correct: yes`` or ``action_is_correct: no`` (or opening with it:
  ``synth.verdict: first``);
- :func:`parse_verdict`: ``yes`` / ``no`` / None from any verifier output (the last verdict line wins; quotes,
  JSON and case tolerated; never raises).

Only facts a careful reader of the prompt could establish go into the chain of thought (the goal's object and
receptacle, what is in hand, where the agent is, whether the action can execute there and what the simulator
would answer): the verifier learns to check them, not to recite hidden state. The paper's verification chains
of thought come from a model; ``synth.cot: teacher`` asks an OpenAI-compatible teacher instead (``vegas/cot.py``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import as_dict
from ..data.prompt import format_history
from ..schema import format_label
from ..world.actions import N_GLOBAL, split_action
from ..world.objects import BASINS, KNIVES, SLICED_TYPE, WHOLE_TYPE, base_type
from .templates import (
    BY_REASON,
    EXEC_BAD,
    EXEC_OK,
    FIND_ROLE,
    GOAL,
    GOAL_PHRASES,
    INSTRUCTION,
    PROMPT_FIELDS,
    STATE,
    VERDICT_KEY,
)

if TYPE_CHECKING:
    from ..teacher.scripted import ScriptedTeacher
    from ..world.actions import ActionSpace
    from ..world.episode import Goal
    from ..world.oracle import Judgement
    from ..world.simulator import Simulator

_VERDICT_RE = re.compile(r"""["']?action_is_correct["']?\s*[:=]\s*["']?\s*(yes|no)\b""", re.I)


@dataclass(frozen=True)
class Facts:
    """What the simulator and the oracle say about one candidate action (the chain of thought's material)."""

    # "find a Tomato", ... and the task in EB type names
    action: str
    task_type: str
    object_target: str
    parent_target: str | None
    toggle_target: str | None
    # the type held before the action (None: nothing) and the object the agent stands at (None: room middle)
    held: str | None
    place: str | None
    # the simulator's answer to the action, and the oracle's label and reason
    executes: bool
    feedback: str
    label: str
    reason: str
    # the action's object (None: it has none) and what it is to the task: task (named by the goal: its object,
    # receptacle, lamp, movable receptacle, or the slices of its object) | tool (a sink / microwave / fridge the
    # task type uses, a knife when it slices) | here (a find of the place the robot already stands at) | other.
    # In the records and the teacher's prompt (vegas/cot.py); in the templated chain of thought only on finds with
    # synth.find_sentence=relevance (a sentence stating it on every action made the tiny verifier worse on live
    # candidates: docs/experiments.md, VeGAS's verifier rounds)
    arg: str | None = None
    arg_role: str | None = None

    @property
    def verdict(self) -> str:
        return "yes" if self.label == "correct" else "no"


def facts_for(sim: Simulator, action: str, j: Judgement) -> Facts:
    """The chain of thought's facts about ``action`` in ``sim`` (before it runs) given the oracle's judgement ``j``."""
    g = sim.goal
    held = sim.holding()
    arg, role = argument_role(action, sim.task_type, g, sim.loc)
    return Facts(
        action=action,
        task_type=sim.task_type,
        object_target=g.object_target,
        parent_target=g.parent_target,
        toggle_target=g.toggle_target,
        held=held.type if held is not None else None,
        place=sim.loc,
        executes=j.executes,
        feedback=j.feedback,
        label=j.label,
        reason=j.reason,
        arg=arg,
        arg_role=role,
    )


_TOOLS = {
    "pick_clean_then_place_in_recep": BASINS | {"Faucet"},
    "pick_heat_then_place_in_recep": frozenset({"Microwave"}),
    "pick_cool_then_place_in_recep": frozenset({"Fridge"}),
}


def argument_role(action: str, task_type: str, goal: Goal, place: str | None) -> tuple[str | None, str | None]:
    """The action's object and its role in the task (``goal``, ``task_type``) with the robot at ``place`` (see
    :class:`Facts`): facts a reader of the instruction and the history can establish, so the chain of thought
    compares the action with the goal explicitly."""
    verb, arg = split_action(action)
    if arg is None:
        return None, None
    g = goal
    t = base_type(arg)
    named = {g.object_target, g.parent_target, g.toggle_target, g.mrecep_target} - {None}
    tools = set(_TOOLS.get(task_type, ()))
    if g.object_sliced:
        named.add(SLICED_TYPE.get(g.object_target, g.object_target))
        tools |= KNIVES
    if verb == "find a" and place == arg:
        return arg, "here"
    if t in named or WHOLE_TYPE.get(t) in named:
        return arg, "task"
    return arg, "tool" if t in tools else "other"


def verification_messages(
    instruction: str,
    history: Sequence[dict],
    observation: str,
    reasoning: str,
    action_id: int,
    action_name: str,
) -> list[dict]:
    """The verification prompt: one user message (see the module docstring)."""
    text = (
        f"Task: {instruction}\n"
        f"History:\n{format_history(history, compact=True)}\n"
        f"Observation: {observation}\n"
        f"{PROMPT_FIELDS[0]}{' '.join(str(reasoning).split()) or 'none'}\n"
        f"{PROMPT_FIELDS[1]}{action_id} {action_name}\n"
        f"{INSTRUCTION}"
    )
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------------------------------------- the chain of thought


_GOAL_BY_TASK = {
    "pick_clean_then_place_in_recep": 1,
    "pick_heat_then_place_in_recep": 2,
    "pick_cool_then_place_in_recep": 3,
    "pick_two_obj_and_place": 4,
    "look_at_obj_in_light": 5,
}


def _goal(f: Facts) -> str:
    phrase = GOAL_PHRASES[_GOAL_BY_TASK.get(f.task_type, 0)]
    place = f.toggle_target if f.task_type == "look_at_obj_in_light" else f.parent_target
    return phrase.format(o=f.object_target, p=place)


def _short_feedback(feedback: str) -> str:
    why = feedback.replace("Last action is invalid.", "").strip().rstrip(".")
    why = why.split(". ")[0]
    return why[:1].lower() + why[1:] if why else "it is not allowed here"


FIND_SENTENCES = ("exec", "relevance")
VERDICT_POSITIONS = ("last", "first")


def verification_cot(facts: Facts, rng: random.Random, find_sentence: str = "exec", verdict: str = "last") -> str:
    """The templated chain of thought for ``facts`` with its verdict line (module docstring).

    ``find_sentence`` (``synth.find_sentence``): ``exec`` states for every action whether the simulator accepts it;
    ``relevance`` states instead, for a ``find a X`` action, what X is to the task (:func:`argument_role`) — whether a
    find executes depends on objects the prompt does not list, so ``exec`` asks the verifier to guess it — and words a
    failed find's reason as one that makes no progress ("a failed action" would state the simulator's answer again).
    ``verdict`` (``synth.verdict``): the verdict line ``last`` (after the chain of thought) or ``first`` (before it); the
    sentences and their wording draws are the same either way."""
    if find_sentence not in FIND_SENTENCES:
        raise ValueError(f"synth.find_sentence: unknown value {find_sentence!r}; choose one of {list(FIND_SENTENCES)}")
    relevance = find_sentence == "relevance" and facts.action.startswith("find a ")
    if relevance and facts.arg_role not in FIND_ROLE:
        raise ValueError(
            f"synth.find_sentence=relevance: the facts of {facts.action!r} have arg_role {facts.arg_role!r}, "
            f"not one of {list(FIND_ROLE)}"
        )
    held = f"the {facts.held}" if facts.held else "nothing"
    place = f"the {facts.place}" if facts.place else "the middle of the room"
    # the draws in this order (goal, state, action, reason): exec's wording is what it was before the option existed
    first = rng.choice(GOAL).format(g=_goal(facts)) + " " + rng.choice(STATE).format(h=held, p=place)
    if relevance:
        action = rng.choice(FIND_ROLE[facts.arg_role]).format(o=facts.arg)
    elif facts.executes:
        action = rng.choice(EXEC_OK).format(a=facts.action)
    else:
        action = rng.choice(EXEC_BAD).format(a=facts.action, why=_short_feedback(facts.feedback))
    reason = "no_progress" if relevance and facts.reason == "invalid" else facts.reason
    return with_verdict(f"{first}\n{action} {rng.choice(BY_REASON[reason])}", facts.verdict, verdict)


def verification_record(
    ep: dict,
    rid: str,
    step: int,
    source: str,
    mode: str | None,
    history: Sequence[dict],
    observation: str,
    candidate: dict,
    facts: Facts,
    seed: int,
    find_sentence: str = "exec",
    verdict: str = "last",
) -> dict:
    """One verification record (docs/vegas.md §4): the prompt for ``candidate`` (``action_id``, ``action_name``,
    ``reasoning``) after ``history`` with ``observation``, and the templated chain of thought over ``facts`` (its
    wording seeded by ``seed`` and the record id ``rid``; ``find_sentence`` and ``verdict`` as
    :func:`verification_cot`) as the SFT chat ``messages``, with the facts behind them."""
    cot = verification_cot(facts, random.Random(f"{seed}:{rid}:cot"), find_sentence, verdict)
    return {
        "record_id": rid,
        "episode_id": ep["episode_id"],
        "task_type": ep["task_type"],
        "subset": ep.get("subset", "base"),
        "step": step,
        "source": source,
        "mode": mode,
        "executes": facts.executes,
        "label": facts.label,
        "reason": facts.reason,
        "verdict": facts.verdict,
        "instruction": ep["instruction"],
        "history": [dict(h) for h in history],
        "observation": observation,
        "candidate": dict(candidate),
        "facts": as_dict(facts),
        "messages": [
            *verification_messages(
                ep["instruction"],
                history,
                observation,
                candidate["reasoning"],
                candidate["action_id"],
                candidate["action_name"],
            ),
            {"role": "assistant", "content": cot},
        ],
    }


def with_verdict(cot: str, verdict: str, position: str = "last") -> str:
    """``cot`` with any verdict it states removed and the line ``action_is_correct: <verdict>`` put ``last`` (appended)
    or ``first`` (before the chain of thought)."""
    if position not in VERDICT_POSITIONS:
        raise ValueError(f"synth.verdict: unknown value {position!r}; choose one of {list(VERDICT_POSITIONS)}")
    body = "\n".join(line.strip() for line in _VERDICT_RE.sub("", cot).strip().splitlines() if line.strip())
    lines = [body, f"{VERDICT_KEY}: {verdict}"] if position == "last" else [f"{VERDICT_KEY}: {verdict}", body]
    return "\n".join(x for x in lines if x)


def parse_verdict(text: object) -> str | None:
    """``yes`` / ``no`` from the last verdict line of a verifier's output, None when there is none."""
    if not isinstance(text, str):
        return None
    found = _VERDICT_RE.findall(text[-4000:])
    return found[-1].lower() if found else None


def scripted_candidate(
    reasoner: ScriptedTeacher,
    ep: dict,
    rid: str,
    history: list[dict],
    observation: str,
    action: str,
    plan: list[str],
    space: ActionSpace,
) -> dict:
    """A verification candidate for ``action`` whose reasoning is what the scripted teacher writes as the
    ``reasoning_and_reflection`` of ``plan`` (the candidate's plan from this state) — the SFT policy's style."""
    extras = [n for i, n in enumerate(space.names) if i >= N_GLOBAL]
    pseudo = {
        "sample_id": rid,
        "label": format_label([(space.id(a), a) for a in plan], extras),
        "history": history,
        "observation": observation,
        "instruction": ep["instruction"],
        "task_type": ep["task_type"],
    }
    reasoning = reasoner.respond(pseudo)["reasoning_and_reflection"]
    return {"action_id": space.id(action), "action_name": action, "reasoning": reasoning}


__all__ = [
    "FIND_SENTENCES",
    "INSTRUCTION",
    "VERDICT_KEY",
    "VERDICT_POSITIONS",
    "Facts",
    "argument_role",
    "facts_for",
    "parse_verdict",
    "scripted_candidate",
    "verification_cot",
    "verification_messages",
    "verification_record",
    "with_verdict",
]
