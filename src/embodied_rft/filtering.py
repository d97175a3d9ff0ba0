"""The paper's online accuracy filter and its group buffer (docs/facts.md §1.6), and its OpenRLHF mapping (§5.4).

Inputs: one *group* per prompt — the G sampled responses' ``accuracy_full`` flags (0/1, from
``embodied_rft.reward``) and, optionally, their total rewards. Outputs: accept/reject decisions, counters,
and batches of N_B accepted groups, each to be optimised for K_2 GRPO steps.

* :func:`accept` is the paper's rule: keep a prompt iff ``lower <= C_x <= upper``, C_x = the number of its
  G responses with full accuracy.
* :class:`GroupBuffer` collects accepted groups until N_B are held, then :meth:`GroupBuffer.take` hands
  them out (with K_2) and empties the buffer.
* With the filter disabled every group is kept except, optionally, zero-variance ones (all rewards
  equal: their GRPO advantages are all 0, so they only dilute the batch). That drop applies with the
  filter on as well, whenever rewards are given.
* Termination, so a run never hangs on a dataset whose prompts all fail the filter: after
  ``max_consecutive_rejects`` rejections in a row the buffer is *stalled*; it logs a warning, then either
  hands out its partial buffer (``on_stall="flush"``; ``ready()`` turns true) or reports
  ``should_stop``. A stalled, empty buffer always reports ``should_stop``. When the data runs out,
  :meth:`GroupBuffer.finish` returns the partial buffer (``flush``) or nothing (``stop``), with a
  warning naming the counters.
* :func:`openrlhf_range` / :func:`openrlhf_keep` express the same rule as OpenRLHF's dynamic filtering
  (keep iff ``lo < mean(scores) < hi``, strict, with scores = accuracy_full): lo = (lower − 0.5)/G and
  hi = (upper + 0.5)/G select exactly the groups :func:`accept` keeps (tested for every G ≤ 16).

Departure from the RR code: it filtered on the group mean of its *prefix* accuracy reward, kept iff in
[0.1, 0.9]; the paper (and this module) counts full-accuracy responses. With G = 8 the RR bounds are
C_x in 1..7 — this module's default (``lower=1``, ``upper=None`` → G − 1).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from embodied_rft.config import ConfigError, check

logger = logging.getLogger(__name__)

T = TypeVar("T")


def accept(c_x: int, lower: int, upper: int) -> bool:
    """The paper's rule: keep the prompt iff lower <= C_x <= upper (both inclusive)."""
    return lower <= c_x <= upper


def count_full(accuracy_full: Sequence[float | bool]) -> int:
    """C_x: how many of a group's responses have full accuracy (flags are 0/1 or bools)."""
    return sum(1 for a in accuracy_full if a >= 1.0)


def openrlhf_range(group_size: int, lower: int, upper: int) -> tuple[float, float]:
    """``--algo.dynamic_filtering_range LO HI`` that keeps exactly the groups with lower <= C_x <= upper
    when OpenRLHF's scores are the accuracy_full flags (mean = C_x / G; docs/facts.md §5.4)."""
    return (lower - 0.5) / group_size, (upper + 0.5) / group_size


def openrlhf_keep(scores: Sequence[float], lo: float, hi: float, eps: float = 0.0) -> bool:
    """OpenRLHF's dynamic-filtering keep rule, re-stated for the equivalence test: the group mean of the
    scores strictly inside (lo, hi). Some OpenRLHF versions shrink the interval by 1e-6 (``eps``)."""
    mean = sum(scores) / len(scores)
    return lo + eps < mean < hi - eps


@dataclass(frozen=True)
class FilterConfig:
    """The ``grpo.filter`` config section: the online accuracy filter and its buffer."""

    # Apply the paper's accuracy filter (lower <= C_x <= upper). Paper: on.
    enabled: bool = True
    # Lowest C_x kept (inclusive; C_x = full-accuracy responses among G). Paper/RR: 1 (drop all-wrong).
    lower: int = 1
    # Highest C_x kept (inclusive); null = G − 1 (drop all-right groups). RR: [0.1, 0.9] x G=8 -> 7.
    upper: int | None = None
    # N_B: accepted groups (prompts) collected before optimising. RR (OpenRLHF): rollout batch, 128.
    buffer_size: int = 8
    # K_2: GRPO optimisation steps run on one full buffer before it is emptied. RR (inferred from
    # OpenRLHF's settings): max_epochs x N_B x G / train_batch = 1 x 128 x 8 / 128 = 8.
    updates_per_buffer: int = 1
    # Also drop groups whose rewards are all equal (zero GRPO advantage); applies filter on or off.
    drop_zero_variance: bool = True
    # Patience: rejections in a row after which the buffer counts as stalled (see on_stall).
    max_consecutive_rejects: int = 512
    # When stalled or out of data: "flush" = train on the partial buffer, "stop" = discard it and stop.
    on_stall: Literal["flush", "stop"] = "flush"

    def __post_init__(self) -> None:
        check(self.lower >= 0, "filter.lower", f"must be >= 0; got {self.lower}")
        if self.upper is not None:
            check(self.upper >= self.lower, "filter.upper", f"must be >= lower ({self.lower}); got {self.upper}")
        check(self.buffer_size >= 1, "filter.buffer_size", f"N_B must be >= 1; got {self.buffer_size}")
        check(
            self.updates_per_buffer >= 1,
            "filter.updates_per_buffer",
            f"K_2 must be >= 1; got {self.updates_per_buffer}",
        )
        check(self.max_consecutive_rejects >= 1, "filter.max_consecutive_rejects", "must be >= 1")
        check(
            self.on_stall in ("flush", "stop"), "filter.on_stall", f"must be 'flush' or 'stop'; got {self.on_stall!r}"
        )

    def bounds(self, group_size: int) -> tuple[int, int]:
        """(lower, upper) for groups of ``group_size`` responses; ConfigError when they cannot fit."""
        check(group_size >= 1, "grpo.group_size", f"must be >= 1; got {group_size}")
        upper = group_size - 1 if self.upper is None else self.upper
        if upper > group_size:
            raise ConfigError(f"filter.upper: {upper} exceeds the group size G={group_size}")
        if self.lower > upper:
            raise ConfigError(
                f"filter.lower: {self.lower} > upper {upper} for G={group_size}: no group could ever pass"
            )
        return self.lower, upper

    def openrlhf_range(self, group_size: int) -> tuple[float, float]:
        """The equivalent ``--algo.dynamic_filtering_range`` for this filter and G."""
        return openrlhf_range(group_size, *self.bounds(group_size))


@dataclass
class FilterStats:
    """Counters over all groups offered (a rejection is counted under exactly one reason)."""

    seen: int = 0
    accepted: int = 0
    rejected_all_wrong: int = 0  # C_x = 0 below lower
    rejected_all_right: int = 0  # C_x = G above upper
    rejected_other: int = 0  # any other C_x outside [lower, upper]
    rejected_zero_variance: int = 0  # passed (or skipped) the accuracy rule but all rewards equal
    batches: int = 0  # batches handed out by take()/finish()
    stalls: int = 0  # times max_consecutive_rejects was reached

    @property
    def rejected(self) -> int:
        return self.seen - self.accepted

    @property
    def pass_rate(self) -> float:
        return self.accepted / self.seen if self.seen else 0.0

    def as_dict(self) -> dict:
        return {**self.__dict__, "rejected": self.rejected, "pass_rate": self.pass_rate}


@dataclass(frozen=True)
class BufferBatch(Generic[T]):
    """Groups handed out together, to be optimised for ``updates`` (K_2) GRPO steps."""

    groups: tuple[T, ...]
    updates: int
    partial: bool = False  # fewer than N_B groups (a stall or end-of-data flush)


@dataclass
class GroupBuffer(Generic[T]):
    """Collects accepted groups until N_B, hands them out for K_2 updates, then empties (paper §1.6)."""

    config: FilterConfig
    group_size: int
    stats: FilterStats = field(default_factory=FilterStats)
    _groups: list[T] = field(default_factory=list, init=False, repr=False)
    _consecutive_rejects: int = field(default=0, init=False)
    _stalled: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._lower, self._upper = self.config.bounds(self.group_size)

    def __len__(self) -> int:
        return len(self._groups)

    def offer(self, group: T, accuracy_full: Sequence[float | bool], rewards: Sequence[float] | None = None) -> bool:
        """Judge one prompt's group; keep it if it passes. Returns whether it was accepted."""
        if len(accuracy_full) != self.group_size:
            raise ValueError(f"offer: expected {self.group_size} accuracy flags (G), got {len(accuracy_full)}")
        cfg = self.config
        self.stats.seen += 1
        c_x = count_full(accuracy_full)
        reason = None
        if cfg.enabled and not accept(c_x, self._lower, self._upper):
            reason = (
                "rejected_all_wrong"
                if c_x == 0
                else "rejected_all_right"
                if c_x == self.group_size
                else "rejected_other"
            )
        elif cfg.drop_zero_variance and rewards is not None and len(rewards) and max(rewards) - min(rewards) <= 1e-12:
            reason = "rejected_zero_variance"
        if reason is not None:
            setattr(self.stats, reason, getattr(self.stats, reason) + 1)
            self._consecutive_rejects += 1
            if self._consecutive_rejects >= cfg.max_consecutive_rejects and not self._stalled:
                self._stalled = True
                self.stats.stalls += 1
                logger.warning(
                    "accuracy filter: %d groups rejected in a row (lower=%d, upper=%d, G=%d; %s); %s",
                    self._consecutive_rejects,
                    self._lower,
                    self._upper,
                    self.group_size,
                    self.stats.as_dict(),
                    "flushing the partial buffer" if cfg.on_stall == "flush" and self._groups else "stopping",
                )
            return False
        self.stats.accepted += 1
        self._consecutive_rejects = 0
        self._stalled = False
        self._groups.append(group)
        return True

    def ready(self) -> bool:
        """A batch can be taken: N_B groups are held, or a stall flushes a non-empty partial buffer."""
        if len(self._groups) >= self.config.buffer_size:
            return True
        return self._stalled and self.config.on_stall == "flush" and bool(self._groups)

    @property
    def should_stop(self) -> bool:
        """Stalled with nothing to train on (or configured to stop): the caller should end the run."""
        return self._stalled and (self.config.on_stall == "stop" or not self._groups)

    def take(self) -> BufferBatch[T]:
        """Hand out the buffered groups (at most N_B) for K_2 updates and empty the buffer."""
        if not self.ready():
            raise RuntimeError(
                f"take: buffer holds {len(self._groups)}/{self.config.buffer_size} groups and is not stalled"
            )
        n = self.config.buffer_size
        groups, self._groups = self._groups[:n], self._groups[n:]
        if self._stalled:
            # The flush answers the stall; patience starts again for what follows.
            self._stalled = False
            self._consecutive_rejects = 0
        self.stats.batches += 1
        return BufferBatch(tuple(groups), self.config.updates_per_buffer, partial=len(groups) < n)

    def finish(self) -> BufferBatch[T] | None:
        """The data ran out: the partial buffer as a last batch ("flush") or None ("stop" or empty)."""
        held = len(self._groups)
        if held:
            logger.warning(
                "accuracy filter: data exhausted with %d/%d groups buffered; %s (%s)",
                held,
                self.config.buffer_size,
                "training on them" if self.config.on_stall == "flush" else "discarding them",
                self.stats.as_dict(),
            )
        if not held or self.config.on_stall == "stop":
            self._groups = []
            return None
        groups, self._groups = self._groups, []
        self.stats.batches += 1
        return BufferBatch(tuple(groups), self.config.updates_per_buffer, partial=len(groups) < self.config.buffer_size)


__all__ = [
    "BufferBatch",
    "FilterConfig",
    "FilterStats",
    "GroupBuffer",
    "accept",
    "count_full",
    "openrlhf_keep",
    "openrlhf_range",
]
