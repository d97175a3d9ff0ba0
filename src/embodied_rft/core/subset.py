"""Seeded subsets, with one rule for every caller: ``n <= 0`` or ``n >= len(items)`` keeps everything.

The chosen items keep their original order; the choice is ``random.Random(seed).sample`` of the indices, so a
given (length, n, seed) always picks the same positions. Callers whose config key says "0 = skip" decide that
before they ask for a subset.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def seeded_indices(total: int, n: int, seed: int) -> list[int]:
    """Sorted indices of ``n`` of ``total`` positions (all of them when ``n <= 0`` or ``n >= total``)."""
    if n <= 0 or n >= total:
        return list(range(total))
    return sorted(random.Random(seed).sample(range(total), n))


def seeded_subset(items: Sequence[T], n: int, seed: int) -> list[T]:
    """``n`` of ``items`` in their original order (see :func:`seeded_indices`)."""
    return [items[i] for i in seeded_indices(len(items), n, seed)]


__all__ = ["seeded_indices", "seeded_subset"]
