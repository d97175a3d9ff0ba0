"""The scripted teacher's mistakes: what a strong VLM planner gets wrong on EB-ALFRED, applied to a gold plan.

:func:`make_error` applies one of the error model's kinds (``teacher.scripted.error_mix``: a look-alike object
or receptacle, a skipped or an extra step, another valid order; ``docs/teacher.md``); :func:`forget_open` is the
systematic habit of not opening (and closing) containers; :func:`corrupt` damages a plan so that validation has
something to reject. All draw from the caller's seeded ``random.Random``, so an answer is reproducible.
"""

from __future__ import annotations

import random

from ..world.actions import PUT_DOWN, ActionSpace, split_action


def _is_open(name: str) -> bool:
    return split_action(name)[0] == "open the"


def forget_open(plan: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The plan without its 'open the X' steps and the 'close the X' that follows each of them: what a
    planner that ignores whether containers are closed would write. Closes of containers it did not open
    (already open at the start) stay."""
    out: list[tuple[int, str]] = []
    pending: set[str | None] = set()  # containers whose opening was left out
    for a, name in plan:
        verb, target = split_action(name)
        if verb == "open the":
            pending.add(target)
        elif verb == "close the" and target in pending:
            pending.discard(target)
        else:
            out.append((a, name))
    return out


# What a vision-language planner mistakes an object or a receptacle for: the same room, a similar look or use.
# Symmetric where both are in ALFRED's list; types without an entry have no look-alike (that kind is skipped).
LOOKALIKE_OBJECTS = {
    "Apple": "Tomato",
    "Tomato": "Apple",
    "Mug": "Cup",
    "Cup": "Mug",
    "Plate": "Bowl",
    "Bowl": "Plate",
    "SoapBar": "SoapBottle",
    "SoapBottle": "SoapBar",
    "Cloth": "HandTowel",
    "HandTowel": "Cloth",
    "Book": "Newspaper",
    "Newspaper": "Book",
    "CellPhone": "RemoteControl",
    "RemoteControl": "CellPhone",
    "KeyChain": "CreditCard",
    "CreditCard": "KeyChain",
    "Watch": "AlarmClock",
    "AlarmClock": "Watch",
    "Vase": "Statue",
    "Statue": "Vase",
    "Pen": "Pencil",
    "Pencil": "Pen",
    "Fork": "Spoon",
    "Spoon": "Fork",
    "Knife": "ButterKnife",
    "ButterKnife": "Knife",
    "Pot": "Pan",
    "Pan": "Pot",
    "Potato": "Egg",
    "Egg": "Potato",
    "SaltShaker": "PepperShaker",
    "PepperShaker": "SaltShaker",
    "WineBottle": "Glassbottle",
    "Glassbottle": "WineBottle",
    "Laptop": "Book",
    "Pillow": "Cloth",
    "TissueBox": "Box",
    "Box": "TissueBox",
    "Candle": "Vase",
}
LOOKALIKE_RECEPTACLES = {
    "CounterTop": "DiningTable",
    "DiningTable": "CounterTop",
    "Shelf": "SideTable",
    "SideTable": "Shelf",
    "Sofa": "ArmChair",
    "ArmChair": "Sofa",
    "Bed": "Sofa",
    "Desk": "SideTable",
    "CoffeeTable": "SideTable",
    "Dresser": "Desk",
    "Cabinet": "Drawer",
    "Drawer": "Cabinet",
    "Sink": "Bathtub",
    "Bathtub": "Sink",
    "Fridge": "Cabinet",
    "Microwave": "Cabinet",
    "GarbageCan": "Toilet",
    "Safe": "Drawer",
    "Ottoman": "ArmChair",
    "DeskLamp": "FloorLamp",
    "FloorLamp": "DeskLamp",
    "StoveBurner": "CounterTop",
    "Toilet": "GarbageCan",
}


def _swap_target(plan: list[tuple[int, str]], i: int, new: str, space: ActionSpace) -> list[tuple[int, str]] | None:
    """``plan`` with step i's target and every later step on the same target retargeted to ``new``; None when
    one of those actions does not exist (the mistake cannot be written as a valid plan)."""
    old = split_action(plan[i][1])[1]
    out = list(plan[:i])
    for a, name in plan[i:]:
        verb, target = split_action(name)
        if target == old:
            nid = space.get_id(f"{verb} {new}")
            if nid is None:
                return None
            out.append((nid, f"{verb} {new}"))
        else:
            out.append((a, name))
    return out


def make_error(
    plan: list[tuple[int, str]], space: ActionSpace, rng: random.Random, mix: dict[str, float]
) -> tuple[list[tuple[int, str]], str | None]:
    """One planning mistake in ``plan`` (valid (id, name) pairs throughout), of a kind drawn by ``mix`` among those
    the plan allows: (the new plan, the kind), or (plan, None) when none applies.

    * ``wrong_object``: the first object picked up becomes its look-alike, from its ``find`` on;
    * ``wrong_receptacle``: the receptacle the object is put in (the last ``find`` before the put-down) becomes
      its look-alike, its opening and closing included;
    * ``skip_step``: one step left out; ``extra_step``: a ``find`` of a look-alike of one of the plan's
      targets inserted before a step (checking the wrong place first); ``swap_steps``: two adjacent steps
      exchanged."""
    plan = [tuple(p) for p in plan]
    options: dict[str, list[tuple[int, str]]] = {}
    for i, (_, name) in enumerate(plan):
        verb, target = split_action(name)
        if verb == "pick up the" and target in LOOKALIKE_OBJECTS:
            j = max([k for k in range(i) if plan[k][1] == f"find a {target}"], default=i)
            new = _swap_target(plan, j, LOOKALIKE_OBJECTS[target], space)
            if new is not None:
                options["wrong_object"] = new
            break
    puts = [i for i, (_, n) in enumerate(plan) if n == PUT_DOWN]
    if puts:
        finds = [k for k in range(puts[-1]) if split_action(plan[k][1])[0] == "find a"]
        if finds:
            target = split_action(plan[finds[-1]][1])[1]
            if target in LOOKALIKE_RECEPTACLES:
                new = _swap_target(plan, finds[-1], LOOKALIKE_RECEPTACLES[target], space)
                if new is not None:
                    options["wrong_receptacle"] = new
    if len(plan) > 1:
        i = rng.randrange(len(plan))
        options["skip_step"] = plan[:i] + plan[i + 1 :]
        pairs = [i for i in range(len(plan) - 1) if plan[i] != plan[i + 1]]
        if pairs:
            i = rng.choice(pairs)
            options["swap_steps"] = plan[:i] + [plan[i + 1], plan[i]] + plan[i + 2 :]
    detours = []
    for _, name in plan:
        target = split_action(name)[1]
        alt = LOOKALIKE_OBJECTS.get(target) or LOOKALIKE_RECEPTACLES.get(target)
        if alt and space.get_id(f"find a {alt}") is not None:
            detours.append(f"find a {alt}")
    if detours:
        step = rng.choice(detours)
        i = rng.randrange(len(plan))
        options["extra_step"] = plan[:i] + [(space.id(step), step)] + plan[i:]
    kinds = [k for k in mix if k in options and mix[k] > 0]
    if not kinds:
        return plan, None
    kind = rng.choices(kinds, weights=[mix[k] for k in kinds])[0]
    return options[kind], kind


def corrupt(plan: list[list], space: ActionSpace, rng: random.Random) -> list[list]:
    """A plan that differs from ``plan``: a step dropped, two different steps swapped, a step replaced by
    another valid action (a wrong plan), or an id paired with the wrong name (an invalid pair)."""
    plan = [list(p) for p in plan]
    kinds = ["replace", "mislabel"]
    if len(plan) > 1:
        kinds.append("drop")
        if any(plan[i] != plan[i + 1] for i in range(len(plan) - 1)):
            kinds.append("swap")
    kind = rng.choice(kinds)
    if kind == "drop":
        del plan[rng.randrange(len(plan))]
    elif kind == "swap":
        i = rng.choice([i for i in range(len(plan) - 1) if plan[i] != plan[i + 1]])
        plan[i], plan[i + 1] = plan[i + 1], plan[i]
    elif kind == "replace":
        i = rng.randrange(len(plan))
        new = plan[i][0]
        while new == plan[i][0]:
            new = rng.randrange(len(space))
        plan[i] = [new, space.name(new)]
    else:  # mislabel: keep the id, name a different action (not a pair of the action map)
        i = rng.randrange(len(plan))
        other = (plan[i][0] + 1 + rng.randrange(len(space) - 1)) % len(space)
        plan[i] = [plan[i][0], space.name(other)]
    return plan
