"""ALFRED ``plan.high_pddl`` -> an EB-ALFRED action plan that EB's executor would carry out.

Input: a :class:`~embodied_rft.alfred.reader.Trajectory` and its :class:`SceneIndex`. Output:
:class:`Conversion` (the EB action names, in order, and which documented departures from EB's gold
NL Steps fired).

The mapping follows EB's own execution semantics (``thor_connector.llm_skill_interact``): ``find``
moves to an object and makes it the current receptacle; ``put down`` puts the held object into the
current receptacle, or drops it when there is none; ``open`` and ``put down`` keep the current
receptacle, every other action clears it. The translation of each ALFRED step mirrors how EB's gold
NL Steps were written (checked against all 300 EB-ALFRED episodes):

- ``GotoLocation`` -> ``find a X`` where X is what the next step acts on (the object picked up or
  sliced, the receptacle put into, the lamp, microwave, fridge or sink), not ALFRED's location arg;
- ``PickupObject``/``SliceObject``/``ToggleObject`` -> ``pick up the T`` / ``slice the T`` /
  ``turn on the T`` (EB has these verbs for types only; instances are reached with ``find a T_2``);
- ``PutObject`` -> ``put down the object in hand``;
- ``HeatObject`` -> open, put down, close, turn on, turn off, open, find, pick up, close the Microwave;
- ``CoolObject`` -> open, put down, close, open, find, pick up, close the Fridge;
- ``CleanObject`` -> put down, turn on the Faucet, turn off the Faucet, find, pick up.

Departures from the NL Steps, each where the NL Steps would fail EB's own execution or goal check
(docs/facts.md §4.3, §4.5), counted per plan in ``Conversion.notes``:

- ``faucet``: cleaning turns the Faucet on and off; EB marks an object clean only when a Faucet is
  turned on while it lies in the SinkBasin, and the NL Steps never do.
- ``find_before_put``: a ``find`` of the receptacle (or appliance) before a ``put down`` when the
  current receptacle is not it (ALFRED puts without moving after a pickup; EB would drop the object
  on the floor).
  A knife put away right after slicing is the exception: the NL Steps drop it (``drop_tool``), which
  is harmless to the goal, and so do we.
- ``open_before_put``: ``open`` a closed Fridge/Microwave/Cabinet/Drawer/Safe/Box before putting
  into it (AI2-THOR refuses to place into a closed receptacle) and ``close`` it afterwards, as
  ALFRED's low-level expert does.
- ``open_container``: open (and afterwards close) a closed receptacle to pick up or slice what lies
  in it.
- ``find_before_interact``: a ``find`` before picking up or slicing an object that is not at the
  agent's place (ALFRED toggles a lamp and picks up an object without moving in between).
- ``held_object``: Heat/Cool/Clean act on the object in hand; ALFRED's discrete args sometimes name
  another object (``CleanObject knife`` while a tomato slice is held), and the NL Steps copy them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from embodied_rft.alfred.names import OPENABLE, SLICING_TOOLS
from embodied_rft.alfred.reader import HighStep, Trajectory
from embodied_rft.alfred.scene import ConversionError, Instance, SceneIndex
from embodied_rft.world.actions import PUT_DOWN

NOTES = (
    "faucet",
    "find_before_put",
    "drop_tool",
    "open_before_put",
    "open_container",
    "find_before_interact",
    "held_object",
)


@dataclass(frozen=True)
class Conversion:
    plan: tuple[str, ...]
    notes: dict[str, int]  # departure name -> how often it fired in this plan


class _Builder:
    """Tracks what EB's executor would know: object places, open receptacles, the held object,
    the current receptacle (EB's ``cur_receptacle``) and the agent's place."""

    def __init__(self, scene: SceneIndex):
        self.scene = scene
        self.parent: dict[Instance, Instance | None] = {i: i.parent for i in scene.instances}
        self.floor: dict[Instance, Instance] = {}  # dropped object -> the place it was dropped at
        self.is_open: dict[Instance, bool] = {i: False for i in scene.instances if i.type in OPENABLE}
        self.held: Instance | None = None
        self.cur: Instance | None = None
        self.at: Instance | None = None
        self.out: list[str] = []
        self.notes: Counter[str] = Counter()

    # -- EB's state -------------------------------------------------------------------------
    def place(self, inst: Instance) -> Instance:
        """Where the agent stands to reach ``inst``: its outermost container (or where it was dropped)."""
        seen = 0
        while self.parent.get(inst) is not None:
            inst = self.parent[inst]  # type: ignore[assignment]
            seen += 1
            if seen > 50:  # a parent cycle would be a bug in the tracker, not in the data
                raise RuntimeError(f"parent cycle at {inst.name}")
        return self.floor.get(inst, inst)

    def closed_around(self, inst: Instance, include_self: bool = False) -> list[Instance]:
        """Closed openable receptacles holding ``inst`` (and ``inst`` itself), outermost first."""
        chain = [inst] if include_self else []
        p = self.parent.get(inst)
        while p is not None:
            chain.append(p)
            p = self.parent.get(p)
        return [c for c in reversed(chain) if c in self.is_open and not self.is_open[c]]

    # -- EB's actions ------------------------------------------------------------------------
    def find(self, inst: Instance) -> None:
        self.out.append(f"find a {inst.name}")
        self.cur = inst
        self.at = self.place(inst)

    def pick(self, inst: Instance) -> None:
        self.out.append(f"pick up the {inst.type}")
        self.held = inst
        self.parent[inst] = None
        self.floor.pop(inst, None)
        self.cur = None

    def put(self) -> None:
        self.out.append(PUT_DOWN)
        obj = self.held
        assert obj is not None
        if self.cur is None:  # EB drops the object where the agent stands
            self.parent[obj] = None
            if self.at is not None:
                self.floor[obj] = self.at
        else:
            self.parent[obj] = self.cur
            self.floor.pop(obj, None)
        self.held = None

    def open(self, inst: Instance) -> None:
        self.out.append(f"open the {inst.name}")
        self.is_open[inst] = True

    def close(self, inst: Instance) -> None:
        self.out.append(f"close the {inst.name}")
        self.is_open[inst] = False
        self.cur = None

    def toggle(self, inst: Instance, on: bool) -> None:
        self.out.append(f"turn {'on' if on else 'off'} the {inst.type}")
        self.cur = None

    def slice(self, inst: Instance) -> None:
        self.out.append(f"slice the {inst.type}")
        self.cur = None

    # -- helpers -----------------------------------------------------------------------------
    def reach(self, inst: Instance) -> list[Instance]:
        """Be where ``inst`` is and open what encloses it; returns what was opened (to close later)."""
        if self.at is None or self.place(inst) is not self.at:
            self.find(inst)
            self.notes["find_before_interact"] += 1
        opened = self.closed_around(inst)
        for c in opened:
            self.open(c)
            self.notes["open_container"] += 1
        return opened

    def at_receptacle(self, recep: Instance) -> list[Instance]:
        """Make ``recep`` the current receptacle and open it if it is closed; returns what was opened."""
        if self.cur is not recep:
            self.find(recep)
            self.notes["find_before_put"] += 1
        opened = self.closed_around(recep, include_self=True)
        for c in opened:
            self.open(c)
            self.notes["open_before_put"] += 1
        return opened


def _target(scene: SceneIndex, step: HighStep) -> Instance | None:
    """What a GotoLocation before ``step`` should find (EB's NL Steps: the next step's object)."""
    if step.action == "PutObject":
        return scene.by_id(step.receptacle_id or "", step, "receptacleObjectId")
    if step.action in ("PickupObject", "SliceObject", "ToggleObject", "HeatObject", "CoolObject", "CleanObject"):
        return scene.by_id(step.object_id or "", step)
    return None


def convert_plan(traj: Trajectory, scene: SceneIndex | None = None) -> Conversion:
    """Convert one trajectory's high-level plan; ConversionError names the file and the step."""
    scene = scene or SceneIndex(traj)
    b = _Builder(scene)
    goal_types = {traj.object_target, traj.mrecep_target} - {""}
    steps = traj.high_pddl

    def err(step: HighStep, msg: str) -> ConversionError:
        return ConversionError(f"{traj.path}: field 'plan.high_pddl[{step.index}]' ({step.action}): {msg}")

    after_goto = False
    for k, step in enumerate(steps):
        a = step.action
        if a == "GotoLocation":
            nxt = next((s for s in steps[k + 1 :] if s.action != "GotoLocation"), None)
            tgt = _target(scene, nxt) if nxt is not None else None
            if tgt is not None:
                b.find(tgt)
            after_goto = tgt is not None
            continue
        if a == "NoOp":
            continue
        moved, after_goto = after_goto, False

        if a == "PickupObject":
            obj = scene.by_id(step.object_id or "", step)
            if b.held is not None:
                raise err(step, f"picks up {obj.name} while holding {b.held.name}")
            opened = b.reach(obj)
            b.pick(obj)
            for c in reversed(opened):
                b.close(c)
        elif a == "PutObject":
            recep = scene.by_id(step.receptacle_id or "", step, "receptacleObjectId")
            if b.held is None:
                raise err(step, "puts down with an empty hand")
            held = b.held
            tool_discard = (
                not moved and b.cur is None and held.type in SLICING_TOOLS and held.alfred_type not in goal_types
            )
            if tool_discard:
                b.put()
                b.notes["drop_tool"] += 1
                continue
            opened = b.at_receptacle(recep)
            b.put()
            # Close again, as ALFRED's own low-level expert does: every receptacle stays closed
            # between steps, so later Heat/Cool expansions open it exactly as the NL Steps do.
            for c in reversed(opened):
                b.close(c)
        elif a == "SliceObject":
            obj = scene.by_id(step.object_id or "", step)
            if b.held is None or b.held.type not in SLICING_TOOLS:
                raise err(step, f"slices {obj.name} without a knife in hand")
            opened = b.reach(obj)
            b.slice(obj)
            for c in reversed(opened):
                b.close(c)
        elif a == "ToggleObject":
            lamp = scene.by_id(step.object_id or "", step)
            if b.at is None or b.place(lamp) is not b.at:
                b.find(lamp)
                b.notes["find_before_interact"] += 1
            b.toggle(lamp, on=True)
        elif a in ("HeatObject", "CoolObject", "CleanObject"):
            appliance = scene.by_id(step.object_id or "", step)
            obj = b.held
            if obj is None:
                raise err(step, f"{a} with an empty hand")
            named = step.args[0] if step.args else ""
            if named.lower() != obj.alfred_type.lower().replace("sliced", ""):
                b.notes["held_object"] += 1
            if b.cur is not appliance:  # the put down that starts the expansion needs it as receptacle
                b.find(appliance)
                b.notes["find_before_put"] += 1
            if a == "CleanObject":
                faucet = appliance.extra.get("faucet")
                if faucet is None:
                    raise err(step, f"cleans in {appliance.name}, which has no faucet")
                b.put()
                b.toggle(faucet, on=True)
                b.toggle(faucet, on=False)
                b.notes["faucet"] += 1
                b.find(obj)
                b.pick(obj)
            else:
                if not b.is_open.get(appliance, True):
                    b.open(appliance)
                b.put()
                b.close(appliance)
                if a == "HeatObject":
                    b.toggle(appliance, on=True)
                    b.toggle(appliance, on=False)
                b.open(appliance)
                b.find(obj)
                b.pick(obj)
                b.close(appliance)
        else:  # the reader admits only the verbs above
            raise err(step, f"unsupported verb {a!r}")
    return Conversion(plan=tuple(b.out), notes={n: b.notes[n] for n in NOTES if b.notes[n]})
