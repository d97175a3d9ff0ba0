"""Per-episode results -> success rates and behaviour statistics, overall, per subset and per task type.

Input: result records from :mod:`.episode`. Output: plain dicts for ``metrics/evaluate.json``:

- ``success_rate`` (%, the paper's Table 1 unit) and ``progress`` (mean fraction of goal conditions met, %);
- ``avg_env_steps``, ``avg_planner_calls``, ``avg_invalid_actions``;
- ``invalid_action_rate``: invalid actions / action attempts, where attempts = environment steps + planner
  outputs that executed nothing (parse failures and out-of-range plans). EB reports invalid / env steps per
  episode, which exceeds 1 when unreadable outputs dominate; ours stays a rate;
- ``parse_failure_rate``: unreadable responses / planner calls;
- ``avg_response_chars`` and, when the policy reports them, ``avg_response_tokens`` (per planner call);
- ``end_reasons``: how episodes ended;
- ``repeat_after_failure_rate``: of the failed actions that another executed action follows, the share whose
  next executed action has the same id (the policy retrying what the simulator just rejected);
- ``recovered_next_call_rate`` / ``recovered_next_call_correct_rate``: of the planner calls that come right after
  a failed action, the share whose first action executes / is labelled correct by the world oracle (a call with
  no executable first action counts as not recovered; ``episode.py``). None when there is nothing to count.

:func:`paired` compares two models on the episodes both played (the same held-out episodes, so the
comparison is paired): how many each alone solved, the gap, and the exact two-sided McNemar p-value — with a
~10% success rate, 36-72 episodes move by 1.4-2.8 points per episode, and only the discordant episodes say
whether a gap is more than chance.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from embodied_rft.schema import SUBSETS, TASK_TYPES


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def failure_repeats(actions: Sequence[Sequence]) -> tuple[int, int]:
    """(failed actions followed by another executed action, those whose next action has the same id)."""
    followed = repeats = 0
    for cur, nxt in zip(actions, actions[1:], strict=False):
        if not cur[2]:
            followed += 1
            repeats += nxt[0] == cur[0]
    return followed, repeats


def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def behaviour(results: Sequence[dict]) -> dict:
    """The repeat-after-failure and recovered-next-call rates of ``results`` (module docstring)."""
    followed = repeats = 0
    for r in results:
        f, k = failure_repeats(r.get("actions") or [])
        followed += f
        repeats += k
    # records written before the recovery counts existed have none: they are left out of those rates
    rec = [r for r in results if "recovery_calls" in r]
    calls = sum(r["recovery_calls"] for r in rec)
    return {
        "failures_followed": followed,
        "repeat_after_failure_rate": _rate(repeats, followed),
        "recovery_calls": calls,
        "recovered_next_call_rate": _rate(sum(r["recovered_valid"] for r in rec), calls),
        "recovered_next_call_correct_rate": _rate(sum(r["recovered_correct"] for r in rec), calls),
    }


def summarize(results: Sequence[dict]) -> dict:
    n = len(results)
    if n == 0:
        return {"episodes": 0}
    steps = sum(r["env_steps"] for r in results)
    invalid = sum(r["invalid_actions"] for r in results)
    noexec = sum(r["parse_failures"] + r.get("out_of_range_plans", 0) for r in results)
    calls = sum(r["planner_calls"] for r in results)
    chars = [c for r in results for c in r["response_chars"]]
    tokens = [t for r in results for t in (r.get("response_tokens") or [])]
    out = {
        "episodes": n,
        "success_rate": round(100.0 * _mean([float(r["success"]) for r in results]), 2),
        "progress": round(100.0 * _mean([r["progress"] for r in results]), 2),
        "avg_env_steps": round(steps / n, 3),
        "avg_planner_calls": round(calls / n, 3),
        "avg_invalid_actions": round(invalid / n, 3),
        "invalid_action_rate": round(invalid / (steps + noexec), 4) if steps + noexec else 0.0,
        "parse_failure_rate": round(sum(r["parse_failures"] for r in results) / calls, 4) if calls else 0.0,
        "avg_response_chars": round(_mean(chars), 1),
        "end_reasons": dict(sorted(Counter(r["end_reason"] for r in results).items())),
        **behaviour(results),
    }
    if tokens:
        out["avg_response_tokens"] = round(_mean(tokens), 1)
    refl = [r["reflection"] for r in results if r.get("reflection")]
    if refl:  # evaluate.reflection: free | regrpo (docs/regrpo.md §6)
        from embodied_rft.regrpo.trigger import summarize as reflection_summary

        out["reflection"] = reflection_summary(refl)
    return out


def _ordered_groups(results: Iterable[dict], key: str, order: Sequence[str]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        groups[r[key]].append(r)
    known = [k for k in order if k in groups]
    return {k: groups[k] for k in known + sorted(set(groups) - set(order))}


def aggregate(results: Sequence[dict]) -> dict:
    """``{"overall": ..., "per_subset": {...}, "per_task_type": {...}}``; subsets in EB's order."""
    return {
        "overall": summarize(results),
        "per_subset": {k: summarize(v) for k, v in _ordered_groups(results, "subset", SUBSETS).items()},
        "per_task_type": {k: summarize(v) for k, v in _ordered_groups(results, "task_type", TASK_TYPES).items()},
    }


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
