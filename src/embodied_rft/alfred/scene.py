"""The objects of one ALFRED scene, with EB instance names and their initial places.

Input: a :class:`~embodied_rft.alfred.reader.Trajectory`. Output: a :class:`SceneIndex` that
resolves the plan's THOR object ids and receptacle coordinates to :class:`Instance` records, each
with an EB type, an EB instance name (``Cabinet``, ``Cabinet_2`` ...) and its initial parent.

Where the objects come from:
- ``scene.object_poses``: every movable object (``Apple_a1b2c3`` -> an ``Apple``); ALFRED repeats
  ``objectName`` for duplicated objects, so each pose entry is its own instance, identified by
  position. Plan ids (``Apple|+00.66|+00.72|+00.27``) are matched to poses by position (ids round
  to 0.01; every plan id of the shared copies matches a pose within 0.006).
- the plan: fixed receptacles and appliances (CounterTop, Cabinet, SinkBasin, Fridge, DeskLamp ...)
  are not in ``object_poses``; they exist through ``receptacleObjectId`` / ``objectId`` and through
  ``coordinateReceptacleObjectId`` (type + coordinates), which names where a picked-up object lay.
  Coordinates and ids of one receptacle are consistent within a trajectory, so a first pass learns
  coordinates -> id from the steps that carry both.
- a ``Faucet`` for every sink: EB cleans what lies in the SinkBasin when a Faucet is turned on
  (docs/facts.md §4.3), and ALFRED's plan never names the faucet.

Instance numbers (a choice, documented): EB numbers repeated instances in AI2-THOR's metadata
order, which ``traj_data.json`` does not record. The simulator resolves a plain name (``find a
Book``) by a ranking (not settled, not enclosed, recently touched ...), not to instance 1, so only
suffixed names (``Book_2``) address one instance exactly. Hence the instances the plan never uses
come first (``object_poses`` order) and the plan's own instances after them: whenever the scene has
another object of the type, the expert addresses its object exactly. Among several instances the
plan uses (two books for pick_two, two countertops), ``plan_order="reverse"`` gives the plain name
to the one used last, ``"forward"`` to the one used first; ``prepare`` tries reverse, then forward.
The gold NL Steps never write suffixes; the comparison strips them.

Departures (inferences, documented): only receptacles the plan touches are known, so a scene has
fewer fixed receptacles than its AI2-THOR floor plan. Initial parents are known for objects the plan
picks up (the receptacle of their first pickup); a lamp toggled right before a pickup without moving
stands on the picked object's receptacle; goal objects the plan never moves start in their goal
receptacle (:meth:`SceneIndex._infer_goal_parents`); all other objects are ``None`` (loose in the
room). Objects whose type EB cannot address (TeddyBear, Towel, ...) are left out and counted, and a
support EB cannot name (HandTowelHolder) leaves its object loose.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embodied_rft.alfred.names import eb_type, type_of_id
from embodied_rft.alfred.reader import HighStep, Trajectory
from embodied_rft.data.jsonl import DataError

# Plan ids round positions to 0.01 (THOR formats '%+06.2f'); a pose lies within half a step of it.
_ID_TOL = 0.011
# coordinateReceptacleObjectId holds 4x the position as (x, x, z, z, y, y) (checked on the shared data).
_COORD_TOL = 0.02


PLAN_ORDERS = ("reverse", "forward")


class ConversionError(DataError):
    """A well-formed ALFRED file whose plan cannot be expressed in EB-ALFRED; names file and field."""


@dataclass(eq=False)
class Instance:
    """One object of the scene. ``eq=False``: identity is the object, two Apples are two objects."""

    alfred_type: str  # THOR type: 'SinkBasin', 'Apple'
    type: str  # EB type: 'Sink', 'Apple'
    key: tuple  # what identifies it in the trajectory (pose index, id or coordinates)
    pose_index: int | None = None
    first_use: int | None = None  # index of the first plan step that names it
    name: str = ""  # EB instance name, set by SceneIndex ('Cabinet_2')
    parent: Instance | None = None  # initial parent (None: loose in the room or unknown)
    extra: dict = field(default_factory=dict)


def _id_position(object_id: str) -> tuple[float, float, float] | None:
    parts = object_id.split("|")
    try:
        return float(parts[1]), float(parts[2]), float(parts[3])
    except (IndexError, ValueError):
        return None


def _base_id(object_id: str) -> str:
    """'Apple|+00.8|+00.8|-00.5|AppleSliced_1' -> 'Apple|+00.8|+00.8|-00.5' (slices belong to their
    whole object); receptacle suffixes ('...|SinkBasin') are kept: the basin is what the plan uses."""
    parts = object_id.split("|")
    if len(parts) >= 5 and "Sliced" in parts[4]:
        return "|".join(parts[:4])
    return object_id


class SceneIndex:
    """Instances of one trajectory's scene, resolved from its poses and plan."""

    def __init__(self, traj: Trajectory, plan_order: str = "reverse"):
        if plan_order not in PLAN_ORDERS:
            raise ValueError(f"plan_order must be one of {PLAN_ORDERS}, got {plan_order!r}")
        self.traj = traj
        self.plan_order = plan_order
        self.instances: list[Instance] = []
        self.dropped_types: dict[str, int] = {}  # ALFRED types EB cannot address -> count
        self._by_id: dict[str, Instance] = {}
        self._by_coords: dict[tuple, Instance] = {}
        self._pose_types: set[str] = set()
        # initial parents inferred from the goal (see _infer_goal_parents): (object, parent, why)
        self._inferred: list[tuple[Instance, Instance, str]] = []
        self._poses: list[Instance] = []
        for j, pose in enumerate(traj.poses):
            self._pose_types.add(pose.type)
            t = eb_type(pose.type)
            if t is None:
                self.dropped_types[pose.type] = self.dropped_types.get(pose.type, 0) + 1
                continue
            inst = Instance(alfred_type=pose.type, type=t, key=("pose", j), pose_index=j)
            inst.extra["position"] = pose.position
            self._poses.append(inst)
            self.instances.append(inst)
        self._learn_coords()
        self._resolve_plan()
        self._add_faucets()
        self._name()

    # ---- resolution -------------------------------------------------------------------------
    def _err(self, step: HighStep, fld: str, msg: str) -> ConversionError:
        return ConversionError(f"{self.traj.path}: field 'plan.high_pddl[{step.index}].planner_action.{fld}': {msg}")

    def _learn_coords(self) -> None:
        for s in self.traj.high_pddl:
            rid = s.receptacle_id if s.action == "PutObject" else s.object_id if s.action in _APPLIANCE_VERBS else None
            if rid and s.receptacle_coords:
                inst = self.by_id(rid, s, "receptacleObjectId" if s.action == "PutObject" else "objectId")
                self._by_coords[_ckey(s.receptacle_coords)] = inst

    def by_id(self, object_id: str, step: HighStep, fld: str = "objectId") -> Instance:
        """The instance a THOR objectId names (a slice id names its whole object)."""
        base = _base_id(object_id)
        inst = self._by_id.get(base)
        if inst is not None:
            return inst
        parts = base.split("|")
        thor_type = parts[0]
        pos = _id_position(base)
        if pos is None:
            raise self._err(step, fld, f"malformed THOR object id {object_id!r}")
        alfred_type = type_of_id(base)
        if thor_type in self._pose_types and alfred_type == thor_type:
            best, best_d = None, _ID_TOL
            for cand in self._poses:
                if cand.alfred_type != thor_type:
                    continue
                d = max(abs(a - b) for a, b in zip(pos, cand.extra["position"], strict=True))
                if d <= best_d:
                    best, best_d = cand, d
            if best is None:
                raise self._err(step, fld, f"no {thor_type} at {pos} in scene.object_poses for id {object_id!r}")
            inst = best
        else:
            t = eb_type(alfred_type)
            if t is None:
                raise self._err(step, fld, f"type {alfred_type!r} has no EB-ALFRED action (id {object_id!r})")
            inst = Instance(alfred_type=alfred_type, type=t, key=("id", base))
            inst.extra["position"] = pos
            self.instances.append(inst)
        self._by_id[base] = inst
        return inst

    def by_coords(self, step: HighStep) -> Instance | None:
        """The receptacle a step's coordinateReceptacleObjectId names (None when it has none, or
        when EB has no name for its type)."""
        if step.receptacle_coords is None:
            return None
        key = _ckey(step.receptacle_coords)
        inst = self._by_coords.get(key)
        if inst is not None:
            return inst
        typ, c = step.receptacle_coords
        if typ in self._pose_types:
            pos = (c[0] / 4, c[4] / 4, c[2] / 4)
            cands = [p for p in self._poses if p.alfred_type == typ]
            dist = [
                (max(abs(a - b) for a, b in zip(pos, p.extra["position"], strict=True)), i) for i, p in enumerate(cands)
            ]
            if dist and min(dist)[0] <= _COORD_TOL:
                inst = cands[min(dist)[1]]
        if inst is None:
            t = eb_type(typ)
            if t is None:
                # EB cannot name it (HandTowelHolder, ...): EB's ``find a HandTowel`` goes to the
                # towel itself, so the object is kept and its support is left unknown.
                self.dropped_types[typ] = self.dropped_types.get(typ, 0) + 1
                return None
            inst = Instance(alfred_type=typ, type=t, key=("coords", key))
            inst.extra["position"] = (c[0] / 4, c[4] / 4, c[2] / 4)
            self.instances.append(inst)
        self._by_coords[key] = inst
        return inst

    def _resolve_plan(self) -> None:
        """Touch every plan object in order (first use) and record initial parents: an object
        cannot move before its first pickup, so the receptacle it is picked from is where it began."""
        picked: set[Instance] = set()
        sliced: set[Instance] = set()
        prev: HighStep | None = None
        for s in self.traj.high_pddl:
            if s.action in ("GotoLocation", "NoOp"):
                prev = s
                continue
            objs = []
            if s.object_id:
                objs.append(self.by_id(s.object_id, s))
            if s.receptacle_id:
                objs.append(self.by_id(s.receptacle_id, s, "receptacleObjectId"))
            src = self.by_coords(s) if s.action == "PickupObject" else None
            if src is not None:
                objs.append(src)
            for o in objs:
                if o.first_use is None:
                    o.first_use = s.index
            if s.action == "SliceObject":
                sliced.add(objs[0])
            if s.action == "PickupObject":
                obj = objs[0]
                if obj not in picked:
                    picked.add(obj)
                    if obj.parent is None and src is not obj:
                        obj.parent = src
                # ALFRED toggles a lamp and picks the object up without moving (23 look_at plans):
                # both stand at one place, so the lamp (whose support ALFRED never names) is put on
                # the object's receptacle; otherwise the lamp would be somewhere else and the
                # object could not be seen in its light.
                if prev is not None and prev.action == "ToggleObject" and src is not None:
                    lamp = self.by_id(prev.object_id or "", prev)
                    if lamp.parent is None and lamp is not src:
                        lamp.parent = src
            prev = s
        self._infer_goal_parents(picked, sliced)

    def _infer_goal_parents(self, picked: set[Instance], sliced: set[Instance]) -> None:
        """Goal objects the plan never moves were in place from the start: ALFRED's sampler sometimes
        starts the target in its goal receptacle, and the expert plan (which reached the goal) then
        only slices it there (39 plans) or only moves the movable receptacle holding it (a few
        pick_and_place_with_movable_recep plans). ``traj_data.json`` does not say where they were;
        the goal does, and the nearest matching receptacle is taken."""
        t = self.traj
        if t.object_sliced and t.parent_target:
            for inst in sorted(sliced - picked, key=_order_key):
                if inst.parent is None and inst.alfred_type == t.object_target:
                    parent = self._nearest(t.parent_target, inst, create=True)
                    if parent is not None:
                        inst.parent = parent
                        self._inferred.append((inst, parent, "sliced_in_goal_receptacle"))
        if t.task_type == "pick_and_place_with_movable_recep" and t.mrecep_target:
            moved = [i for i in picked if i.alfred_type == t.mrecep_target]
            touched = any(i.alfred_type == t.object_target for i in picked | sliced)
            if moved and not touched:
                m = min(moved, key=_order_key)
                cands = [
                    p for p in self._poses if p.alfred_type == t.object_target and p.parent is None and p not in picked
                ]
                if cands:
                    obj = min(cands, key=lambda p: _dist(p, m))
                    obj.parent = m
                    self._inferred.append((obj, m, "in_moved_receptacle"))

    def _nearest(self, alfred_type: str, near: Instance, create: bool) -> Instance | None:
        """The known instance of ``alfred_type`` closest to ``near`` (a new one when none is known)."""
        cands = [i for i in self.instances if i.alfred_type == alfred_type and "position" in i.extra]
        if cands:
            return min(cands, key=lambda i: _dist(i, near))
        if not create:
            return None
        t = eb_type(alfred_type)
        if t is None:
            return None
        inst = Instance(alfred_type=alfred_type, type=t, key=("inferred", alfred_type), first_use=near.first_use)
        self.instances.append(inst)
        return inst

    def _add_faucets(self) -> None:
        sinks = [i for i in self.instances if i.type == "Sink"]
        for n, sink in enumerate(sorted(sinks, key=_order_key)):
            # Mounted on the sink (parent): the simulator cleans the contents of the basin a turned-on
            # Faucet hangs on, and the agent at the sink can reach it, as in EB's THOR scenes.
            f = Instance(alfred_type="Faucet", type="Faucet", key=("faucet", n), first_use=sink.first_use, parent=sink)
            sink.extra["faucet"] = f
            self.instances.append(f)

    def _name(self) -> None:
        by_type: dict[str, list[Instance]] = {}
        for inst in self.instances:
            by_type.setdefault(inst.type, []).append(inst)
        for typ, group in by_type.items():
            unused = sorted((i for i in group if i.first_use is None), key=_order_key)
            used = sorted((i for i in group if i.first_use is not None), key=_order_key)
            if self.plan_order == "reverse":
                used.reverse()
            for n, inst in enumerate(unused + used):
                inst.name = typ if n == 0 else f"{typ}_{n + 1}"

    # ---- outputs ----------------------------------------------------------------------------
    def ordered(self) -> list[Instance]:
        """Instances in a stable order: by type, then instance number."""
        return sorted(self.instances, key=lambda i: (i.type, _num(i.name)))

    @property
    def inferred(self) -> list[dict[str, str]]:
        """Initial parents inferred from the goal: [{object, parent, why}]."""
        return [{"object": o.name, "parent": p.name, "why": why} for o, p, why in self._inferred]


_APPLIANCE_VERBS = ("HeatObject", "CoolObject", "CleanObject", "ToggleObject")


def _ckey(coords: tuple[str, tuple[float, ...]]) -> tuple:
    return coords[0], tuple(round(v, 3) for v in coords[1])


def _order_key(inst: Instance) -> tuple:
    """Numbering order: instances the plan never uses first (pose order), then the plan's."""
    used = inst.first_use is not None
    return (1 if used else 0, inst.first_use if used else 0, inst.pose_index if inst.pose_index is not None else 10**6)


def _dist(a: Instance, b: Instance) -> float:
    pa, pb = a.extra.get("position"), b.extra.get("position")
    if pa is None or pb is None:
        return float("inf")
    return sum((x - y) ** 2 for x, y in zip(pa, pb, strict=True)) ** 0.5


def _num(name: str) -> int:
    head, _, tail = name.rpartition("_")
    return int(tail) if head and tail.isdigit() else 1
