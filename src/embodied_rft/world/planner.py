"""Expert planner: EB action plans that reach an episode's goal in the simulator.

Input: an Episode dict (only ``task_type``, ``goal`` and ``scene`` are read) or a simulator state.
Output: ``expert_plan(ep) -> list[str]`` of EB action names, or :class:`PlanError` when the scene cannot
satisfy the goal.

The planner works on a copy of the simulator and executes every action it emits, so a returned plan is
valid by construction. It asks the simulator how a name resolves (:meth:`Simulator.resolve`) and uses the
plain EB name (``find a Mug``) when that reaches a suitable instance, the suffixed one (``find a Mug_2``)
otherwise. Plans read the state: containers are opened only when closed (and closed again once the object
is out, as ALFRED's planner does, except a container opened for the knife that also holds the object sliced
next: closing it there would be undone two steps later), lamps/faucets/microwaves already on are handled,
objects inside closed containers are fetched by opening them. Recipes follow ALFRED's expert plans expanded into
EB skills (heat: microwave open, put, close, on, off, open, pick, close; cool: fridge open, put, close, open, pick,
close; clean: sink, put, faucet on, off, pick; slice: knife, slice, put the knife down, pick a piece).
Departure from EB's gold NL steps: cleaning turns the Faucet on, which EB's own state update requires.
"""

from __future__ import annotations

from collections.abc import Callable

from embodied_rft.world.objects import BASINS, KNIVES, SLICED_TYPE, TYPES, WHOLE_TYPE, can_contain
from embodied_rft.world.simulator import HAND, Obj, Simulator

Pred = Callable[[Obj], bool]
_ANY: Pred = lambda o: True  # noqa: E731
_PROCESS = {
    "pick_clean_then_place_in_recep": "cleaned",
    "pick_heat_then_place_in_recep": "heated",
    "pick_cool_then_place_in_recep": "cooled",
}


class PlanError(RuntimeError):
    """The goal cannot be reached in this scene (a needed object is missing, or an action failed)."""


class _Planner:
    def __init__(self, sim: Simulator) -> None:
        self.w = sim
        self.plan: list[str] = []

    # ---------------------------------------------------------------- emitting
    def emit(self, name: str) -> None:
        r = self.w.step(name)
        if not r.success:
            raise PlanError(f"step {len(self.plan)} {name!r}: {r.feedback}")
        self.plan.append(name)

    @staticmethod
    def names_for(o: Obj) -> list[str]:
        """Names that may address ``o``: its plain type first, then its own suffixed id (for a piece: the
        whole type, then the suffixed id of the object it was cut from)."""
        if o.type in WHOLE_TYPE:
            whole = WHOLE_TYPE[o.type]
            return [whole] + ([o.src] if o.src and o.src != whole else [])
        return [o.type] + ([o.id] if o.id != o.type else [])

    def try_emit_on(self, verb: str, o: Obj, ok: Pred | None = None) -> bool:
        """Emit ``verb + name`` with a name that resolves to ``o`` (or to any object ``ok`` accepts)."""
        for n in self.names_for(o):
            action = f"{verb} {n}"
            rid = self.w.resolve(action)
            if rid is not None and (rid == o.id or (ok is not None and ok(self.w.objs[rid]))):
                self.emit(action)
                return True
        return False

    def emit_on(self, verb: str, o: Obj, ok: Pred | None = None) -> None:
        if not self.try_emit_on(verb, o, ok):
            raise PlanError(f"no action name reaches {o.id} for {verb!r}")

    # ---------------------------------------------------------------- choosing instances
    def choose(self, typ: str, ok: Pred) -> Obj:
        """What ``find a typ`` reaches if acceptable, else the first acceptable instance a name reaches."""
        w = self.w
        first = w.resolve_find(typ)
        if first is not None and ok(first):
            return first
        for o in sorted((o for o in w.candidates(typ) if ok(o)), key=lambda o: o.order):
            for n in self.names_for(o)[1:]:
                if w.resolve(f"find a {n}") == o.id:
                    return o
        raise PlanError(f"no {typ} that the goal can use can be reached by name")

    def goto(self, o: Obj, ok: Pred | None = None) -> Obj:
        self.emit_on("find a", o, ok)
        return self.w.objs[self.w.last_found]

    def inside(self, o: Obj, c: Obj) -> bool:
        """Whether ``o`` lies (at any depth) inside receptacle ``c``."""
        p = o.parent
        while p is not None and p != HAND:
            if p == c.id:
                return True
            p = self.w.objs[p].parent
        return False

    def open_chain(self, o: Obj) -> list[Obj]:
        """Open the closed containers around ``o`` (outermost first); returns them, innermost first."""
        chain = []
        c = self.w.enclosing_closed(o)
        while c is not None:
            chain.append(c)
            c = self.w.enclosing_closed(c)
        for c in reversed(chain):
            self.emit_on("open the", c)
        return chain

    def close_all(self, opened: list[Obj]) -> None:
        for c in opened:
            if c.open and self.w.reachable(c):
                self.emit_on("close the", c)

    # ---------------------------------------------------------------- skills
    def fetch(self, typ: str, ok: Pred, keep_open: Pred | None = None) -> Obj:
        """Pick up an acceptable object of ``typ`` (pieces count for a sliceable type); the containers opened
        for it are closed again, except those ``keep_open`` accepts (the next step reaches into them)."""
        w = self.w
        if w.held is not None:
            if ok(w.objs[w.held]):
                return w.objs[w.held]  # planning from a state where a suitable object is already in hand
            raise PlanError("fetch with a full hand")
        here = w.resolve(f"pick up the {typ}")
        o = w.objs[here] if here is not None else None
        if o is None or not ok(o) or w.enclosing_closed(o) is not None:
            o = self.goto(self.choose(typ, lambda x: ok(x) and w.anchor(x) != HAND), ok)
        opened = self.open_chain(o)
        self.emit_on("pick up the", o, ok)
        self.close_all([c for c in opened if keep_open is None or not keep_open(c)])
        return w.objs[w.held]

    def deposit(self, typ: str, ok: Pred, close: bool = True) -> tuple[Obj, list[Obj]]:
        """Put the held object into an acceptable receptacle of ``typ``; returns it and what was opened."""
        w = self.w
        h = w.holding()
        if h is None or not can_contain(typ, h.type):
            raise PlanError(f"a {h.type if h else 'empty hand'} cannot be put in a {typ}")
        r = self.goto(self.choose(typ, lambda x: ok(x) and w.anchor(x) != HAND), ok)
        opened = self.open_chain(r)
        if TYPES[r.type].openable and not r.open:
            self.emit_on("open the", r)
            opened.insert(0, r)
        self.emit("put down the object in hand")
        if close:
            self.close_all(opened)
            opened = []
        return r, opened

    def toggle(self, o: Obj, on: bool) -> None:
        self.emit_on("turn on the" if on else "turn off the", o)

    def slice_one(self, typ: str) -> None:
        """Knife in hand, slice a whole ``typ``, then put the knife down where the agent stands."""
        w = self.w
        knives = [t for t in ("Knife", "ButterKnife") if w.by_type.get(t)]
        if not knives:
            raise PlanError("slicing needs a Knife or ButterKnife and the scene has none")
        if w.held is None or w.objs[w.held].type not in KNIVES:
            # the whole ``typ`` the plan slices after fetching the knife as usual (on a copy): a container opened
            # for the knife that holds it stays open, not closed and reopened two steps later (two wasted actions;
            # the world oracle calls that close wrong)
            trial = _Planner(w.copy())
            trial.fetch(knives[0], _ANY)
            nxt = trial.choose(typ, lambda x: x.type == typ)
            self.fetch(knives[0], _ANY, keep_open=lambda c: trial.inside(nxt, c))
        target = self.goto(self.choose(typ, lambda x: x.type == typ))
        self.open_chain(target)  # left open: a piece is taken out next
        self.emit_on("slice the", target)
        self.emit("put down the object in hand")  # no receptacle found since the slice: EB drops it here

    def take_back(self, o: Obj) -> None:
        """Pick ``o`` up again after processing it, opening (then closing) its container."""
        w = self.w
        if not w.reachable(o):
            self.goto(o)
        opened = self.open_chain(o)
        if not self.try_emit_on("pick up the", o):
            self.goto(o)
            self.emit_on("pick up the", o)
        self.close_all(opened)

    # ---------------------------------------------------------------- processing
    def heat(self) -> Obj:
        h = self.w.holding()
        mw = self.goto(self.choose("Microwave", _ANY))
        if not mw.open:
            self.emit_on("open the", mw)
        self.emit("put down the object in hand")
        self.run_microwave(mw)
        return h

    def run_microwave(self, mw: Obj) -> None:
        """Close the Microwave (with the object inside) and run it once."""
        if mw.open:
            self.emit_on("close the", mw)
        if mw.on:
            self.toggle(mw, False)
        self.toggle(mw, True)
        self.toggle(mw, False)

    def cool(self) -> Obj:
        h = self.w.holding()
        fr = self.goto(self.choose("Fridge", _ANY))
        if not fr.open:
            self.emit_on("open the", fr)
        self.emit("put down the object in hand")
        self.emit_on("close the", fr)
        return h

    def clean(self) -> Obj:
        w = self.w
        h = w.holding()
        kinds = [t for t in ("Sink", "Bathtub") if w.by_type.get(t) and can_contain(t, h.type)]
        if not kinds or not w.by_type.get("Faucet"):
            raise PlanError(f"cleaning a {h.type} needs a Sink or Bathtub that holds it and a Faucet")
        basin = self.goto(self.choose(kinds[0], _ANY))
        self.emit("put down the object in hand")
        self.rinse(basin)
        return h

    def rinse(self, basin: Obj) -> None:
        """Run the Faucet that serves ``basin`` once (what lies in the basin is cleaned)."""
        w = self.w
        faucets = w.by_type.get("Faucet", [])
        mounted = [f for f in faucets if f.parent == basin.id]
        free = [f for f in faucets if f.parent is None or f.parent == HAND or w.objs[f.parent].type not in BASINS]
        if not mounted and not free:
            raise PlanError(f"no Faucet serves {basin.id}")
        tap = mounted[0] if mounted else free[0]
        if not w.reachable(tap):
            tap = self.goto(tap)
        if tap.on:
            self.toggle(tap, False)
        self.toggle(tap, True)
        self.toggle(tap, False)

    def finish(self, o: Obj, flag: str) -> Obj:
        """``resume``: process ``o`` where the agent left it (in a basin, the Microwave or the Fridge)."""
        w = self.w
        where = w.objs[o.parent]
        if flag == "cleaned":
            self.rinse(where)
            return o
        if not w.reachable(where):
            where = self.goto(where)
        if flag == "heated":
            self.run_microwave(where)
        else:
            if not where.open:
                self.emit_on("open the", where)
            self.emit_on("close the", where)
        return o


_PROCESSORS = {"cleaned": BASINS, "heated": frozenset({"Microwave"}), "cooled": frozenset({"Fridge"})}


def _staged(w: Simulator, is_target: Pred, flag: str) -> Obj | None:
    """``resume``: a target the agent put into the task's processing receptacle and that is not processed yet."""
    if w.held is not None:
        return None
    for o in sorted(w.objs.values(), key=lambda o: o.order):
        if (
            is_target(o)
            and o.put_step >= 0
            and not getattr(o, flag)
            and o.parent in w.objs
            and w.objs[o.parent].type in _PROCESSORS[flag]
        ):
            return o
    return None


def _carrier(w: Simulator, g, is_target: Pred) -> Obj | None:
    """``resume``: the movable receptacle the agent put a target into (held or not), not yet in its place."""
    for o in sorted(w.objs.values(), key=lambda o: o.order):
        if is_target(o) and o.put_step >= 0 and o.parent in w.objs:
            m = w.objs[o.parent]
            if m.type == g.mrecep_target and not _in_parent(w, m, g.parent_target):
                return m
    return None


def _in_parent(w: Simulator, o: Obj, parent: str | None) -> bool:
    return parent is not None and o.parent is not None and o.parent in w.objs and w.objs[o.parent].type == parent


def plan_for(sim: Simulator, *, resume: bool = False) -> list[str]:
    """Plan from the current state of ``sim`` (which is not changed).

    ``resume`` continues work the agent left half done instead of starting it over: a target it put into the
    task's sink, microwave or fridge is processed there (not fetched and put back), and a target it put into
    the movable receptacle travels in it. The world oracle plans this way (``world/oracle.py``); it is off by
    default, and from an episode's initial state (nothing put anywhere by the agent) both plan alike."""
    p = _Planner(sim.copy())
    w = p.w
    g = w.goal
    tt = w.task_type
    if w.is_success():
        return []
    typ = g.object_target
    parent = g.parent_target
    pieces = SLICED_TYPE.get(typ)

    def is_target(o: Obj) -> bool:
        return o.type == pieces if g.object_sliced else (o.type == typ or o.type == pieces)

    carrier = _carrier(w, g, is_target) if resume and tt == "pick_and_place_with_movable_recep" else None
    h = w.holding()
    if h is not None and not (
        is_target(h)
        or (g.object_sliced and h.type in KNIVES and not w.by_type.get(pieces))
        or (carrier is not None and h is carrier)
    ):
        p.emit("drop the object in hand")

    def get_target(extra: Pred = _ANY) -> Obj:
        if g.object_sliced and not w.by_type.get(pieces):
            p.slice_one(typ)
        return p.fetch(typ, lambda o: is_target(o) and not _in_parent(w, o, parent) and extra(o))

    if tt == "pick_and_place_simple":
        get_target()
        p.deposit(parent, _ANY)
    elif tt == "pick_two_obj_and_place":
        counts: dict[str, int] = {}
        for o in w.objs.values():
            if is_target(o) and _in_parent(w, o, parent):
                counts[o.parent] = counts.get(o.parent, 0) + 1
        dest = max(sorted(counts), key=lambda k: counts[k]) if counts else None
        for _ in range(2 - counts.get(dest, 0)):
            if g.object_sliced and len(w.by_type.get(pieces, ())) < 2:
                p.slice_one(typ)
            p.fetch(typ, lambda o, d=dest: is_target(o) and (d is None or o.parent != d))
            r, _ = p.deposit(parent, lambda r, d=dest: d is None or r.id == d)
            dest = r.id
    elif tt == "look_at_obj_in_light":
        get_target()
        lamp = p.goto(p.choose(g.toggle_target, _ANY))
        if not lamp.on:
            p.toggle(lamp, True)
    elif tt in _PROCESS:
        flag = _PROCESS[tt]
        staged = _staged(w, is_target, flag) if resume else None
        o = get_target() if staged is None else staged
        if not getattr(o, flag):
            o = (
                p.finish(o, flag)
                if staged is not None
                else {"cleaned": p.clean, "heated": p.heat, "cooled": p.cool}[flag]()
            )
            if _in_parent(w, o, parent):
                return _checked(p)  # processed where it belongs (e.g. cooled inside the goal Fridge)
            p.take_back(o)
        p.deposit(parent, _ANY)
    elif tt == "pick_and_place_with_movable_recep" and carrier is not None:
        if w.held != carrier.id:
            if not w.reachable(carrier):
                p.goto(carrier)
            opened = p.open_chain(carrier)
            p.emit_on("pick up the", carrier)
            p.close_all(opened)
        p.deposit(parent, _ANY)
    elif tt == "pick_and_place_with_movable_recep":
        get_target()
        m, opened = p.deposit(g.mrecep_target, _ANY, close=False)
        if not w.is_success():
            p.emit_on("pick up the", m)
            p.close_all(opened)
            p.deposit(parent, _ANY)
    else:  # pragma: no cover - parse_episode rejects other task types
        raise PlanError(f"unknown task type {tt!r}")
    return _checked(p)


def _checked(p: _Planner) -> list[str]:
    if not p.w.is_success():
        s, t = p.w.goal_conditions()
        raise PlanError(f"plan ends with {s}/{t} goal conditions met")
    return p.plan


def expert_plan(ep: dict) -> list[str]:
    """EB action names that take episode ``ep`` from its initial state to its goal (raises PlanError)."""
    return plan_for(Simulator.from_episode(ep))


__all__ = ["PlanError", "expert_plan", "plan_for"]
