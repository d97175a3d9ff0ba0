"""One episode's world state and the rule-free queries on it: where things are, what is within reach, which
instance a plain name means.

:class:`WorldState` holds the objects (:class:`Obj`), the agent's place, the held object and EB's bookkeeping
(``cur_receptacle``, put counts, step counters); :class:`~embodied_rft.world.simulator.Simulator` adds the
action rules, goals and observations on top. The rules these queries implement (anchors, settled objects,
plain-name resolution) are described in :mod:`embodied_rft.world.simulator`'s docstring.
"""

from __future__ import annotations

import functools
import operator
from typing import NamedTuple

from embodied_rft.world.actions import ActionSpace, split_action
from embodied_rft.world.episode import Goal, parse_episode
from embodied_rft.world.objects import KNIVES, SLICED_TYPE, TYPES, WHOLE_TYPE, base_type, instance_index

#: Pieces one slice makes (THOR makes more; 3 keep observations short and still allow two-slice goals).
N_PIECES = 3
#: Parent marker of a held object.
HAND = "@hand"


class StepResult(NamedTuple):
    success: bool
    feedback: str


class Obj:
    """Mutable per-object state (slots: copied field by field, never deep-copied)."""

    __slots__ = (
        "id",
        "type",
        "parent",
        "floor_at",
        "open",
        "on",
        "dirty",
        "cleaned",
        "heated",
        "cooled",
        "src",
        "order",
        "touch",
        "put_step",
        "proc_step",
    )

    def __init__(self, oid: str, typ: str, parent: str | None, order: int) -> None:
        self.id = oid
        self.type = typ
        self.parent = parent
        self.floor_at: str | None = oid  # anchor of a parentless object: itself, or where it was dropped
        self.open = False
        self.on = False
        self.dirty = False
        self.cleaned = False
        self.heated = False
        self.cooled = False
        self.src: str | None = None  # for a sliced piece: the id of the whole object it came from
        self.order = order
        self.touch = -1  # last step the agent acted on it (recency for plain-name resolution)
        self.put_step = -1  # step the agent put it into a fixed receptacle (-1: never / picked up since)
        self.proc_step = -1  # last step it was cleaned, heated or cooled

    def clone(self) -> Obj:
        o = Obj.__new__(Obj)
        o.id, o.type, o.parent, o.floor_at = self.id, self.type, self.parent, self.floor_at
        o.open, o.on, o.dirty, o.cleaned, o.heated, o.cooled = (
            self.open,
            self.on,
            self.dirty,
            self.cleaned,
            self.heated,
            self.cooled,
        )
        o.src, o.order, o.touch = self.src, self.order, self.touch
        o.put_step, o.proc_step = self.put_step, self.proc_step
        return o


@functools.lru_cache(maxsize=65536)
def _parse(name: str) -> tuple[str, str | None]:
    return split_action(name)


@functools.lru_cache(maxsize=4096)
def _space(ids: tuple[str, ...]) -> ActionSpace:
    return ActionSpace.for_instances(ids)


_VERB_KEY = {
    "find a": "find",
    "pick up the": "pick",
    "open the": "open",
    "close the": "close",
    "turn on the": "on",
    "turn off the": "off",
    "slice the": "slice",
}
_ORDER = operator.attrgetter("order")
_KEEP_RECEPTACLE = frozenset({"put", "open"})  # EB keeps cur_receptacle across these


class WorldState:
    """One episode's world state and its queries. Build with :meth:`from_episode`."""

    def __init__(self, task_type: str, goal: Goal, room: str, objects: dict[str, Obj], actions: ActionSpace) -> None:
        self.task_type = task_type
        self.goal = goal
        self.room = room
        self.objs = objects
        self.actions = actions
        self.by_type: dict[str, list[Obj]] = {}
        for o in sorted(objects.values(), key=_ORDER):  # each type's instances in instance-number order
            lst = self.by_type.get(o.type)
            if lst is None:
                self.by_type[o.type] = [o]
            else:
                lst.append(o)
        self.held: str | None = None
        self.loc: str | None = None  # anchor the agent stands at (None: where it started)
        self.cur_receptacle: str | None = None  # EB's cur_receptacle (an id, or an unresolved name)
        self.last_found: str | None = None
        self.put_counts: dict[str, int] = {}
        self.steps = 0
        self.invalid_steps = 0
        self._piece_count: dict[str, int] = {}
        self._order = 1_000_000

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_episode(cls, ep: dict, where: str = "") -> WorldState:
        """Validate ``ep`` (errors name the field, see :mod:`episode`) and build its initial state."""
        spec = parse_episode(ep, where)
        objs: dict[str, Obj] = {}
        for k, s in enumerate(spec.objects):
            o = Obj(s.id, s.type, s.parent, instance_index(s.id) * 10_000 + k)
            st = s.state
            if st:
                g = st.get
                o.open, o.on, o.dirty = g("open", False), g("on", False), g("dirty", False)
                o.cleaned, o.heated, o.cooled = g("cleaned", False), g("heated", False), g("cooled", False)
            objs[s.id] = o
        return cls(spec.task_type, spec.goal, spec.room, objs, _space(tuple(objs)))

    def copy(self) -> WorldState:
        objs = {k: o.clone() for k, o in self.objs.items()}
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.objs = objs
        new.by_type = {t: [objs[o.id] for o in lst] for t, lst in self.by_type.items()}
        new.put_counts = dict(self.put_counts)
        new._piece_count = dict(self._piece_count)
        return new

    # ------------------------------------------------------------------ geometry-free queries
    def anchor(self, o: Obj) -> str | None:
        """The place an object is at: its top-level ancestor's place, or HAND when held."""
        objs = self.objs
        while o.parent is not None:
            if o.parent == HAND:
                return HAND
            o = objs[o.parent]
        return o.floor_at

    def enclosing_closed(self, o: Obj) -> Obj | None:
        """The innermost closed openable receptacle containing ``o`` (None if it can be reached)."""
        objs = self.objs
        p = o.parent
        while p is not None and p != HAND:
            c = objs[p]
            if TYPES[c.type].openable and not c.open:
                return c
            p = c.parent
        return None

    def reachable(self, o: Obj) -> bool:
        return self.anchor(o) == self.loc

    def contents(self, r: Obj) -> list[Obj]:
        """Direct contents of ``r`` (mounted fixtures such as a Faucet on a Sink are not contents)."""
        rid = r.id
        return [o for o in self.objs.values() if o.parent == rid and TYPES[o.type].pickable]

    def holding(self) -> Obj | None:
        return self.objs[self.held] if self.held is not None else None

    def _settled(self, o: Obj) -> bool:
        if o.put_step < 0:
            return False
        # put somewhere by the agent: it is "done" unless processed there since and reachable
        return not (o.proc_step > o.put_step and self.enclosing_closed(o) is None)

    def candidates(self, target: str) -> list[Obj]:
        """Objects an action target names: ``X_2`` that instance (or its pieces once sliced); a plain ``X``
        every instance of X and, for a sliceable X, every piece of X."""
        if instance_index(target) > 1:
            o = self.objs.get(target)
            if o is not None:
                return [o]
            # a sliced instance: its pieces
            return [o for o in self.by_type.get(SLICED_TYPE.get(base_type(target), ""), ()) if o.src == target]
        lst = self.by_type.get(target, [])
        sl = SLICED_TYPE.get(target)
        if sl is not None:
            pieces = self.by_type.get(sl)
            if pieces:
                return lst + pieces
        return lst

    def _find_key(self, o: Obj, knife: bool) -> tuple:
        piece = o.type in WHOLE_TYPE
        if o.type in SLICED_TYPE or piece:
            sliced_rank = (not piece) if not knife else piece
        else:
            sliced_rank = False
        # with a knife in hand a whole sliceable object is wanted for slicing, even one the agent staged
        settled = self._settled(o) and not (knife and o.type in SLICED_TYPE)
        return (
            self.anchor(o) == HAND,
            settled,
            sliced_rank,
            self.enclosing_closed(o) is not None,
            -o.touch,
            self.anchor(o) != self.loc,
            o.order,
        )

    def _knife_in_hand(self) -> bool:
        return self.held is not None and self.objs[self.held].type in KNIVES

    def resolve_find(self, target: str) -> Obj | None:
        cands = self.candidates(target)
        if not cands:
            return None
        if len(cands) == 1:
            return cands[0]
        knife = self._knife_in_hand()
        return min(cands, key=lambda o: self._find_key(o, knife))

    def _resolve_here(self, cands: list[Obj], pieces_first: bool) -> Obj | None:
        """Among ``cands``: the last found one if within reach, else the best-ranked within reach."""
        here = [o for o in cands if self.anchor(o) == self.loc]
        if not here:
            return None
        lf = self.last_found
        for o in here:
            if o.id == lf:
                return o

        def key(o: Obj) -> tuple:
            piece = o.type in WHOLE_TYPE
            return (
                (not piece) if pieces_first else False,
                self.enclosing_closed(o) is not None,
                self._settled(o),
                -o.touch,
                o.order,
            )

        return min(here, key=key)

    def resolve(self, action: str) -> str | None:
        """The id of the object ``action`` would act on now (None when it names none within reach);
        for ``put down``, the receptacle. Does not change the state."""
        verb, target = _parse(action)
        if target is None:
            return self.cur_receptacle if action == "put down the object in hand" else None
        key = _VERB_KEY[verb]
        if key == "find":
            o = self.resolve_find(target)
        else:
            cands = self.candidates(target)
            if key == "slice":
                cands = [c for c in cands if c.type not in WHOLE_TYPE]
            elif key == "pick":
                cands = [c for c in cands if self.anchor(c) != HAND]
            o = self._resolve_here(cands, pieces_first=key == "pick")
        return o.id if o is not None else None

    def to_scene_objects(self) -> list[dict]:
        """The current objects in the Episode ``scene.objects`` format (held object: parent null).
        Sliced pieces are written with their own ids and type."""
        out = []
        for o in self.objs.values():
            st = {"open": o.open, "on": o.on, "dirty": o.dirty}
            for k in ("cleaned", "heated", "cooled"):
                if getattr(o, k):
                    st[k] = True
            out.append({"id": o.id, "type": o.type, "parent": None if o.parent == HAND else o.parent, "state": st})
        return out


__all__ = ["HAND", "N_PIECES", "Obj", "StepResult", "WorldState"]
