"""The generic checks a study names under ``checks:`` (``fn:``), each a function of the finished table and its
``args`` returning ``(holds, figures)``; ``holds`` is None when the comparison it reads was not run."""

from __future__ import annotations

from typing import Any

from embodied_rft.study.registry import CHECKS

Verdict = tuple[bool | None, dict[str, Any]]


def comparison(table: dict[str, Any], cid: str) -> dict[str, Any] | None:
    return table["comparisons"].get(cid)


@CHECKS.register("paired_gain")
def paired_gain(
    table: dict[str, Any],
    comparison: str,
    points: float = 0.0,
    p: float | None = None,
    positive_seeds: int | None = None,
) -> Verdict:
    """b's pooled success gap over a is at least ``points`` (negative: at most that much lower), with the pooled
    exact McNemar p below ``p`` and a positive gap on at least ``positive_seeds`` seeds when given."""
    c = table["comparisons"].get(comparison)
    if c is None:
        return None, {}
    holds = c["success_gap_pooled"] >= points
    if p is not None:
        holds = holds and c["p_mcnemar_pooled"] < p
    if positive_seeds is not None:
        holds = holds and c["positive_seeds"] >= min(positive_seeds, len(c["seeds"]))
    figs = {"gap_pts": c["success_gap_pooled"], "p": c["p_mcnemar_pooled"], "positive_seeds": c["positive_seeds"]}
    return holds, figs


@CHECKS.register("beyond_spread")
def beyond_spread(table: dict[str, Any], comparison: str) -> Verdict:
    """The gap between b's and a's mean success is larger than the sum of their standard deviations over seeds."""
    c = table["comparisons"].get(comparison)
    if c is None:
        return None, {}
    sa, sb = table["outcomes"][c["a"]]["success"], table["outcomes"][c["b"]]["success"]
    gap, width = sb["mean"] - sa["mean"], sa["sd"] + sb["sd"]
    return gap > width, {"gap_of_means": gap, "sum_of_sd": width}


@CHECKS.register("every_seed")
def every_seed(table: dict[str, Any], comparison: str) -> Verdict:
    """b beats a on every seed."""
    c = table["comparisons"].get(comparison)
    if c is None:
        return None, {}
    return all(g > 0 for g in c["success_gap_per_seed"]), {"gap_per_seed": c["success_gap_per_seed"]}


@CHECKS.register("count_gap")
def count_gap(table: dict[str, Any], comparison: str, column: str, points: float, at_most: bool = False) -> Verdict:
    """b's pooled rate of a count column minus a's, in points, is at least ``points`` (``at_most``: at most)."""
    c = table["comparisons"].get(comparison)
    if c is None or c["counts"].get(column) is None or None in c["counts"][column]:
        return None, {}
    ra, rb = c["counts"][column]
    gap = round(100 * (rb - ra), 2)
    return (gap <= points if at_most else gap >= points), {f"{column}_pts": gap}
