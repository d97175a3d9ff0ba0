"""The world oracle: how far a simulator state is from its goal, and whether one action helps.

Input: an episode record (its initial state and goal) and, per question, a :class:`~.simulator.Simulator` state
of that episode (or an evaluation context: the episode and the actions executed so far). Output:

- :meth:`WorldOracle.remaining` — L(s), the remaining plan's length: the expert planner's plan from ``s``
  (:func:`~.planner.plan_for` with ``resume=True``: work the agent left half done is continued, not restarted)
  plus the tidy-up it leaves undone (below); 0 at the goal; None when no plan reaches the goal from ``s``;
- :meth:`WorldOracle.judge` — one action's label: ``correct`` (it executes and reaches the goal, or L goes
  down), ``wrong`` (the simulator rejects it, no plan reaches the goal afterwards, or L goes up) or ``neutral``
  (it executes and L stays the same), with the reason and L before and after;
- :meth:`WorldOracle.progress` — dense planner progress 1 − L(s)/L(s0), clamped to [0, 1] (0 when unplannable);
- :meth:`WorldOracle.rebuild` — the simulator state an evaluation context describes: the episode's initial state
  with every executed action replayed, failed ones included (a failed step still counts, forgets EB's current
  receptacle, counts a put attempt), each replayed step checked against its recorded outcome.

Three decisions make the planner's plan length a consistent distance (docs/vegas.md §2):

1. *L after an action* is the cheaper of the planner's plan from the new state and the plan from before the
   action with that action taken out (when it is one of its steps and the rest still reaches the goal). The
   planner re-finds what the agent already stands at and restarts a half-done recipe, so planned afresh after
   a correct step the plan is sometimes no shorter; the old plan minus the step taken is.
2. *Tidy-up*: L adds one step per openable left open that started closed, per lamp left on that started off
   (the goal's lamp excepted) and per Faucet or Microwave left running. ALFRED's expert closes what it opens and
   switches off what it ran; without this term its "close the Drawer" would be neutral.
3. *Shortens* means by at least one step: an action that saves more is no worse.
4. *Tidy closing*: closing a container that started closed is correct (reason ``tidy``) when the plan's next
   step does not use it, even if it must be reopened later: ALFRED's expert closes a fridge after taking a knife
   out and reopens it to put the tomato in; by plan length alone that close costs a step. Closing it right
   before the plan puts something into it (or takes something out) stays wrong.

With these every step of the tiny preset's expert plans (its three task types) is ``correct``; over all seven
of ALFRED's task types a few are not (a microwave closed and reopened at once, a container closed that started
open; tests/vegas/test_vegas_oracle.py). Used by failure synthesis (labels), the
Best-of-N ``bon_oracle`` selector and coverage, and the evaluation's recovered-next-call column. Pure: every
question works on copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from embodied_rft.world.actions import PUT_DOWN
from embodied_rft.world.objects import TYPES
from embodied_rft.world.planner import PlanError, plan_for
from embodied_rft.world.simulator import Simulator

# switched off after use by the expert's recipes (clean: the Faucet; heat: the Microwave), however they started
_APPLIANCES = frozenset({"Faucet", "Microwave"})
Label = Literal["correct", "wrong", "neutral"]
LABELS: tuple[str, ...] = ("correct", "wrong", "neutral")


@dataclass(frozen=True)
class Judgement:
    """One action's label in one state, and why."""

    label: Label
    # invalid | goal | shortens | unplannable | lengthens | no_progress
    reason: str
    # whether the simulator executed it, and its feedback
    executes: bool
    feedback: str
    # L before the action, and after it (None: no plan reaches the goal afterwards)
    before: int
    after: int | None


class ReplayError(ValueError):
    """An executed-actions record that the episode's simulator does not reproduce."""


class WorldOracle:
    """The oracle of one episode (see the module docstring)."""

    def __init__(self, episode: dict) -> None:
        self.episode = episode
        self.initial = Simulator.from_episode(episode)
        # the switchable state each object starts in: what "tidy" means
        self._closed0 = {o.id for o in self.initial.objs.values() if TYPES[o.type].openable and not o.open}
        self._off0 = {o.id for o in self.initial.objs.values() if TYPES[o.type].toggleable and not o.on}
        self._l0: int | None = None

    # ------------------------------------------------------------------ distances
    def untidy(self, sim: Simulator) -> int:
        """The tidy-up ``sim`` needs: openables open that started closed, lamps on that started off (the goal's
        own lamp excepted), and every running appliance (a Faucet or Microwave on, whatever its start)."""
        n = 0
        lamp = sim.goal.toggle_target
        for o in sim.objs.values():
            if o.open and o.id in self._closed0:
                n += 1
            elif o.on and (o.type in _APPLIANCES or (o.id in self._off0 and o.type != lamp)):
                n += 1
        return n

    def _cost(self, sim: Simulator, plan: Sequence[str]) -> int | None:
        """len(plan) + the tidy-up it leaves undone, or None when ``plan`` does not reach the goal from ``sim``."""
        end = sim.copy()
        for name in plan:
            if not end.step(name).success:
                return None
        if not end.is_success():
            return None
        return len(plan) + self.untidy(end)

    def best_plan(self, sim: Simulator) -> tuple[list[str], int] | None:
        """(the planner's plan from ``sim``, its cost L); ([], 0) at the goal; None if unplannable."""
        if sim.is_success():
            return [], 0
        try:
            plan = plan_for(sim, resume=True)
        except PlanError:
            return None
        cost = self._cost(sim, plan)
        return None if cost is None else (plan, cost)

    def remaining(self, sim: Simulator) -> int | None:
        """L(s): the planner's plan length plus the tidy-up it leaves undone; 0 at the goal; None if unplannable."""
        best = self.best_plan(sim)
        return None if best is None else best[1]

    @property
    def initial_remaining(self) -> int:
        """L(s0) of the episode."""
        if self._l0 is None:
            l0 = self.remaining(self.initial)
            if l0 is None:
                raise ReplayError(f"episode {self.episode.get('episode_id')}: no plan reaches the goal from the start")
            self._l0 = l0
        return self._l0

    def progress(self, sim: Simulator) -> float:
        """Dense planner progress 1 − L(s)/L(s0), clamped to [0, 1]; 0 when no plan reaches the goal."""
        left = self.remaining(sim)
        if left is None:
            return 0.0
        l0 = self.initial_remaining
        return 1.0 if l0 == 0 else min(1.0, max(0.0, 1.0 - left / l0))

    # ------------------------------------------------------------------ judging
    def judge(self, sim: Simulator, action: int | str) -> Judgement:
        """The label of ``action`` (an id of the scene's action space or a name) taken in ``sim``.

        L after the action is the cheaper of the planner's plan from the new state and the plan from before the
        action with that action taken out (module docstring, decision 1). From an unplannable state, an action
        after which a plan exists again is correct."""
        best = self.best_plan(sim)
        after_sim = sim.copy()
        res = after_sim.step(action)
        before = -1 if best is None else best[1]
        if not res.success:
            return Judgement("wrong", "invalid", False, res.feedback, before, None)
        if after_sim.is_success():
            return Judgement("correct", "goal", True, res.feedback, before, 0)
        costs = []
        fresh = self.best_plan(after_sim)
        if fresh is not None:
            costs.append(fresh[1])
        name = sim.actions.name(action) if isinstance(action, int) else action
        if best is not None and name in best[0]:
            i = best[0].index(name)
            rest = self._cost(after_sim, best[0][:i] + best[0][i + 1 :])
            if rest is not None:
                costs.append(rest)
        if not costs:
            return Judgement("wrong", "unplannable", True, res.feedback, before, None)
        after = min(costs)
        if before < 0 or after < before:  # from an unplannable state, becoming plannable again is progress
            return Judgement("correct", "shortens", True, res.feedback, before, after)
        if best is not None and self._tidy_close(sim, name, best[0]):
            return Judgement("correct", "tidy", True, res.feedback, before, after)
        if after > before:
            return Judgement("wrong", "lengthens", True, res.feedback, before, after)
        return Judgement("neutral", "no_progress", True, res.feedback, before, after)

    def _tidy_close(self, sim: Simulator, action: str, plan: Sequence[str]) -> bool:
        """Closing a container that started closed while the plan's next step does not use it (decision 4)."""
        if not action.startswith("close the "):
            return False
        rid = sim.resolve(action)
        if rid is None or rid not in self._closed0:
            return False
        if not plan:
            return True
        nxt = plan[0]
        if nxt == PUT_DOWN:
            return sim.cur_receptacle != rid
        used = sim.resolve(nxt)
        while used is not None and used in sim.objs:
            if used == rid:
                return False
            used = sim.objs[used].parent
        return True

    # ------------------------------------------------------------------ evaluation contexts
    def rebuild(self, executed: Sequence[Sequence], where: str = "") -> Simulator:
        """The state after ``executed``: ``[(action_id, action_name, success), ...]`` as an evaluation records it
        (``EpisodeRun.executed``, ``PlanContext.executed``, a result's ``actions``), failed ones included.
        Raises :class:`ReplayError` naming the step when a replayed outcome differs from the record."""
        return self.replay(executed, where)[0]

    def replay(self, executed: Sequence[Sequence], where: str = "") -> tuple[Simulator, list[dict]]:
        """:meth:`rebuild`, and the prompt history it implies: ``[{"action_id", "action_name", "feedback"}]``
        with the simulator's feedback of each step (what the policy was shown)."""
        sim = self.initial.copy()
        history: list[dict] = []
        at = where or f"episode {self.episode.get('episode_id')}"
        for i, step in enumerate(executed):
            aid, name, ok = step[0], step[1], bool(step[2])
            if sim.actions.get_id(name) != aid:
                raise ReplayError(f"{at}: executed[{i}]: action id {aid} is not {name!r} in this scene")
            res = sim.step(aid)
            if bool(res.success) != ok:
                raise ReplayError(
                    f"{at}: executed[{i}] {name!r}: recorded {'success' if ok else 'failure'}, "
                    f"the simulator says {'success' if res.success else 'failure'} ({res.feedback})"
                )
            history.append({"action_id": aid, "action_name": name, "feedback": res.feedback})
        return sim, history

    def rebuild_context(self, ctx) -> Simulator:
        """:meth:`rebuild` from an :class:`~embodied_rft.evaluate.policy.PlanContext` of this episode."""
        if ctx.episode.get("episode_id") != self.episode.get("episode_id"):
            raise ReplayError(
                f"context of episode {ctx.episode.get('episode_id')!r} given to the oracle of "
                f"{self.episode.get('episode_id')!r}"
            )
        return self.rebuild(ctx.executed)


__all__ = ["LABELS", "Judgement", "Label", "ReplayError", "WorldOracle"]
