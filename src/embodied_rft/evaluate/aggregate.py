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

Paired comparisons of two models (the exact McNemar test, the paired interval) live in ``core/stats.py``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from embodied_rft.schema import SUBSETS, TASK_TYPES

from .config import SUMMARIES


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
    for key, summary in SUMMARIES.items():  # the fields a policy wrapper adds (config.SUMMARIES)
        got = [r[key] for r in results if r.get(key)]
        if got:
            out[key] = summary(got)
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
