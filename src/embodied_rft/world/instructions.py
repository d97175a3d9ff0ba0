"""Natural-language instructions in EB-ALFRED's six subset styles, for generated episodes.

Input: the episode's task type, goal, a simulator of its initial scene, the subset and a seeded
``random.Random``. Output: one instruction string.

EB rewrote ALFRED's instructions per subset (examples in ``shared/embodiedbench``): *base* says the task
plainly ("Rinse off a ladle and move it to the table."); *common_sense* names things by use ("something for
serving soup"); *complex_instruction* buries the task in context and distractors ("Although there's a bowl in
the cupboard, ..."); *spatial* leans on where things are ("put it back on the table", "under the coffee
maker"); *visual_appearance* names things by looks ("two yellow bottles"); *long_horizon* holds the tasks
with long plans (here: sliced / processed / two-object / movable-receptacle tasks, described step by step
or plainly). Every style draws from several templates and from synonyms, descriptions and looks per type
(:mod:`lexicon`), so no single phrasing can be memorised; none of EB's own sentences is reused.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from embodied_rft.world.lexicon import LEX
from embodied_rft.world.objects import SLICED_TYPE, WHOLE_TYPE

if TYPE_CHECKING:  # pragma: no cover
    from embodied_rft.world.episode import Goal
    from embodied_rft.world.simulator import Simulator

_IRREGULAR = {
    "knife": "knives",
    "butter knife": "butter knives",
    "potato": "potatoes",
    "tomato": "tomatoes",
    "box": "boxes",
    "watch": "watches",
    "wristwatch": "wristwatches",
    "keys": "sets of keys",
    "bread": "loaves of bread",
    "lettuce": "heads of lettuce",
    "toilet paper": "rolls of toilet paper",
    "glass": "glasses",
    "dish": "dishes",
    "shelf": "shelves",
    "loaf": "loaves",
    "tissues": "boxes of tissues",
}


def plural(phrase: str) -> str:
    """'spray bottle' -> 'spray bottles'; 'slice of apple' -> 'slices of apple'; 'knife' -> 'knives'."""
    if phrase in _IRREGULAR:
        return _IRREGULAR[phrase]
    for sep in (" with ", " of ", " on ", " for "):
        if sep in phrase:
            head, tail = phrase.split(sep, 1)
            return plural(head) + sep + tail
    words = phrase.split()
    last = words[-1]
    if last in _IRREGULAR:
        words[-1] = _IRREGULAR[last]
    elif last.endswith(("s", "x", "ch", "sh")):
        words[-1] = last + "es"
    elif last.endswith("y") and last[-2:-1] not in "aeiou":
        words[-1] = last[:-1] + "ies"
    else:
        words[-1] = last + "s"
    return " ".join(words)


def _a(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _cap(s: str) -> str:
    return s[0].upper() + s[1:] if s else s


class _Words:
    """Phrases for one episode in one style."""

    def __init__(self, style: str, goal: Goal, sim: Simulator, rng: random.Random) -> None:
        self.style = style
        self.g = goal
        self.sim = sim
        self.rng = rng

    def c(self, options):
        return self.rng.choice(options)

    def name(self, typ: str) -> str:
        return self.c(LEX[typ].names)

    def target_type(self) -> str:
        t = self.g.object_target
        return SLICED_TYPE[t] if self.g.object_sliced else t

    # object phrases ---------------------------------------------------------------------------
    def obj(self, typ: str | None = None, definite: bool = False) -> str:
        typ = typ or self.target_type()
        e = LEX[typ]
        st = self.style
        if st == "common_sense":
            return self.c(e.common)
        if st == "visual_appearance":
            return ("the " if definite else "") + (self.c(e.looks) if definite else _a(self.c(e.looks)))
        if st == "spatial" and typ == self.target_type():
            where = self.where_is(typ)
            if where:
                return f"the {self.name(typ)} {where}"
        n = self.name(typ)
        return f"the {n}" if definite else _a(n)

    def objs2(self, typ: str | None = None) -> str:
        typ = typ or self.target_type()
        e = LEX[typ]
        if self.style == "common_sense":
            return self.c(["two items, each one ", "a pair of things, each "]) + self.c(e.common)
        if self.style == "visual_appearance":
            return "two " + plural(self.c(e.looks))
        return self.c(["two ", "a pair of ", "two "]) + plural(self.name(typ))

    def where_is(self, typ: str) -> str:
        """'in the fridge' for the instance ``find a <type>`` would reach now."""
        whole = WHOLE_TYPE.get(typ, typ)
        o = self.sim.resolve_find(whole)
        if o is None or o.parent is None or o.parent not in self.sim.objs:
            return ""
        p = self.sim.objs[o.parent]
        e = LEX[p.type]
        prep = {"in": self.c(["in", "inside", "sitting in"]), "on": self.c(["on", "lying on", "sitting on"])}[
            e.prep or "on"
        ]
        return f"{self.c(['', 'that is '])}{prep} the {self.name(p.type)}".replace("  ", " ")

    # receptacle phrases (with their preposition) -----------------------------------------------
    def into(self, typ: str) -> str:
        e = LEX[typ]
        st = self.style
        prep = e.prep or "on"
        if st == "common_sense":
            cs = self.c(e.common)
            if cs.startswith("where"):
                return cs
            for art in ("a ", "an "):
                if cs.startswith(art):
                    cs = cs[len(art) :]
            cs = cs if cs.startswith("the ") else "the " + cs
            return f"{'at' if cs.startswith('the place') else prep} {cs}"
        if st == "visual_appearance":
            return f"{prep} the {self.c(e.looks)}"
        n = self.name(typ)
        if st == "spatial":
            special = {
                "CoffeeMachine": ["under the spout of the coffee maker", "beneath the coffee machine's spout"],
                "Toilet": ["on the back of the toilet", "on top of the toilet tank"],
                "StoveBurner": ["on top of the stove burner", "on the stove"],
                "Fridge": ["inside the fridge", "on a shelf inside the refrigerator"],
            }.get(typ)
            if special and self.rng.random() < 0.6:
                return self.c(special)
            return (
                self.c(["inside the ", "in the ", "within the "])
                if prep == "in"
                else self.c(["on top of the ", "on the ", "on the surface of the "])
            ) + n
        return f"{prep} the {n}"

    def lamp(self) -> str:
        t = self.g.toggle_target
        if self.style == "common_sense":
            return self.c(LEX[t].common)
        if self.style == "visual_appearance":
            return "the " + self.c(LEX[t].looks)
        return "the " + self.name(t)


# ----------------------------------------------------------------------------- sentence templates
def _core(tt: str, w: _Words) -> str:
    """The task in one plain sentence (lower-case start, no final stop)."""
    g = w.g
    c = w.c
    if tt == "pick_and_place_simple":
        return c(
            [
                f"put {w.obj()} {w.into(g.parent_target)}",
                f"place {w.obj()} {w.into(g.parent_target)}",
                f"move {w.obj()} {w.into(g.parent_target)}",
                f"pick up {w.obj()} and set it {w.into(g.parent_target)}",
                f"take {w.obj()} and leave it {w.into(g.parent_target)}",
            ]
        )
    if tt == "pick_two_obj_and_place":
        return c(
            [
                f"put {w.objs2()} {w.into(g.parent_target)}",
                f"place {w.objs2()} {w.into(g.parent_target)}",
                f"move {w.objs2()} {w.into(g.parent_target)}",
                f"collect {w.objs2()} and put both {w.into(g.parent_target)}",
                f"take {w.objs2()} and leave them {w.into(g.parent_target)}",
            ]
        )
    if tt == "look_at_obj_in_light":
        return c(
            [
                f"examine {w.obj()} under {w.lamp()}",
                f"look at {w.obj()} in the light of {w.lamp()}",
                f"pick up {w.obj()} and turn on {w.lamp()}",
                f"hold {w.obj()} while {w.lamp()} is on",
                f"turn on {w.lamp()} and inspect {w.obj()}",
                f"check {w.obj()} by the light of {w.lamp()}",
            ]
        )
    if tt == "pick_clean_then_place_in_recep":
        return c(
            [
                f"put a clean {_bare(w)} {w.into(g.parent_target)}",
                f"rinse off {w.obj()} and put it {w.into(g.parent_target)}",
                f"wash {w.obj()}, then place it {w.into(g.parent_target)}",
                f"clean {w.obj()} and move it {w.into(g.parent_target)}",
                f"give {w.obj()} a rinse in the sink and leave it {w.into(g.parent_target)}",
            ]
        )
    if tt == "pick_heat_then_place_in_recep":
        return c(
            [
                f"put a heated {_bare(w)} {w.into(g.parent_target)}",
                f"warm up {w.obj()} and put it {w.into(g.parent_target)}",
                f"microwave {w.obj()}, then place it {w.into(g.parent_target)}",
                f"heat {w.obj()} and move it {w.into(g.parent_target)}",
                f"cook {w.obj()} in the microwave and leave it {w.into(g.parent_target)}",
            ]
        )
    if tt == "pick_cool_then_place_in_recep":
        return c(
            [
                f"put a chilled {_bare(w)} {w.into(g.parent_target)}",
                f"cool {w.obj()} in the fridge and put it {w.into(g.parent_target)}",
                f"chill {w.obj()}, then place it {w.into(g.parent_target)}",
                f"make {w.obj()} cold and move it {w.into(g.parent_target)}",
                f"refrigerate {w.obj()} for a moment and leave it {w.into(g.parent_target)}",
            ]
        )
    m = g.mrecep_target
    return c(
        [
            f"put {w.obj()} {w.into(m)} and move the {w.name(m)} {w.into(g.parent_target)}",
            f"place {w.obj(m)} with {w.obj()} in it {w.into(g.parent_target)}",
            f"carry {w.obj()} in {w.obj(m)} and set it down {w.into(g.parent_target)}",
            f"set {w.obj(m)} holding {w.obj()} {w.into(g.parent_target)}",
        ]
    )


def _bare(w: _Words) -> str:
    """'apple' / 'slice of apple' / 'round red fruit' without an article (after 'a clean ...')."""
    typ = w.target_type()
    e = LEX[typ]
    if w.style == "visual_appearance":
        return w.c(e.looks)
    if w.style == "common_sense":
        return w.c(["item, namely ", "thing: "]) + w.c(e.common)
    return w.name(typ)


_PRE = [
    "After a long day, I could use some help: ",
    "I'm tidying up before guests arrive. ",
    "When you have a moment, ",
    "Since the room is a bit of a mess, ",
    "Before we sit down for dinner, ",
    "I've been meaning to do this all week, so ",
    "If it isn't too much trouble, ",
    "Quick favour: ",
    "While I'm out running errands, ",
    "To get the place in order, ",
    "My hands are full right now, so ",
    "Here's a small chore for you. ",
    "We're expecting visitors soon; ",
    "As part of the evening routine, ",
]
_POST = [
    " That way, everything will be right where it belongs.",
    " Thanks a lot!",
    " It will make the morning much easier.",
    " Please don't forget this one.",
    " I'd really appreciate it.",
    " Then the room will look neat.",
    "",
]


def _complex(tt: str, w: _Words) -> str:
    core = _core(tt, w)
    sim = w.sim
    others = [
        o
        for o in sim.objs.values()
        if o.parent in sim.objs
        and o.type not in WHOLE_TYPE
        and o.type != w.g.object_target
        and LEX[sim.objs[o.parent].type].prep
    ]
    parts = []
    r = w.rng.random()
    if others and r < 0.5:
        o = w.rng.choice(others)
        p = sim.objs[o.parent]
        thing, place = w.name(o.type), f"{LEX[p.type].prep} the {w.name(p.type)}"
        parts.append(
            w.c(
                [
                    f"Although there's {_a(thing)} {place}, ",
                    f"Ignore the {thing} {place}; ",
                    f"Never mind the {thing} {place}. ",
                    f"You may notice {_a(thing)} {place}, but ",
                    f"The {thing} {place} can stay where it is. ",
                    f"Leave the {thing} {place} alone. ",
                    f"Don't worry about the {thing} {place}: ",
                    f"Even though {_a(thing)} sits {place}, ",
                ]
            )
        )
    elif r < 0.85:
        parts.append(w.c(_PRE))
    else:
        parts.append("")
    style = w.rng.random()
    ask = f"could you please {core}?" if style < 0.4 else f"{core}." if style < 0.7 else f"I need you to {core}."
    if parts[0].endswith((". ", ": ")) or not parts[0]:
        ask = _cap(ask)
    text = _cap("".join(parts) + ask)
    return text + w.c(_POST)


_MID = {
    "pick_clean_then_place_in_recep": "wash {obj} in the sink",
    "pick_heat_then_place_in_recep": "warm {obj} up in the microwave",
    "pick_cool_then_place_in_recep": "cool {obj} in the fridge",
}


def _steps(tt: str, w: _Words) -> str:
    """Long-horizon phrasing: the task as an ordered list of stages."""
    g = w.g
    first = []
    if g.object_sliced:
        a = _a(w.name(g.object_target))
        first.append(
            w.c(
                [
                    f"slice {a} with a knife",
                    f"cut {a} into slices",
                    f"use a knife to slice {a}",
                    f"chop {a} with a knife",
                    f"take a knife and slice {a}",
                ]
            )
        )
    obj = w.obj(definite=g.object_sliced)
    if g.object_sliced:
        obj = w.c(["one of the slices", "a slice", "a piece of it"])
    if tt in _MID:
        mid = _MID[tt].format(obj=obj)
    elif tt == "pick_and_place_with_movable_recep":
        mid = f"put {obj} {w.into(g.mrecep_target)}"
    elif tt == "pick_two_obj_and_place":
        mid = f"bring {obj} {w.into(g.parent_target)}"
    else:
        mid = f"pick up {obj}"
    if tt == "pick_and_place_with_movable_recep":
        last = f"carry the {w.name(g.mrecep_target)} {w.into(g.parent_target)}"
    elif tt == "pick_two_obj_and_place":
        last = f"do the same with a second one so both end up {w.into(g.parent_target)}"
    elif tt == "look_at_obj_in_light":
        last = f"look at it under {w.lamp()}"
    else:
        last = f"put it {w.into(g.parent_target)}"
    stages = first + [mid, last]
    if len(stages) == 2:
        return _cap(
            w.c(
                [
                    f"first {stages[0]}, then {stages[1]}.",
                    f"{stages[0]}, and after that {stages[1]}.",
                    f"two steps: {stages[0]}; then {stages[1]}.",
                    f"begin to {stages[0]}, then {stages[1]}.",
                ]
            )
        )
    a, b, c = stages
    return _cap(
        w.c(
            [
                f"first {a}, then {b}, and finally {c}.",
                f"{a}; next, {b}; last, {c}.",
                f"step one: {a}. Step two: {b}. Step three: {c}.",
                f"start by doing this: {a}. Then {b}, and {c}.",
                f"this takes three steps: {a}, {b}, and {c}.",
                f"begin with the knife: {a}; afterwards {b}; to finish, {c}.",
                f"{a}. When that is done, {b}. Finally, {c}.",
            ]
        )
    )


def make_instruction(task_type: str, goal: Goal, sim: Simulator, subset: str, rng: random.Random) -> str:
    """One instruction for the task in the given EB subset style."""
    if subset == "complex_instruction":
        return _complex(task_type, _Words("base", goal, sim, rng))
    if subset == "long_horizon":
        w = _Words("base", goal, sim, rng)
        return _steps(task_type, w) if rng.random() < 0.5 else _cap(_core(task_type, w)) + "."
    w = _Words(subset, goal, sim, rng)
    text = _cap(_core(task_type, w))
    return text + rng.choice([".", ".", "", "."])


__all__ = ["make_instruction", "plural"]
