"""D&A's frame and advantage arithmetic against hand-worked values: linspace key frames, interpolation exact at
them, chunk advantages with their end clamp, MC returns, AWR clipping, quantile filtering, the conditioning tags;
Kendall's τ-a / τ-b and Spearman's ρ (core/stats.py) on hand-counted pairs."""

from __future__ import annotations

import math

import pytest

from embodied_rft.core.stats import kendall_tau, ranks, spearman_rho
from embodied_rft.dna.advantages import (
    advantage_tag,
    awr_weights,
    chunk_advantages,
    deltas,
    mc_returns,
    quantile_keep,
)
from embodied_rft.dna.frames import interpolate, key_indices


@pytest.mark.parametrize("t", range(3, 41))
def test_key_frames_are_linspace_each_once_first_and_last_in(t):
    keys = key_indices(t, 8)
    assert keys[0] == 0 and keys[-1] == t
    assert keys == sorted(set(keys)) and len(keys) == min(8, t + 1)
    assert keys == sorted({round(i * t / 7) for i in range(8)})  # both round half to even
    # the rewards at the key frames come back exactly, and states between are on the segment
    vals = [k / t for k in keys]
    dense = interpolate(keys, vals, t)
    assert len(dense) == t + 1
    assert [dense[k] for k in keys] == pytest.approx(vals, abs=0)
    assert dense == pytest.approx([i / t for i in range(t + 1)])


def test_key_frames_hand_worked_and_bad_input():
    assert key_indices(14, 8) == [0, 2, 4, 6, 8, 10, 12, 14]
    assert key_indices(10, 8) == [0, 1, 3, 4, 6, 7, 9, 10]
    assert key_indices(3, 8) == [0, 1, 2, 3]
    assert interpolate([0, 2, 4], [0.0, 1.0, 0.5], 4) == [0.0, 0.5, 1.0, 0.75, 0.5]
    with pytest.raises(ValueError, match="key frames must increase from 0 to 4"):
        interpolate([0, 2, 3], [0.0, 1.0, 0.5], 4)
    with pytest.raises(ValueError, match="3 key frames but 2 values"):
        interpolate([0, 2, 4], [0.0, 1.0], 4)
    with pytest.raises(ValueError, match="h must be >= 2"):
        key_indices(5, 1)


def test_chunk_advantages_clamp_at_the_end_and_returns_telescope():
    r = [0.0, 0.25, 0.25, 0.75, 1.0]
    assert chunk_advantages(r, 1) == [0.25, 0.0, 0.5, 0.25]
    # C = 3: t = 0 -> r_3 - r_0; t = 2, 3 clamp to r_4
    assert chunk_advantages(r, 3) == [0.75, 0.75, 0.75, 0.25]
    assert deltas(r) == [0.25, 0.0, 0.5, 0.25]
    assert mc_returns(r) == pytest.approx([1.0, 0.75, 0.75, 0.25])  # r_T - r_t
    # gamma 0.5: G_3 = .25, G_2 = .5 + .125, G_1 = 0 + .3125, G_0 = .25 + .15625
    assert mc_returns(r, 0.5) == pytest.approx([0.40625, 0.3125, 0.625, 0.25])
    assert chunk_advantages([0.3], 2) == []  # no action, no advantage
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        chunk_advantages(r, 0)
    with pytest.raises(ValueError, match="empty"):
        chunk_advantages([], 1)


def test_awr_weights_clip_the_exponent_and_quantile_keeps_the_top():
    w = awr_weights([0.0, 1.0, -1.0, 40.0, -40.0], beta=2.0, clip=5.0)
    assert w == pytest.approx([1.0, math.exp(0.5), math.exp(-0.5), math.exp(5.0), math.exp(-5.0)])
    assert quantile_keep([0.1, -0.2, 0.5, 0.0], 0.5) == [True, False, True, False]  # median 0.05
    assert quantile_keep([0.2, 0.2, 0.2], 0.0) == [False, False, False]  # none above the minimum
    assert quantile_keep([], 0.5) == []
    assert advantage_tag(0.3) == "Advantage: positive" and advantage_tag(0.0) == "Advantage: negative"
    with pytest.raises(ValueError, match="beta and clip must be > 0"):
        awr_weights([0.1], 0.0, 5.0)


def test_kendall_and_spearman_on_hand_counted_pairs():
    # x = [1, 2, 3, 3], y = [1, 3, 2, 4]: pairs (0,1)+ (0,2)+ (0,3)+ (1,2)- (1,3)+ (2,3) tie in x
    x, y = [1, 2, 3, 3], [1, 3, 2, 4]
    assert kendall_tau(x, y, "a") == pytest.approx(3 / 6)
    assert kendall_tau(x, y, "b") == pytest.approx(3 / math.sqrt(5 * 6))
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))
    assert ranks([10, 20, 20, 5]) == [2.0, 3.5, 3.5, 1.0]
    assert spearman_rho([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    # ranks x = 1..4, y = [2, 1, 4, 3]: 1 - 6 * 4 / (4 * 15) = 0.6
    assert spearman_rho([1, 2, 3, 4], [5, 1, 9, 7]) == pytest.approx(0.6)
    assert math.isnan(spearman_rho([1, 1], [1, 2]))
    with pytest.raises(ValueError, match="3 x but 2 y"):
        kendall_tau([1, 2, 3], [1, 2])
