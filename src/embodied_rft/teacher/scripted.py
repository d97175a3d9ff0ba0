"""The scripted teacher: an offline oracle that answers a decomposed sample from its gold remaining plan.

Input: a decomposed sample (instruction, history, observation text, task_type, label with the gold remaining
plan and the scene's extra actions) and a sample index. Output: an EB response object as JSON text with all
four fields filled from the sample: ``visual_state_description`` from the observation text,
``reasoning_and_reflection`` from the instruction, the history (and the last env feedback when it failed) and
the next step, ``language_plan`` as numbered natural-language steps, ``executable_plan`` as the gold
(id, name) pairs.

Variety: every field is drawn from several phrasings by an RNG keyed on (seed, sample_id, sample index), so
SFT does not learn one string, and asking again (a new index) gives a different wording. ``noise_rate``
corrupts the plan of that fraction of answers (a dropped, swapped, replaced or mislabelled step) so that
validation has something to reject, as it would with a real teacher. ``forget_open_rate`` is a systematic
mistake instead: that fraction of the answers whose gold plan opens a container plan without opening (and
closing) it, in the NL plan and the executable plan alike (:func:`forget_open`).

Departure from the paper: the paper distils Gemini-2.0-flash; this oracle stands in for it offline. Answers
are kept short (about 100-250 tokens) because a tiny CPU model must learn them.
"""

from __future__ import annotations

import hashlib
import json
import random
import re

from embodied_rft.schema import read_label

from ..world.actions import DROP, PUT_DOWN, ActionSpace, split_action
from .base import Answer
from .config import ScriptedConfig
from .errors import _is_open, corrupt, forget_open, make_error

# How many words of the observation the visual description keeps: long enough to name what is in view and
# held, short enough for the tiny model's context.
_VISUAL_WORDS = 25

_FAILED_RE = re.compile(
    r"\b(invalid|fail(ed|s|ure)?|cannot|can't|unable|not (possible|valid|found|visible|reachable))\b", re.I
)

_TASK_CLAUSE = {
    "pick_and_place_simple": (
        "the object only has to end up in the right receptacle",
        "it is a simple pick-and-place task",
    ),
    "pick_two_obj_and_place": (
        "two objects of the same type must end up in the same receptacle",
        "both objects have to be placed together",
    ),
    "look_at_obj_in_light": (
        "I must hold the object while a lamp is switched on",
        "the object has to be examined under a lamp",
    ),
    "pick_clean_then_place_in_recep": (
        "the object must be rinsed in the sink before it is placed",
        "the object needs cleaning at the sink first",
    ),
    "pick_heat_then_place_in_recep": (
        "the object must be heated in the microwave before it is placed",
        "the object needs heating in the microwave first",
    ),
    "pick_cool_then_place_in_recep": (
        "the object must be cooled in the fridge before it is placed",
        "the object needs cooling in the fridge first",
    ),
    "pick_and_place_with_movable_recep": (
        "the object goes into a container that is then placed",
        "the object must be carried in a movable container",
    ),
}

# Natural-language renderings of each verb, one chosen per answer ({x} = object words).
_VERB_NL = {
    "find a": ("find the {x}", "go to the {x}", "locate the {x}"),
    "pick up the": ("pick up the {x}", "take the {x}", "grab the {x}"),
    "open the": ("open the {x}", "open the {x}", "pull the {x} open"),
    "close the": ("close the {x}", "shut the {x}", "close the {x}"),
    "turn on the": ("turn on the {x}", "switch on the {x}", "turn the {x} on"),
    "turn off the": ("turn off the {x}", "switch off the {x}", "turn the {x} off"),
    "slice the": ("slice the {x}", "cut the {x}", "slice the {x}"),
}
_PUT_NL = ("put the {h} {prep} the {r}", "place the {h} {prep} the {r}", "set the {h} down {prep} the {r}")
# receptacles one puts things *in* (the rest: *on*), so the NL plan reads naturally
_IN = {
    "Microwave",
    "Fridge",
    "Cabinet",
    "Drawer",
    "Box",
    "Safe",
    "Sink",
    "Bathtub",
    "GarbageCan",
    "Cup",
    "Mug",
    "Bowl",
    "Pot",
    "Pan",
    "Kettle",
    "Vase",
    "Cart",
}
_DROP_NL = ("drop the {h}", "let go of the {h}", "drop the {h}")
_NUMBERING = ("{i}. {s}", "Step {i}: {s}", "({i}) {s}")
_JOINERS = (" ", "; ", "\n")

_VISUAL = ("{obs}", "From here: {obs}", "Current view: {obs}", "Looking around: {obs}")
_FIRST_PERSON = (
    (re.compile(r"\bYou are\b"), "I am"),
    (re.compile(r"\byou are\b"), "I am"),
    (re.compile(r"\b[Yy]ou see\b"), "I see"),
    (re.compile(r"\b[Yy]ou hold\b"), "I hold"),
    (re.compile(r"\b[Yy]our\b"), "my"),
)
_HOLD = (" I am holding the {h}.", " The {h} is in my hand.", " My hand holds the {h}.")

_OPEN = ("The task is to {goal}.", "Goal: {goal}.", "I need to {goal}.", "My instruction is to {goal}.")
_START = (
    "Nothing has been done yet, so I start with: {next}.",
    "No actions so far; first I will {next}.",
    "This is the first step, so I begin to {next}.",
)
_PROGRESS = (
    "I have done {n} step(s), the last being '{last}', which worked. Next I {next}.",
    "So far {n} action(s) succeeded, most recently '{last}'. Now I should {next}.",
    "After {n} step(s) ending with '{last}', the remaining work starts with: {next}.",
)
_FAILED = (
    "My last action '{last}' failed ({fb}), so I adjust the plan and {next}.",
    "The feedback says '{last}' did not work ({fb}); I must replan and first {next}.",
    "'{last}' was invalid ({fb}), so the plan changes: next I {next}.",
)
_CLAUSE = (" Note that {c}.", " Remember: {c}.", " Here {c}.")
_FINISH = (" {k} action(s) remain.", " The plan below has {k} step(s).", "")


def _words(target: str) -> str:
    """'CounterTop_2' -> 'counter top 2': readable object words for the NL plan."""
    base, _, num = target.partition("_")
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", base).lower()
    return f"{words} {num}" if num else words


def _sentence(text: str) -> str:
    """'Put a clean apple in the fridge.' -> 'put a clean apple in the fridge' (to embed in a sentence)."""
    text = " ".join(text.split()).rstrip(" .!")
    return text[:1].lower() + text[1:] if text else "finish the task"


def _truncate_words(text: str, n: int) -> str:
    words = text.split()
    return " ".join(words) if len(words) <= n else " ".join(words[:n]) + " ..."


def _rng(seed: int, sample_id: str, sample_index: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}\x00{sample_id}\x00{sample_index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def parse_label(sample: dict) -> tuple[list[tuple[int, str]], ActionSpace]:
    """The gold remaining plan [(id, name)] and the sample's action space from its ``label`` JSON string."""
    gold, extras = read_label(sample["label"], str(sample.get("sample_id", "sample")))
    return gold, ActionSpace(extras)


def _held_after(history: list[dict]) -> str | None:
    """The object in hand after the history's successful actions (put down / drop empty the hand)."""
    held = None
    for h in history:
        if _FAILED_RE.search(h.get("feedback", "")):
            continue
        verb, target = split_action(h["action_name"])
        if verb == "pick up the":
            held = target
        elif h["action_name"] in (PUT_DOWN, DROP):
            held = None
    return held


def nl_steps(plan: list[str], held: str | None, last_found: str | None, style: int) -> list[str]:
    """Action names -> natural-language steps in one phrasing style, tracking hand and location so
    'put down the object in hand' reads 'put the apple in the fridge'."""
    out = []
    for name in plan:
        verb, target = split_action(name)
        if name == PUT_DOWN:
            r_type = (last_found or "").partition("_")[0]
            out.append(
                _PUT_NL[style].format(
                    h=_words(held) if held else "object",
                    prep="in" if r_type in _IN else "on",
                    r=_words(last_found) if last_found else "receptacle",
                )
            )
            held = None
        elif name == DROP:
            out.append(_DROP_NL[style].format(h=_words(held) if held else "object"))
            held = None
        elif target is not None and verb in _VERB_NL:
            out.append(_VERB_NL[verb][style].format(x=_words(target)))
            if verb == "find a":
                last_found = target
            elif verb == "pick up the":
                held = target
        else:
            out.append(name)
    return out


class ScriptedTeacher:
    """Offline oracle; deterministic given (seed, sample_id, sample index)."""

    cached = False  # answers are free and reproducible: no cache needed
    concurrency = 1
    requests_per_minute = 0.0  # unpaced

    def __init__(self, cfg: ScriptedConfig):
        self.cfg = cfg
        habit = f",forget_open={cfg.forget_open_rate:g}" if cfg.forget_open_rate > 0 else ""
        if cfg.error_rate > 0:
            mix = ",".join(f"{k}:{v:g}" for k, v in sorted(cfg.error_mix.items()))
            habit += f",errors={cfg.error_rate:g}[{mix}]"
        self.model = f"scripted-oracle(seed={cfg.seed},noise={cfg.noise_rate:g}{habit})"

    def request(self, sample: dict, sample_index: int) -> dict:
        return {"model": self.model, "sample_id": sample["sample_id"], "sample_index": sample_index}

    def ask(self, sample: dict, sample_index: int, request: dict | None = None) -> Answer:
        return Answer(text=json.dumps(self.respond(sample, sample_index), ensure_ascii=False), finish_reason="stop")

    def close(self) -> None:
        pass

    def respond(self, sample: dict, sample_index: int = 0) -> dict:
        """The response object (the four EB keys) for one sample."""
        rng = _rng(self.cfg.seed, str(sample["sample_id"]), sample_index)
        gold, space = parse_label(sample)
        # drawn only when the habit is on, so answers with forget_open_rate=0 are unchanged
        q = self.cfg.forget_open_rate
        if q > 0 and any(_is_open(n) for _, n in gold) and rng.random() < q:
            gold = forget_open(gold)
        if self.cfg.error_rate > 0 and rng.random() < self.cfg.error_rate:  # drawn only when the model is on
            gold = make_error(gold, space, rng, self.cfg.error_mix)[0]
        history = list(sample.get("history") or [])
        held = _held_after(history)
        last_found = None
        for h in history:
            verb, target = split_action(h["action_name"])
            if verb == "find a" and not _FAILED_RE.search(h.get("feedback", "")):
                last_found = target

        style = rng.randrange(3)
        steps = nl_steps([n for _, n in gold], held, last_found, style)
        if self.cfg.verbosity == "brief":
            return self._brief(sample, rng, gold, history, held, steps, space)
        numbering = rng.choice(_NUMBERING)
        language_plan = rng.choice(_JOINERS).join(numbering.format(i=i + 1, s=s) for i, s in enumerate(steps))

        obs = _truncate_words(" ".join(str(sample.get("observation") or "").split()), _VISUAL_WORDS)
        for pat, rep in _FIRST_PERSON:  # the observation speaks to the agent; the agent describes in 1st person
            obs = pat.sub(rep, obs)
        visual = rng.choice(_VISUAL).format(obs=obs or "nothing notable is in view.")
        if held and not re.search(r"hold|in hand", obs, re.I) and rng.random() < 0.5:
            visual += rng.choice(_HOLD).format(h=_words(held))

        reasoning = rng.choice(_OPEN).format(goal=_sentence(str(sample.get("instruction", ""))))
        nxt = steps[0] if steps else "finish"
        if not history:
            reasoning += " " + rng.choice(_START).format(next=nxt)
        else:
            last = history[-1]
            fb = " ".join(str(last.get("feedback", "")).split())
            if _FAILED_RE.search(fb):
                reasoning += " " + rng.choice(_FAILED).format(
                    last=last["action_name"], fb=_truncate_words(fb, 12).rstrip("."), next=nxt
                )
            else:
                reasoning += " " + rng.choice(_PROGRESS).format(n=len(history), last=last["action_name"], next=nxt)
        clause = _TASK_CLAUSE.get(str(sample.get("task_type", "")))
        if clause and rng.random() < 0.5:
            reasoning += rng.choice(_CLAUSE).format(c=rng.choice(clause))
        reasoning += rng.choice(_FINISH).format(k=len(gold))

        plan = [list(p) for p in gold]
        if self.cfg.noise_rate > 0 and rng.random() < self.cfg.noise_rate:
            plan = corrupt(plan, space, rng)
        return {
            "visual_state_description": visual,
            "reasoning_and_reflection": reasoning,
            "language_plan": language_plan,
            "executable_plan": [{"action_id": a, "action_name": n} for a, n in plan],
        }

    def _brief(
        self,
        sample: dict,
        rng: random.Random,
        gold: list,
        history: list,
        held: str | None,
        steps: list[str],
        space: ActionSpace,
    ) -> dict:
        """Four short fields: where I am and what I hold; the goal's next step (or the failure to fix);
        the NL steps joined; the plan."""
        obs = " ".join(str(sample.get("observation") or "").split())
        where = obs.split(".")[0].strip()
        for pat, rep in _FIRST_PERSON:
            where = pat.sub(rep, where)
        visual = f"{where}. Holding {_words(held) if held else 'nothing'}."
        nxt = steps[0] if steps else "finish"
        last = history[-1] if history else None
        if last is not None and _FAILED_RE.search(str(last.get("feedback", ""))):
            reasoning = f"'{last['action_name']}' failed; replan: {nxt}."
        else:
            reasoning = brief_next(rng, len(history), len(gold), nxt)
        plan = [list(p) for p in gold]
        if self.cfg.noise_rate > 0 and rng.random() < self.cfg.noise_rate:
            plan = corrupt(plan, space, rng)
        return {
            "visual_state_description": visual,
            "reasoning_and_reflection": reasoning,
            "language_plan": ", ".join(steps),
            "executable_plan": [{"action_id": a, "action_name": n} for a, n in plan],
        }


_BRIEF_NEXT = (
    "{d} done, {n} left; next {next}.",
    "After {d} steps: {next}. {n} to go.",
    "{d} steps done. Now {next}; {n} remain.",
)


def brief_next(rng: random.Random, done: int, left: int, nxt: str) -> str:
    """The brief wording's reasoning after a step that did not fail: steps done, steps left, the next one (also
    ReGRPO's ``bare`` arm, a recovery sample's reasoning with no word on the failure: regrpo/distill.py)."""
    return rng.choice(_BRIEF_NEXT).format(d=done, n=left, next=nxt)
