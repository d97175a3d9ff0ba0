"""The symbolic EB-ALFRED simulator: state, action rules and EB-style feedback.

Input: an Episode dict (:meth:`Simulator.from_episode`). Output: ``step(action) -> StepResult(success,
feedback)``, ``is_success()``, ``progress()``, ``observe_text()``, ``render_image()``, ``copy()``.

A proxy for EmbodiedBench's EB-ALFRED (AI2-THOR), written to follow EB's skill semantics
(``thor_connector.py``, ``env/thor_env.py``, ``env/tasks.py``, ``EBAlfEnv.get_env_feedback``):

- **Places.** There is no geometry. Every object has an *anchor*: the top-level object it sits in or on
  (a Cabinet, CounterTop, Sofa ...), or the place where it was dropped. ``find a X`` moves the agent to X's
  anchor; an object is *within reach* when its anchor is the agent's. Objects in a closed openable
  receptacle are hidden and cannot be picked up.
- **Instances.** ``X_2`` names exactly that instance. A plain ``X`` (EB's first-instance name) is resolved by
  a rule, so plans written with plain names (EB's NL steps, ALFRED's pick-two plans) work. ``find a X``
  ranks the instances of X (and its sliced pieces) by, in order: not held; not *settled* (put into a
  receptacle by the agent, unless it was cleaned/heated/cooled there since and can be reached, or it is a
  whole sliceable object and a knife is in hand); pieces before whole objects after a slice, whole objects
  first while a knife is in hand; not inside a closed receptacle; most recently found, picked, put or cut;
  within reach; instance number. ``pick up``, ``open``/``close``,
  ``turn on``/``off`` and ``slice`` act on the instance the last ``find`` chose when it is within reach,
  otherwise on the best-ranked instance within reach. EB instead maps a plain name to the first instance
  for find/open/close (``EBAlfEnv.step``) and uses THOR distances for pick-up: a deliberate departure.
- **Slicing** (``slice the Apple`` with a Knife or ButterKnife in hand) replaces the Apple by
  :data:`N_PIECES` pieces of type AppleSliced, ids ``AppleSliced``, ``AppleSliced_2`` ... in the Apple's place.
  As in EB, pieces have no names of their own in the action space: ``find a Apple`` / ``pick up the Apple``
  reach them (EB matches the ``Apple|...`` prefix of a piece's THOR id and prefers sliced objects);
  ``find a Apple_2`` reaches the pieces of Apple_2.
- **put down** puts the held object into the receptacle of the last ``find``; EB forgets that receptacle on
  every action other than ``put down``/``open``, and ``put down`` without one drops the object where the
  agent stands. It checks ALFRED's compatibility (:func:`objects.can_contain`) and that an openable receptacle
  is open. After a failed put into a receptacle that has had 3 or more put attempts the object is dropped
  (EB's ``put_count_dict`` rule).
- **States** follow EB's ``update_states``: turning a Faucet on cleans what lies in the basin it is mounted on
  (a scene mounts a Faucet by giving it the basin as ``parent``; an unmounted Faucet cleans every Sink and
  Bathtub); turning a Microwave on heats its contents (it must be closed: an assumption, matching EB's gold
  plans, which always close it first); closing a Fridge cools its contents. Only direct contents are affected.
- **Limits.** ``steps`` and ``invalid_steps`` count actions; EB's episode limits (30 steps, 10 invalid
  actions) are the caller's to apply.
- **Feedback** is EB's: ``Last action executed successfully.`` or ``Last action is invalid. <reason>``,
  the reason phrased like EB's skill messages but always saying why.
"""

from __future__ import annotations

from embodied_rft.world import goals
from embodied_rft.world.objects import BASINS, KNIVES, SLICED_TYPE, TYPES, WHOLE_TYPE, base_type, can_contain
from embodied_rft.world.state import _KEEP_RECEPTACLE, _VERB_KEY, HAND, N_PIECES, Obj, StepResult, WorldState, _parse

OK = "Last action executed successfully."
_BAD = "Last action is invalid. "
#: EB drops the held object after a failed put into a receptacle that has had this many put attempts.
PUT_DROP_AFTER = 3


class Simulator(WorldState):
    """One episode's world: its state (:class:`~embodied_rft.world.state.WorldState`) and EB's action rules.
    Build with :meth:`from_episode`; see the module docstring for the rules."""

    # ------------------------------------------------------------------ stepping
    def step(self, action: int | str) -> StepResult:
        """Execute one action (an id of :attr:`actions` or an action name)."""
        self.steps += 1
        if isinstance(action, bool) or not isinstance(action, (int, str)):
            return self._invalid(f"Action {action!r} is neither an action id nor an action name.")
        if isinstance(action, int):
            if not 0 <= action < len(self.actions.names):
                return self._invalid(f"Unknown action id {action}; valid ids are 0-{len(self.actions.names) - 1}.")
            name = self.actions.names[action]
        else:
            name = action
        verb, target = _parse(name)
        if target is None:
            if name == "put down the object in hand":
                return self._put()
            self.cur_receptacle = None
            if name == "drop the object in hand":
                return self._drop()
            return self._invalid(f"Unknown action {name!r}.")
        key = _VERB_KEY[verb]
        if key not in _KEEP_RECEPTACLE:
            self.cur_receptacle = None
        typ = base_type(target)
        if typ not in TYPES or typ in WHOLE_TYPE:
            if key == "find":
                self.cur_receptacle = target
            return self._invalid(
                f"Cannot find {target}. This object may not exist in this scene. "
                "Try to explore other instances instead."
            )
        return getattr(self, "_" + key)(target, typ)

    def _invalid(self, why: str) -> StepResult:
        self.invalid_steps += 1
        return StepResult(False, _BAD + why)

    def _touch(self, o: Obj) -> None:
        # recency: find, pick up, put (object and receptacle), drop and slice touch; open/close/toggle do not,
        # so fetching from a second drawer does not pull a later plain "find a Drawer" away from the first
        o.touch = self.steps

    def _find(self, target: str, typ: str) -> StepResult:
        self.cur_receptacle = target  # EB sets it before navigating, even when navigation fails
        o = self.resolve_find(target)
        if o is None:
            return self._invalid(
                f"Cannot find {target}. This object may not exist in this scene. "
                "Try to explore other instances instead."
            )
        a = self.anchor(o)
        if a != HAND:
            self.loc = a
        self.cur_receptacle = o.id
        self.last_found = o.id
        self._touch(o)
        return StepResult(True, OK)

    def _pick(self, target: str, typ: str) -> StepResult:
        if not TYPES[typ].pickable:
            return self._invalid(f"The {target} cannot be picked up.")
        cands = [c for c in self.candidates(target) if self.anchor(c) != HAND]
        if not cands:
            if self.held is not None and self.candidates(target):
                return self._invalid(f"Robot is currently holding {self.objs[self.held].type}")
            return self._invalid(f"Cannot find {target} to pick up. Find the object before picking up it")
        if self.held is not None:
            return self._invalid(f"Robot is currently holding {self.objs[self.held].type}")
        o = self._resolve_here(cands, pieces_first=True)
        if o is None:
            return self._invalid(
                f"Cannot pick up the {target}: it is not within reach. Find the object before picking up it"
            )
        c = self.enclosing_closed(o)
        if c is not None:
            return self._invalid(
                f"{target} is not visible because it is in {c.id}. Open the {c.id} before picking it up."
            )
        o.parent = HAND
        o.put_step = -1
        self.held = o.id
        self._touch(o)
        return StepResult(True, OK)

    def _put(self) -> StepResult:
        if self.held is None:
            return self._invalid("Robot is not holding any object")
        name = self.cur_receptacle
        if name is None:
            return self._drop()
        self.put_counts[name] = self.put_counts.get(name, 0) + 1
        why = self._put_problem(name)
        if why is None:
            h = self.objs[self.held]
            r = self.objs[name]
            h.parent = r.id
            h.put_step = self.steps
            self.held = None
            self._touch(h)
            self._touch(r)
            return StepResult(True, OK)
        msg = f"Putting the object on {name} failed. {why}"
        if self.put_counts[name] >= PUT_DROP_AFTER:
            self._drop()
            msg += ". The robot dropped the object instead."
        return self._invalid(msg)

    def _put_problem(self, name: str) -> str | None:
        r = self.objs.get(name)
        if r is None:
            return "The receptacle does not exist in this scene. Also try other instances of the receptacle"
        h = self.objs[self.held]
        if not TYPES[r.type].receptacle:
            return f"The {name} is not a receptacle"
        if self.anchor(r) == HAND:
            return f"The {name} is in the robot's hand"
        if self.anchor(r) != self.loc:
            return f"The {name} is not within reach; find it first"
        c = r if (TYPES[r.type].openable and not r.open) else self.enclosing_closed(r)
        if c is not None:
            return f"The {c.id} is closed; open it first"
        if not can_contain(r.type, h.type):
            return f"A {h.type} cannot be put in the {r.type}. Try another receptacle"
        return None

    def _drop(self) -> StepResult:
        if self.held is None:
            return self._invalid("Robot is not holding any object")
        h = self.objs[self.held]
        h.parent = None
        h.floor_at = self.loc
        h.put_step = -1
        self.held = None
        self._touch(h)
        return StepResult(True, OK)

    def _here(self, target: str, typ: str, verb_msg: str, what: str) -> tuple[Obj | None, StepResult | None]:
        cands = [c for c in self.candidates(target) if self.anchor(c) != HAND]
        if not cands:
            return None, self._invalid(f"Cannot find {target} to {what}")
        o = self._resolve_here(cands, pieces_first=False)
        if o is None:
            return None, self._invalid(f"{verb_msg} failed. The {target} is not within reach; find it first")
        return o, None

    def _open(self, target: str, typ: str) -> StepResult:
        if not TYPES[typ].openable:
            return self._invalid(f"Open action failed. The {target} cannot be opened")
        o, err = self._here(target, typ, "Open action", "open")
        if err is not None:
            return err
        if o.open:
            return self._invalid(f"Open action failed. The {target} is already open")
        c = self.enclosing_closed(o)
        if c is not None:
            return self._invalid(f"Open action failed. The {target} is inside the closed {c.id}")
        o.open = True
        return StepResult(True, OK)

    def _close(self, target: str, typ: str) -> StepResult:
        if not TYPES[typ].openable:
            return self._invalid(f"Close action failed. The {target} cannot be closed")
        o, err = self._here(target, typ, "Close action", "close")
        if err is not None:
            return err
        if not o.open:
            return self._invalid(f"Close action failed. The {target} is already closed")
        o.open = False
        if o.type == "Fridge":
            for c in self.contents(o):
                c.cooled = True
                c.proc_step = self.steps
        return StepResult(True, OK)

    def _on(self, target: str, typ: str) -> StepResult:
        if not TYPES[typ].toggleable:
            return self._invalid(f"Turn on action failed. The {target} cannot be turned on")
        o, err = self._here(target, typ, "Turn on action", "turn on")
        if err is not None:
            return err
        if o.on:
            return self._invalid(f"Turn on action failed. The {target} is already on")
        if o.type == "Microwave" and o.open:
            return self._invalid(f"Turn on action failed. Close the {target} before turning it on")
        o.on = True
        if o.type == "Faucet":
            host = self.objs.get(o.parent) if o.parent not in (None, HAND) else None
            basins = (
                [host]
                if host is not None and host.type in BASINS
                else [b for t in BASINS for b in self.by_type.get(t, ())]
            )
            for b in basins:
                for c in self.contents(b):
                    c.cleaned = True
                    c.dirty = False
                    c.proc_step = self.steps
        elif o.type == "Microwave":
            for c in self.contents(o):
                c.heated = True
                c.proc_step = self.steps
        return StepResult(True, OK)

    def _off(self, target: str, typ: str) -> StepResult:
        if not TYPES[typ].toggleable:
            return self._invalid(f"Turn off action failed. The {target} cannot be turned off")
        o, err = self._here(target, typ, "Turn off action", "turn off")
        if err is not None:
            return err
        if not o.on:
            return self._invalid(f"Turn off action failed. The {target} is already off")
        o.on = False
        return StepResult(True, OK)

    def _slice(self, target: str, typ: str) -> StepResult:
        if not TYPES[typ].sliceable:
            return self._invalid(f"Slice action failed. The {target} cannot be sliced")
        h = self.holding()
        if h is None or h.type not in KNIVES:
            return self._invalid("Slice action failed. The robot must hold a Knife or ButterKnife to slice")
        all_cands = self.candidates(target)
        cands = [c for c in all_cands if c.type == typ]
        if not cands:
            if all_cands:
                return self._invalid(f"Slice action failed. The {target} is already sliced")
            return self._invalid(f"Cannot find {target} to slice")
        o = self._resolve_here(cands, pieces_first=False)
        if o is None:
            return self._invalid(f"Slice action failed. The {target} is not within reach; find it first")
        c = self.enclosing_closed(o)
        if c is not None:
            return self._invalid(f"Slice action failed. The {target} is inside the closed {c.id}")
        self._cut(o)
        return StepResult(True, OK)

    def _cut(self, o: Obj) -> None:
        st = SLICED_TYPE[o.type]
        where = self.anchor(o)
        del self.objs[o.id]
        self.by_type[o.type].remove(o)
        pieces = self.by_type.setdefault(st, [])
        n = self._piece_count.get(st, 0)
        for _ in range(N_PIECES):
            n += 1
            pid = st if n == 1 else f"{st}_{n}"
            p = Obj(pid, st, o.parent, self._order)
            self._order += 1
            p.floor_at = where
            p.src = o.id
            p.touch = self.steps
            self.objs[pid] = p
            pieces.append(p)
        self._piece_count[st] = n
        if self.last_found == o.id:
            self.last_found = None

    # ------------------------------------------------------------------ goals and observations
    def goal_conditions(self) -> tuple[int, int]:
        """(conditions met, conditions total), as EB's ``goal_conditions_met``."""
        return goals.conditions(self)

    def is_success(self) -> bool:
        s, t = goals.conditions(self)
        return s == t

    def progress(self) -> float:
        s, t = goals.conditions(self)
        return s / t

    def observe_text(self) -> str:
        from embodied_rft.world.render import observe_text

        return observe_text(self)

    def render_image(self, size: int = 224):
        from embodied_rft.world.render import render_image

        return render_image(self, size)


__all__ = ["HAND", "N_PIECES", "OK", "Obj", "PUT_DROP_AFTER", "Simulator", "StepResult"]
