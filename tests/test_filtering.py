"""The online accuracy filter: the paper's rule, its exact OpenRLHF equivalent, the N_B/K_2 buffer,
its counters and its termination rule."""

from __future__ import annotations

import itertools
import random
import struct

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.filtering import (
    FilterConfig,
    GroupBuffer,
    accept,
    count_full,
    openrlhf_keep,
    openrlhf_range,
)


@pytest.mark.parametrize(
    "c_x,lower,upper,kept",
    [
        (0, 1, 7, False),
        (1, 1, 7, True),
        (4, 1, 7, True),
        (7, 1, 7, True),
        (8, 1, 7, False),
        (0, 0, 0, True),
        (1, 0, 0, False),
        (3, 3, 3, True),
        (2, 3, 3, False),
        (8, 0, 8, True),
    ],
)
def test_accept_is_inclusive(c_x, lower, upper, kept):
    assert accept(c_x, lower, upper) is kept


def test_count_full():
    assert count_full([1.0, 0.0, 1.0, 0.0]) == 2
    assert count_full([True, False, True, True]) == 3
    assert count_full([0.75, 0.999, float("nan")]) == 0  # only full accuracy counts


def _f32(x: float) -> float:
    """Round through float32, as OpenRLHF's scores tensor does before ``.item()``."""
    return struct.unpack("f", struct.pack("f", x))[0]


@pytest.mark.parametrize("eps", [0.0, 1e-6])  # OpenRLHF versions differ by this 1e-6 margin
def test_openrlhf_range_keeps_exactly_the_same_groups(eps):
    """For every G in 1..16, every lower <= upper in 0..G and every C_x in 0..G, OpenRLHF's strict
    mean-in-(lo, hi) rule with scores = accuracy_full keeps the group iff lower <= C_x <= upper."""
    rng = random.Random(0)
    checked = 0
    for g in range(1, 17):
        for lower, upper in itertools.combinations_with_replacement(range(g + 1), 2):
            lo, hi = openrlhf_range(g, lower, upper)
            lo, hi = _f32(lo), _f32(hi)  # the range also travels as a float CLI argument
            for c in range(g + 1):
                scores = [1.0] * c + [0.0] * (g - c)
                rng.shuffle(scores)
                assert openrlhf_keep([_f32(s) for s in scores], lo, hi, eps) == accept(c, lower, upper), (
                    g,
                    lower,
                    upper,
                    c,
                )
                checked += 1
    assert checked == sum((g + 1) * (g + 1) * (g + 2) // 2 for g in range(1, 17))


def test_default_config_maps_to_the_rr_range():
    cfg = FilterConfig()
    assert cfg.bounds(8) == (1, 7)
    assert cfg.openrlhf_range(8) == (0.0625, 0.9375)  # C_x in 1..7 <=> group mean in [0.1, 0.9] at G = 8
    assert FilterConfig(upper=3).bounds(4) == (1, 3)


def test_config_is_checked():
    cfg = build(FilterConfig, {"lower": 2, "upper": 6, "buffer_size": 4, "updates_per_buffer": 3}, "grpo.filter")
    assert (cfg.lower, cfg.upper, cfg.buffer_size, cfg.updates_per_buffer) == (2, 6, 4, 3)
    with pytest.raises(ConfigError, match="filter.upper: must be >= lower"):
        FilterConfig(lower=3, upper=2)
    with pytest.raises(ConfigError, match="N_B must be >= 1"):
        FilterConfig(buffer_size=0)
    with pytest.raises(ConfigError, match="K_2 must be >= 1"):
        FilterConfig(updates_per_buffer=0)
    with pytest.raises(ConfigError, match="exceeds the group size G=4"):
        FilterConfig(upper=6).bounds(4)
    with pytest.raises(ConfigError, match="no group could ever pass"):
        FilterConfig(lower=4).bounds(4)
    with pytest.raises(ConfigError, match="did you mean 'buffer_size'"):
        build(FilterConfig, {"buffer_sise": 4}, "grpo.filter")
    with pytest.raises(ConfigError, match="on_stall"):
        build(FilterConfig, {"on_stall": "hang"}, "grpo.filter")


def flags(c: int, g: int = 4) -> list[float]:
    return [1.0] * c + [0.0] * (g - c)


def test_buffer_collects_n_b_groups_then_hands_them_out_for_k_2_updates():
    buf: GroupBuffer[str] = GroupBuffer(FilterConfig(buffer_size=3, updates_per_buffer=2), group_size=4)
    offered = [("p0", 0), ("p1", 2), ("p2", 4), ("p3", 1), ("p4", 3), ("p5", 3), ("p6", 2)]
    decisions = []
    for name, c in offered:
        decisions.append(buf.offer(name, flags(c)))
        if buf.ready():
            batch = buf.take()
            assert batch.groups == ("p1", "p3", "p4") and batch.updates == 2 and not batch.partial
            assert len(buf) == 0 and not buf.ready()
    assert decisions == [False, True, False, True, True, True, True]
    assert len(buf) == 2
    s = buf.stats
    assert (s.seen, s.accepted, s.rejected_all_wrong, s.rejected_all_right, s.rejected_other, s.batches) == (
        7,
        5,
        1,
        1,
        0,
        1,
    )
    assert s.as_dict()["pass_rate"] == pytest.approx(5 / 7)
    with pytest.raises(RuntimeError, match="2/3 groups"):
        buf.take()


def test_tighter_bounds_count_as_other_rejections():
    buf = GroupBuffer(FilterConfig(lower=2, upper=2, buffer_size=10), group_size=4)
    for c in range(5):
        buf.offer(c, flags(c))
    s = buf.stats
    assert (s.accepted, s.rejected_all_wrong, s.rejected_all_right, s.rejected_other) == (1, 1, 1, 2)


def test_zero_variance_groups_are_dropped_when_rewards_are_given():
    buf = GroupBuffer(FilterConfig(buffer_size=10), group_size=4)
    assert not buf.offer("same", flags(2), rewards=[1.0, 1.0, 1.0, 1.0])
    assert buf.offer("spread", flags(2), rewards=[1.5, 1.5, 0.5, 0.6])
    assert buf.stats.rejected_zero_variance == 1
    keep_flat = GroupBuffer(FilterConfig(buffer_size=10, drop_zero_variance=False), group_size=4)
    assert keep_flat.offer("same", flags(2), rewards=[1.0] * 4)


def test_disabled_filter_keeps_everything_but_zero_variance():
    buf = GroupBuffer(FilterConfig(enabled=False, buffer_size=10), group_size=4)
    assert buf.offer("all wrong, rewards differ", flags(0), rewards=[0.5, 0.25, 0.5, 0.4])
    assert buf.offer("all right", flags(4), rewards=[1.5, 1.5, 1.5, 1.45])
    assert not buf.offer("all wrong, flat", flags(0), rewards=[0.5] * 4)
    assert buf.offer("no rewards given", flags(0))
    assert (buf.stats.accepted, buf.stats.rejected_zero_variance) == (3, 1)


def test_offer_checks_the_group_size():
    buf = GroupBuffer(FilterConfig(), group_size=8)
    with pytest.raises(ValueError, match="expected 8 accuracy flags"):
        buf.offer("x", flags(2, 4))


def test_stall_flushes_a_partial_buffer_then_stops(caplog):
    buf = GroupBuffer(FilterConfig(buffer_size=4, max_consecutive_rejects=5), group_size=4)
    buf.offer("good", flags(2))
    with caplog.at_level("WARNING", logger="embodied_rft.filtering"):
        for i in range(5):
            assert not buf.ready()
            buf.offer(f"bad{i}", flags(0))
    assert "5 groups rejected in a row" in caplog.text and "flushing" in caplog.text
    assert buf.ready() and not buf.should_stop
    batch = buf.take()
    assert batch.groups == ("good",) and batch.partial
    # Patience starts again; a second stall with nothing buffered means stop.
    for i in range(4):
        buf.offer(f"bad{i}", flags(4))
        assert not buf.should_stop
    buf.offer("bad4", flags(4))
    assert buf.should_stop and not buf.ready()
    assert buf.stats.stalls == 2
    # An accepted group clears the stall.
    buf.offer("good2", flags(1))
    assert not buf.should_stop


def test_stall_with_stop_policy_stops_even_with_groups_buffered():
    buf = GroupBuffer(FilterConfig(buffer_size=4, max_consecutive_rejects=3, on_stall="stop"), group_size=4)
    buf.offer("good", flags(2))
    for i in range(3):
        buf.offer(i, flags(0))
    assert buf.should_stop and not buf.ready()
    assert buf.finish() is None and len(buf) == 0


def test_finish_flushes_what_is_left_when_data_runs_out(caplog):
    buf = GroupBuffer(FilterConfig(buffer_size=4, updates_per_buffer=3), group_size=4)
    assert buf.finish() is None
    buf.offer("a", flags(1))
    buf.offer("b", flags(3))
    with caplog.at_level("WARNING", logger="embodied_rft.filtering"):
        batch = buf.finish()
    assert batch.groups == ("a", "b") and batch.updates == 3 and batch.partial
    assert "data exhausted with 2/4 groups buffered" in caplog.text
    assert len(buf) == 0 and buf.finish() is None


def test_a_loop_over_unlearnable_data_terminates():
    """The engine's loop shape: cycle over the prompts until should_stop; all groups are all-wrong."""
    buf = GroupBuffer(FilterConfig(buffer_size=8, max_consecutive_rejects=50), group_size=8)
    steps = 0
    for prompt in itertools.cycle(range(10)):  # an endless data stream
        buf.offer(prompt, [0.0] * 8)
        if buf.ready():
            steps += buf.take().updates
        if buf.should_stop:
            break
        assert buf.stats.seen < 1000, "the filter never gave up"
    assert steps == 0 and buf.stats.seen == 50 and buf.stats.rejected_all_wrong == 50
