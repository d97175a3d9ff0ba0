"""Executed success for the ``regrpo`` reward (``reward.regrpo.success: executed``; docs/regrpo.md §5): a response's
plan run from its sample's state in the simulator, under EB's rules.

Input: the episodes by id (the grpo stage reads ``data/episodes/train.jsonl``), then per call a response text and
the decomposed sample it answers (its ``episode_id`` and ``history``: decomposed, RoT and on-policy samples alike).
Output: (success, progress): 1.0 when executing the plan's action ids in order — stopping at the first failed
action, as EB's evaluator does before it replans — reaches the goal, else 0.0; progress is the world oracle's
1 − L(s)/L(s0) after the executed part (``world/oracle.py``), the dense V of the reward.

The sample's state is rebuilt once (the episode's start with its history replayed, failed actions included: a
failed step still counts, as in the evaluation) and cached by sample id. A sample whose episode is unknown or whose
history does not replay scores (0, 0) and is logged: the reward never raises inside a trainer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..evaluate.episode import read_plan
from ..world.oracle import ReplayError, WorldOracle
from ..world.simulator import Simulator
from .text import last_failed

log = logging.getLogger(__name__)


class Executor:
    """``executor(response, sample) -> (success, progress)`` (module docstring)."""

    def __init__(self, episodes: Mapping[str, dict], max_cached: int = 4096) -> None:
        self.episodes = episodes
        self.max_cached = max_cached
        self._oracles: dict[str, WorldOracle] = {}
        self._states: dict[str, Simulator | None] = {}

    def _oracle(self, eid: str) -> WorldOracle:
        if eid not in self._oracles:
            self._oracles[eid] = WorldOracle(self.episodes[eid])
        return self._oracles[eid]

    def state(self, sample: dict) -> Simulator | None:
        """The simulator state a sample's prompt describes (cached), or None when it cannot be rebuilt."""
        sid = str(sample.get("sample_id"))
        if sid not in self._states:
            if len(self._states) >= self.max_cached:
                self._states.clear()
            history = list(sample.get("history") or [])
            executed = [(h["action_id"], h["action_name"], not last_failed([h])) for h in history]
            try:
                self._states[sid] = self._oracle(str(sample.get("episode_id"))).rebuild(executed)
            except (KeyError, ReplayError) as exc:
                log.warning("regrpo executed success: sample %s cannot be rebuilt (%s); it scores 0", sid, exc)
                self._states[sid] = None
        return self._states[sid]

    def __call__(self, response: object, sample: dict) -> tuple[float, float]:
        base = self.state(sample)
        if base is None:
            return 0.0, 0.0
        sim = base.copy()
        status, ids = read_plan(response if isinstance(response, str) else "", len(sim.actions))
        for aid in ids if status == "ok" else []:
            res = sim.step(aid)
            if sim.is_success():
                return 1.0, 1.0
            if not res.success:
                break
        return 0.0, self._oracle(str(sample["episode_id"])).progress(sim)


__all__ = ["Executor"]
