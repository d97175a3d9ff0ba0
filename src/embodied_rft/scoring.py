"""Held-out scoring with one set of metric names for SFT, GRPO and evaluation.

Input: one response per held-out prompt (greedy, in the callers), the prompt's ``label`` when it has one (a
decomposed sample's expert remaining plan) and the reward config. :func:`score_response` reads a response the
way the reward reads it and gives one row; :func:`summarize` turns rows into the shared metrics:

- ``samples``: how many prompts were scored;
- ``json_valid_rate``: a JSON object could be recovered (the reward's tolerant parser);
- ``format_rate``: that object carries all four EB keys;
- with labels: ``reward_mean`` (max 1.5) and each term's mean (``structure_mean``, ``valid_mean``,
  ``match_mean``), ``prefix_accuracy`` (mean R_accuracy = n(n+1)/(k(k+1)), the prefix credit GRPO trains on)
  and ``exact_plan_rate`` (the whole remaining plan reproduced: the online filter's count);
- ``avg_response_tokens`` and ``truncated_rate`` (cut at the token cap) when the generator reports them.

Rates and means are in [0, 1] (not %). SFT reports the format metrics of its held-out check, GRPO all of them
before and after training (with per-prompt rows for its paired test), and the evaluate stage all of them per
model and per subset beside the interactive success rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from embodied_rft.data.response import RESPONSE_KEYS, parse_response

_TERMS = (
    ("total", "reward_mean"),
    ("structure", "structure_mean"),
    ("valid", "valid_mean"),
    ("match", "match_mean"),
    ("accuracy", "prefix_accuracy"),
    ("accuracy_full", "exact_plan_rate"),
)


def score_response(
    response: str, label: object = None, reward: Any = None, *, tokens: int | None = None, truncated: bool | None = None
) -> dict:
    """One held-out row: format flags, the reward terms when ``label`` and ``reward`` (a
    :class:`~embodied_rft.reward.RewardConfig`) are given, and the token count / cut flag when known."""
    obj = parse_response(response)
    row: dict[str, Any] = {
        "json_valid": float(isinstance(obj, dict)),
        "format": float(isinstance(obj, dict) and all(k in obj for k in RESPONSE_KEYS)),
        "tokens": tokens,
        "truncated": truncated,
    }
    if label is not None and reward is not None:
        rb = reward.score(response, label)
        row.update(
            total=rb.total,
            structure=rb.structure,
            valid=rb.valid,
            match=rb.match,
            accuracy=rb.accuracy,
            accuracy_full=rb.accuracy_full,
        )
    return row


def summarize(rows: Sequence[dict], digits: int = 6) -> dict:
    """The shared metrics of ``rows`` (see the module docstring); ``{"samples": 0}`` for none."""
    n = len(rows)
    if not n:
        return {"samples": 0}

    def mean(key: str) -> float:
        return round(sum(float(r[key]) for r in rows) / n, digits)

    out: dict[str, Any] = {"samples": n, "json_valid_rate": mean("json_valid"), "format_rate": mean("format")}
    if all("total" in r for r in rows):
        out.update({name: mean(key) for key, name in _TERMS})
    toks = [r["tokens"] for r in rows if r.get("tokens") is not None]
    if toks:
        out["avg_response_tokens"] = round(sum(toks) / len(toks), 2)
    cut = [r["truncated"] for r in rows if r.get("truncated") is not None]
    if cut:
        out["truncated_rate"] = round(sum(map(bool, cut)) / len(cut), digits)
    return out


__all__ = ["score_response", "summarize"]
