"""Advantages from a progress reward, for offline use (filtering, weighting, conditioning behaviour cloning).

Rewards are per state, r_0 ... r_T for a trajectory of T actions (a reward model's, interpolated to every state).

- :func:`chunk_advantages`: A_t = r_{min(t+C, T)} − r_t for t = 0 ... T − 1 (C actions ahead; the end clamped);
- :func:`deltas`: r_{t+1} − r_t; :func:`mc_returns`: G_t = Σ_{k ≥ t} γ^{k−t} (r_{k+1} − r_k) (with γ = 1, r_T − r_t);
- :func:`awr_weights`: exp(clip(A / β, −c, c)) (advantage-weighted regression);
- :func:`quantile_keep`: which samples lie above a quantile of the advantages;
- :func:`advantage_tag`: the advantage-conditioning prefix ("Advantage: positive|negative"; inference uses positive).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

TAGS = ("Advantage: positive", "Advantage: negative")


def _check(rewards: Sequence[float]) -> None:
    if len(rewards) < 1:
        raise ValueError("a trajectory has at least one state (its reward list is empty)")


def chunk_advantages(rewards: Sequence[float], chunk: int) -> list[float]:
    """A_t = r_{min(t+chunk, T)} − r_t, t = 0 ... T − 1 (T = len(rewards) − 1)."""
    _check(rewards)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 action, got {chunk}")
    last = len(rewards) - 1
    return [float(rewards[min(t + chunk, last)]) - float(rewards[t]) for t in range(last)]


def deltas(rewards: Sequence[float]) -> list[float]:
    """r_{t+1} − r_t, t = 0 ... T − 1."""
    _check(rewards)
    return [float(rewards[t + 1]) - float(rewards[t]) for t in range(len(rewards) - 1)]


def mc_returns(rewards: Sequence[float], gamma: float = 1.0) -> list[float]:
    """Discounted returns of the per-step deltas, G_t = δ_t + γ G_{t+1}, t = 0 ... T − 1."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    out, g = [], 0.0
    for d in reversed(deltas(rewards)):
        g = d + gamma * g
        out.append(g)
    return out[::-1]


def awr_weights(advantages: Sequence[float], beta: float, clip: float) -> list[float]:
    """exp(clip(A / beta, −clip, clip)) per sample."""
    if beta <= 0 or clip <= 0:
        raise ValueError(f"beta and clip must be > 0, got {beta}, {clip}")
    return [math.exp(min(clip, max(-clip, a / beta))) for a in advantages]


def quantile_keep(advantages: Sequence[float], q: float) -> list[bool]:
    """True for the samples whose advantage is above the q-quantile of all of them (q = 0: above the minimum)."""
    if not 0.0 <= q < 1.0:
        raise ValueError(f"q must be in [0, 1), got {q}")
    if not advantages:
        return []
    cut = float(np.quantile(np.asarray(advantages, dtype=float), q))
    return [a > cut for a in advantages]


def advantage_tag(advantage: float) -> str:
    """The conditioning prefix of a sample (a zero advantage is not positive)."""
    return TAGS[0] if advantage > 0 else TAGS[1]
