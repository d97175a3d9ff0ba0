"""Paired statistics, once: the exact McNemar test, the paired Wald interval, a paired comparison of two outcome
vectors, and the pooling of per-seed paired counts over seeds.

Every comparison in this project pairs two models on the same episodes (each model of a seed plays the same
episodes), so the evidence is in the discordant pairs: episodes only one of the two solved. Pooling over seeds sums
those counts (the seeds play disjoint episode draws), so a pooled figure is always a sum of counts a table keeps and
tables of disjoint seeds merge exactly (``study.table.merge``). Nothing here rounds a p-value or a mean: a table
keeps them whole and only its Markdown rounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: the discordant pairs as ``Binomial(only_a + only_b, 1/2)``; 1.0 when
    there are none."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a}, {only_b}")
    n = only_a + only_b
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def paired_diff_ci(only_a: int, only_b: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% interval of a paired difference of two success rates, b's minus a's, from the discordant counts of
    ``n`` pairs: the Wald interval for paired proportions, (only_b - only_a) / n ± z · √(only_a + only_b −
    (only_b − only_a)² / n) / n (Agresti, *Categorical Data Analysis*, §10.1). Fractions, not points."""
    if n <= 0 or only_a < 0 or only_b < 0 or only_a + only_b > n:
        raise ValueError(f"paired_diff_ci: need 0 <= only_a + only_b <= n and n > 0, got {only_a}, {only_b}, {n}")
    d = (only_b - only_a) / n
    se = math.sqrt(max(0.0, only_a + only_b - (only_b - only_a) ** 2 / n)) / n
    return d - z * se, d + z * se


def paired(a: Mapping[str, bool | int], b: Mapping[str, bool | int]) -> dict:
    """Model ``a`` vs model ``b`` on the episodes both played (``{episode_id: success}`` each).

    ``gap`` is b's success minus a's, in points; ``only_a``/``only_b`` count the episodes one of them alone
    solved; ``p_mcnemar`` is the exact two-sided McNemar p-value of those discordant counts."""
    ids = sorted(set(a) & set(b))
    if not ids:
        raise ValueError("the two models share no evaluated episode: nothing to pair")
    both = sum(1 for i in ids if a[i] and b[i])
    only_a = sum(1 for i in ids if a[i] and not b[i])
    only_b = sum(1 for i in ids if b[i] and not a[i])
    return {
        "episodes": len(ids),
        "both": both,
        "only_a": only_a,
        "only_b": only_b,
        "neither": len(ids) - both - only_a - only_b,
        "gap": round(100.0 * (only_b - only_a) / len(ids), 2),
        "p_mcnemar": round(mcnemar_exact(only_a, only_b), 4),
    }


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    if not values:
        raise ValueError("mean_sd: no values")
    m = sum(values) / len(values)
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return m, sd


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Per-seed values as mean, sample s.d., min and max (the table's ``success`` of an outcome)."""
    m, sd = mean_sd(values)
    return {"mean": m, "sd": sd, "min": min(values), "max": max(values)}


def pooled_counts(only_a: int, only_b: int, episodes: int) -> dict[str, Any]:
    """The pooled figures of a comparison from its summed discordant and total counts: gap (points), exact
    McNemar p and the paired Wald 95% interval (points)."""
    lo, hi = paired_diff_ci(only_a, only_b, episodes) if episodes else (0.0, 0.0)
    return {
        "episodes": episodes,
        "only_a": only_a,
        "only_b": only_b,
        "success_gap_pooled": round(100 * (only_b - only_a) / episodes, 2) if episodes else 0.0,
        "p_mcnemar_pooled": mcnemar_exact(only_a, only_b),
        "ci95_pooled": [round(100 * lo, 2), round(100 * hi, 2)],
    }


def _sign(v: float) -> int:
    return (v > 0) - (v < 0)


def kendall_tau(x: Sequence[float], y: Sequence[float], variant: str = "b") -> float:
    """Kendall's rank correlation of two equal-length sequences (O(n²), for the small groups it serves).

    ``variant="a"``: (concordant − discordant) / all pairs; ``"b"``: the same over √((n₀ − n₁)(n₀ − n₂)), n₁ and
    n₂ the pairs tied in x and in y (scipy's ``kendalltau`` default). NaN where τ-b's denominator is 0 (every x or
    every y tied) or n < 2."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau: {len(x)} x but {len(y)} y")
    n = len(x)
    if n < 2:
        return math.nan
    s = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = _sign(x[i] - x[j]), _sign(y[i] - y[j])
            s += a * b
            tx += a == 0
            ty += b == 0
    n0 = n * (n - 1) // 2
    if variant == "a":
        return s / n0
    if variant != "b":
        raise ValueError(f"kendall_tau: variant must be 'a' or 'b', got {variant!r}")
    den = math.sqrt((n0 - tx) * (n0 - ty))
    return s / den if den else math.nan


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ: Pearson's r of the (tie-averaged) ranks; NaN when either side is constant or n < 2."""
    if len(x) != len(y):
        raise ValueError(f"spearman_rho: {len(x)} x but {len(y)} y")
    if len(x) < 2:
        return math.nan
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else math.nan
