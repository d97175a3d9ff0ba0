"""Goal conditions of ALFRED's seven task types, as EB's ``env/tasks.py`` counts them.

Input: a world state (:class:`~embodied_rft.world.state.WorldState`, e.g. a ``Simulator``). Output: ``conditions(sim) -> (met, total)``;
success is ``met == total`` and progress ``met / total`` (EB's ``task_progress``).

- pick_and_place_simple: a target in a parent-type receptacle (1).
- pick_two_obj_and_place: min(2, most targets in one parent-type receptacle) (2).
- look_at_obj_in_light: a target held (1); a toggle-type lamp on and visible (1).
- pick_clean/heat/cool_then_place_in_recep: a target in a parent (1); a target cleaned / heated / cooled
  (1); one target both (1).
- pick_and_place_with_movable_recep: a target in an mrecep-type object (1); an mrecep in a parent (1); one
  mrecep holding a target and in a parent (1).

``object_sliced`` adds one condition ("a sliced piece exists"; two and ``min(2, #pieces)`` for pick-two) and
makes only pieces count as targets. "In" means the direct parent. "Visible" means at the agent's place.
Departure: EB matches targets by substring of THOR's objectId, so a Pencil counts as a "Pen" and a
ButterKnife as a "Knife"; here a target is its exact type or, when the goal is not sliced, its pieces
(``Apple`` is also matched by ``Apple|..|AppleSliced_1`` in EB, which is the case this keeps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from embodied_rft.world.objects import SLICED_TYPE

if TYPE_CHECKING:  # pragma: no cover
    from embodied_rft.world.state import WorldState


def _targets(sim: WorldState) -> list:
    g = sim.goal
    sl = SLICED_TYPE.get(g.object_target)
    if g.object_sliced:
        return list(sim.by_type.get(sl, ()))
    out = list(sim.by_type.get(g.object_target, ()))
    if sl is not None:
        out.extend(sim.by_type.get(sl, ()))
    return out


def conditions(sim: WorldState) -> tuple[int, int]:
    g = sim.goal
    tt = sim.task_type
    targets = _targets(sim)
    s = t = 0
    if g.object_sliced:
        n_pieces = len(sim.by_type.get(SLICED_TYPE[g.object_target], ()))
        if tt == "pick_two_obj_and_place":
            t += 2
            s += min(n_pieces, 2)
        else:
            t += 1
            s += n_pieces >= 1
    objs = sim.objs
    if tt == "look_at_obj_in_light":
        t += 2
        s += sim.held is not None and objs[sim.held] in targets
        s += any(lamp.on and sim.anchor(lamp) == sim.loc for lamp in sim.by_type.get(g.toggle_target, ()))
        return s, t
    parent = g.parent_target

    def in_parent(o) -> bool:
        return o.parent is not None and o.parent in objs and objs[o.parent].type == parent

    if tt == "pick_and_place_simple":
        return s + any(in_parent(o) for o in targets), t + 1
    if tt == "pick_two_obj_and_place":
        counts: dict[str, int] = {}
        for o in targets:
            if in_parent(o):
                counts[o.parent] = counts.get(o.parent, 0) + 1
        return s + min(max(counts.values(), default=0), 2), t + 2
    if tt == "pick_and_place_with_movable_recep":
        mids = {m.id for m in sim.by_type.get(g.mrecep_target, ())}
        holding = {o.parent for o in targets if o.parent in mids}
        placed = {m for m in mids if in_parent(objs[m])}
        s += bool(holding) + bool(placed) + bool(holding & placed)
        return s, t + 3
    flag = {
        "pick_clean_then_place_in_recep": "cleaned",
        "pick_heat_then_place_in_recep": "heated",
        "pick_cool_then_place_in_recep": "cooled",
    }[tt]
    placed = [o for o in targets if in_parent(o)]
    s += bool(placed) + any(getattr(o, flag) for o in targets) + any(getattr(o, flag) for o in placed)
    return s, t + 3


__all__ = ["conditions"]
