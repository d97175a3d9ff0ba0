"""Trajectories as frames: the executed actions' states, D&A's key frames, and rewards interpolated back.

A trajectory of T executed actions has T + 1 states s_0 ... s_T (s_0 the episode's initial state). D&A scores H key
frames picked by ``np.linspace(0, T, H)`` rounded (the seed's example script; first and last always in), and this
project interpolates the key frames' rewards back to every state with ``np.interp`` (piecewise linear, exact at
the key frames). A trajectory with fewer than H states uses each once. A frame's text is the simulator's
``observe_text`` (the describer's view; the instruction is never part of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from embodied_rft.core.jsonl import DataError
from embodied_rft.world.simulator import Simulator


def key_indices(n_actions: int, h: int) -> list[int]:
    """The key frames' state indices of a trajectory with ``n_actions`` actions (``n_actions + 1`` states):
    ``np.linspace(0, n_actions, h)`` rounded, each once, increasing; 0 and ``n_actions`` always in."""
    if n_actions < 0:
        raise ValueError(f"a trajectory has >= 0 actions, got {n_actions}")
    if h < 2:
        raise ValueError(f"h must be >= 2, got {h}")
    return sorted({int(i) for i in np.linspace(0, n_actions, h).round().astype(int)})


def interpolate(keys: Sequence[int], values: Sequence[float], n_actions: int) -> list[float]:
    """Rewards at every state 0 ... ``n_actions`` from the key frames' (``keys`` increasing, ``values`` theirs)."""
    if len(keys) != len(values) or not keys:
        raise ValueError(f"{len(keys)} key frames but {len(values)} values")
    if list(keys) != sorted(set(keys)) or keys[0] != 0 or keys[-1] != n_actions:
        raise ValueError(f"key frames must increase from 0 to {n_actions}, got {list(keys)}")
    return [float(v) for v in np.interp(np.arange(n_actions + 1), np.asarray(keys), np.asarray(values, dtype=float))]


@dataclass(frozen=True)
class Trajectory:
    """An episode and the actions executed in it, replayed: ``states[t]`` is s_t, ``ok[t]`` whether action t
    executed (a rejected action is a step whose state is unchanged)."""

    episode: dict
    actions: tuple[str, ...]
    states: tuple[Simulator, ...]
    ok: tuple[bool, ...]

    @property
    def n(self) -> int:
        return len(self.actions)

    def frames(self, indices: Sequence[int]) -> list[str]:
        """The frames' texts (``observe_text``) at ``indices``."""
        return [self.states[i].observe_text() for i in indices]


def replay(episode: dict, actions: Sequence[str], where: str = "") -> Trajectory:
    """Execute ``actions`` from the episode's initial state (an action the scene does not have is a DataError
    naming ``where``; one the simulator rejects is a step that changes nothing, as in EB)."""
    sim = Simulator.from_episode(episode)
    states, ok = [sim.copy()], []
    for t, name in enumerate(actions):
        if sim.actions.get_id(name) is None:
            raise DataError(f"{where or episode.get('episode_id')}: action {t} {name!r} is not in the scene's space")
        ok.append(bool(sim.step(name).success))
        states.append(sim.copy())
    return Trajectory(episode, tuple(actions), tuple(states), tuple(ok))
