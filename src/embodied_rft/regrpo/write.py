"""The scripted teacher's reflection triples and the shuffled control (docs/regrpo.md §3).

Input: a RoT sample (a decomposed sample with a ``rot`` field, ``regrpo/rot.py``) and a seeded RNG. Output:

- :func:`scripted_triple`: (ErrorType, Evidence, FixPlan) written from the simulator's real feedback — a rejected
  action's reason quoted from its feedback, a silent one's effect quoted from the observation after it (where the
  agent now is and what it sees or holds) — and the corrected plan's first steps in words (the scripted teacher's
  own renderer, ``teacher/scripted.py`` ``nl_steps``); every sentence in three wordings;
- :func:`shuffled`: for the control arm, each triple replaced by the triple of another sample of about the same
  length: the samples sorted by length, neighbours swapped (a three-cycle closes an odd count), so the extra tokens
  stay and the content no longer matches the sample.

The evidence always carries a token of o_fail (the gate of ``text.gate``); the fix plan names the corrected plan's
first action in words, never its exact action string (the label stays in ``executable_plan``).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence

from ..teacher.scripted import nl_steps
from ..world.actions import split_action
from .text import Triple

EVIDENCE_LOUD = (
    "'{a}' was rejected: {why}",
    "the simulator said '{why}' after '{a}'",
    "'{a}' failed with '{why}'",
)
EVIDENCE_SILENT = (
    "'{a}' ran, but now {state}, not the {want}",
    "after '{a}' {state}; the task needs the {want}",
    "'{a}' executed, yet {state} and the {want} is not there",
)
FIX = {
    "GroundingDrift": ("go back to the right thing: {steps}", "switch to the {want}: {steps}", "retarget: {steps}"),
    "ToolMismatch": ("use the right action: {steps}", "{steps} instead of '{a}'", "the fitting verb: {steps}"),
    "ArgInvalid": ("act on what is here: {steps}", "{steps} instead", "fix the argument: {steps}"),
    "InfoInsufficient": ("meet the precondition first: {steps}", "first {steps}", "get what is missing: {steps}"),
}


_GENERIC = re.compile(r"^(\w+ )+action failed$|^Try to explore other instances instead$")


def _why(feedback: str) -> str:
    """The simulator's reason without EB's fixed prefix: its first two informative sentences, at most 16 words."""
    why = feedback.replace("Last action is invalid.", "").strip()
    parts = [p.strip(" .") for p in re.split(r"(?<=[a-z0-9)])\. ", why)]
    parts = [p for p in parts if p and not _GENERIC.match(p)][:2]
    words = "; ".join(parts).split()
    return " ".join(words[:16]) or "it is not allowed here"


def _state(rot: dict, observation: str) -> str:
    """Where the agent is and what it sees or holds after a silent mistake, in the observation's own words."""
    lines = observation.split("\n")
    where = lines[0].rstrip(".").replace("You are ", "I am ", 1) if lines else "I am here"
    if str(rot["failed_action"][1]).startswith("pick up the "):
        held = next((ln.removeprefix("In hand: ").rstrip(".") for ln in lines if ln.startswith("In hand: ")), "")
        return f"{where} and hold the {held or rot.get('held')}"
    seen = next((ln.removeprefix("You see: ").rstrip(".") for ln in lines if ln.startswith("You see: ")), "")
    words = seen.split()
    seen = " ".join(words[:10]) + (" ..." if len(words) > 10 else "")
    return f"{where} and see {seen}" if seen else where


def _want(rot: dict) -> str:
    verb, target = split_action(str(rot["expected"][1]))
    if verb not in ("find a", "pick up the"):
        target = None
    return target or rot["goal"].get("object") or "target"


def scripted_triple(sample: dict, rng: random.Random) -> Triple:
    """The scripted teacher's triple for one RoT sample (module docstring)."""
    rot = sample["rot"]
    a = rot["failed_action"][1]
    style = rng.randrange(3)
    if rot["executes"]:
        evidence = EVIDENCE_SILENT[style].format(a=a, state=_state(rot, sample["observation"]), want=_want(rot))
    else:
        evidence = EVIDENCE_LOUD[style].format(a=a, why=_why(rot["feedback"]))
    names = [n for _, n in rot["corrected"][:2]]
    steps = " then ".join(nl_steps(names, rot.get("held"), rot.get("place"), rng.randrange(3)))
    fix = rng.choice(FIX[rot["error_type"]]).format(steps=steps, a=a, want=_want(rot))
    return Triple(rot["error_type"], evidence, fix)


def triple_rng(seed: int, sample_id: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}\x00{sample_id}\x00rot".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def shuffled(texts: Sequence[tuple[str, str]], seed: int) -> dict[str, str]:
    """``{sample_id: another sample's text}``, length-matched (module docstring). Needs two or more texts."""
    if len(texts) < 2:
        raise ValueError("teacher.rot.reflection=shuffled needs at least two RoT samples to swap reflections")
    key = {sid: hashlib.sha256(f"{seed}:{sid}".encode()).hexdigest() for sid, _ in texts}
    order = sorted(texts, key=lambda x: (len(x[1]), key[x[0]]))
    out: dict[str, str] = {}
    last = len(order) - (3 if len(order) % 2 else 0)
    for i in range(0, last, 2):
        (a, ta), (b, tb) = order[i], order[i + 1]
        out[a], out[b] = tb, ta
    if len(order) % 2:
        tail = order[last:]
        for j, (sid, _) in enumerate(tail):
            out[sid] = tail[(j + 1) % 3][1]
    return out


__all__ = ["EVIDENCE_LOUD", "EVIDENCE_SILENT", "FIX", "scripted_triple", "shuffled", "triple_rng"]
