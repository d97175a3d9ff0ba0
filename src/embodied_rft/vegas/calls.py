"""Where Best-of-N acts: the per-call table of the greedy run's live candidates and the within-call metrics.

Best-of-N only ever compares the candidates of *one* planner call, so a verifier's pooled AUROC over all (call,
action) items (``bon.live_auroc``) says little about its selections: a verifier can rank calls (late calls are
mostly wrong) without ranking the candidates inside one. This module measures the ranking where it acts.

Input: the greedy run's results (each planner call's ``live`` record, ``vegas/select.py``: every distinct sampled
first action with its count among the N samples and its oracle label, and greedy's own first action with its label)
and each verifier's P(yes) per live item (``work_dir/bon/live_<verifier>.jsonl``). Outputs:

- :func:`table_rows` / :func:`write_table`: the per-call table, one row per (call, distinct first action) —
  ``episode_id, call, action, count, samples, label, greedy, greedy_label`` and one ``p_<verifier>`` column per scored verifier
  (empty where a capped verifier did not score the item; a call whose samples were all unreadable has no row) — written as CSV by the ``bon`` stage
  (``reports/bon_calls.csv``), so every figure below is recomputed from a versioned file (:func:`read_table`);
- :func:`within_call`: per part of the calls (``all``, ``first`` = an episode's first planner call, ``replan`` =
  the calls after it, where ``bon.trigger: replan`` selects):
  - ``auroc``: the within-call pairwise AUROC of each verifier on the *mixed* calls (≥ 1 oracle-correct candidate
    and ≥ 1 not): of all (correct, not correct) pairs of candidates of one call, the share the verifier ranks right
    (ties count half), with a bootstrap 95% interval over calls;
  - ``top1``: on the calls with a correct candidate, the share where each selector's pick is oracle-correct —
    ``greedy`` (its own first action), ``sample`` (the expected value of one draw: the correct samples' share),
    ``sc`` (the most frequent first action), each verifier (the highest P(yes)) and, with a prior weight, each
    verifier with the policy's prior (:func:`combined_score`); the oracle's is 1 by construction;
  - ``value_over_sample``: each pick's top-1 minus one sample's, paired on the same calls, bootstrap 95% interval.

Ties among a call's scores go to the more frequent first action, then to the one sampled first (the stage itself
breaks ties by the candidate's log-prob, which the table does not keep; a trained verifier's scores do not tie).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.atomic import atomic_open

BASE_COLUMNS = ("episode_id", "call", "action", "count", "samples", "label", "greedy", "greedy_label")
PARTS = ("all", "first", "replan")
# clip of P(yes) before its log-odds: a verifier certain either way still lets the policy's prior break the tie
P_CLIP = 1e-4


class CallTableError(ValueError):
    """A per-call table that cannot be read: names the file, the line and the field."""


def combined_score(p: float, count: int, samples: int, weight: float) -> float:
    """A first action's Best-of-N score with the policy's prior (``bon.prior_weight``): the verifier's log-odds
    plus ``weight`` times the log of the share of the N samples that start with it. ``weight = 0`` ranks exactly as
    P(yes) does; a large weight ranks as self-consistency does."""
    if samples < 1 or count < 1 or count > samples:
        raise ValueError(f"combined_score: need 1 <= count <= samples, got {count} of {samples}")
    q = min(max(p, P_CLIP), 1.0 - P_CLIP)
    return math.log(q / (1.0 - q)) + weight * math.log(count / samples)


def table_rows(greedy_results: Iterable[Mapping], scores: Mapping[str, Mapping[str, float]]) -> list[dict]:
    """The per-call table's rows from the greedy run's results and ``{verifier: {item id: P(yes)}}`` (item ids as
    ``vegas/bon.py`` ``live_items`` names them: ``<episode>:<call>:<action>``)."""
    rows = []
    for rec in greedy_results:
        for c in rec.get("live", []):
            g = c["greedy"]["a"]
            for x in c["cands"]:
                item = f"{rec['episode_id']}:{c['call']}:{x['a']}"
                row = {
                    "episode_id": rec["episode_id"],
                    "call": int(c["call"]),
                    "action": int(x["a"]),
                    "count": int(x["n"]),
                    "samples": len(c["firsts"]),
                    "label": x["label"],
                    "greedy": g is not None and int(g) == int(x["a"]),
                    # greedy's own first action's label, on every row of the call (it may not be among the samples)
                    "greedy_label": c["greedy"]["label"],
                }
                for v, by_item in scores.items():
                    row[f"p_{v}"] = by_item.get(item)
                rows.append(row)
    return rows


def write_table(path: str | Path, rows: Sequence[Mapping], verifiers: Sequence[str]) -> None:
    """Write the table as CSV (atomically); probabilities to 5 decimals."""
    cols = [*BASE_COLUMNS, *(f"p_{v}" for v in verifiers)]
    with atomic_open(path, "w") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            out = []
            for k in cols:
                v = r.get(k)
                if k == "greedy":
                    v = int(bool(v))
                elif k.startswith("p_"):
                    v = "" if v is None else f"{v:.5f}"
                elif v is None:
                    v = ""
                out.append(v)
            w.writerow(out)


def read_table(path: str | Path) -> list[dict]:
    """Rows of a table :func:`write_table` wrote; a missing column or an unreadable value is a
    :class:`CallTableError` naming the file, the line and the field."""
    path = Path(path)
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in BASE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise CallTableError(f"{path}:1: missing column(s) {missing}")
        for line, raw in enumerate(reader, start=2):
            row: dict[str, Any] = {}
            for k, v in raw.items():
                try:
                    if k in ("call", "action", "count", "samples"):
                        row[k] = int(v)
                    elif k == "greedy":
                        row[k] = v == "1"
                    elif k.startswith("p_"):
                        row[k] = None if v == "" else float(v)
                    elif k == "greedy_label":
                        row[k] = v or None
                    else:
                        row[k] = v
                except (TypeError, ValueError):
                    raise CallTableError(f"{path}:{line}: {k}: cannot read {v!r}") from None
            if row["label"] not in ("correct", "neutral", "wrong"):
                raise CallTableError(f"{path}:{line}: label: {row['label']!r} is not correct, neutral or wrong")
            if not 1 <= row["count"] <= row["samples"]:
                raise CallTableError(f"{path}:{line}: count: {row['count']} not in 1..samples ({row['samples']})")
            rows.append(row)
    return rows


@dataclass(frozen=True)
class Call:
    """One planner call of the greedy run: its distinct first actions (rows in sampling order)."""

    episode_id: str
    call: int
    rows: tuple[dict, ...]

    @property
    def part(self) -> str:
        return "first" if self.call == 0 else "replan"

    @property
    def labels(self) -> list[bool]:
        return [r["label"] == "correct" for r in self.rows]

    @property
    def has_correct(self) -> bool:
        return any(self.labels)

    @property
    def mixed(self) -> bool:
        return self.has_correct and not all(self.labels)


def calls_of(rows: Iterable[Mapping]) -> list[Call]:
    """Rows grouped by (episode, call), in table order."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["episode_id"], r["call"]), []).append(dict(r))
    return [Call(e, c, tuple(rs)) for (e, c), rs in groups.items()]


def pair_counts(call: Call, key: str) -> tuple[float, int]:
    """(pairs ranked right, ties half; all pairs) over the call's (correct, not correct) candidates that ``key``
    scores."""
    pos = [r[key] for r in call.rows if r["label"] == "correct" and r.get(key) is not None]
    neg = [r[key] for r in call.rows if r["label"] != "correct" and r.get(key) is not None]
    right = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return right, len(pos) * len(neg)


def pick(call: Call, score: Callable[[dict], float]) -> dict:
    """The row with the highest ``score``; ties to the higher count, then to the earlier row."""
    return max(enumerate(call.rows), key=lambda ir: (score(ir[1]), ir[1]["count"], -ir[0]))[1]


def _bootstrap(values: Sequence[tuple[float, float]], reps: int, seed: int) -> tuple[float | None, float | None]:
    """95% percentile interval of sum(x) / sum(w) over calls resampled with replacement."""
    if not values or reps <= 0:
        return None, None
    import numpy as np

    arr = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(arr), size=(reps, len(arr)))
    num, den = arr[idx, 0].sum(axis=1), arr[idx, 1].sum(axis=1)
    stat = np.divide(num, den, out=np.full(reps, np.nan), where=den > 0)
    stat = stat[~np.isnan(stat)]
    if not len(stat):
        return None, None
    return float(np.percentile(stat, 2.5)), float(np.percentile(stat, 97.5))


def _rate(pairs: Sequence[tuple[float, float]], reps: int, seed: int) -> dict[str, Any]:
    den = sum(w for _, w in pairs)
    lo, hi = _bootstrap(pairs, reps, seed)
    return {"value": sum(x for x, _ in pairs) / den if den else None, "ci95": [lo, hi], "n": len(pairs)}


def pickers(verifiers: Sequence[str], weights: Mapping[str, float]) -> dict[str, Callable[[Call], float]]:
    """Each selector's oracle-correct value on a call: 1/0 for a pick, the expected value for ``sample``."""

    def correct(r: dict) -> float:
        return float(r["label"] == "correct")

    out: dict[str, Callable[[Call], float]] = {
        "greedy": lambda c: float(c.rows[0]["greedy_label"] == "correct"),
        "sample": lambda c: sum(r["count"] for r in c.rows if r["label"] == "correct") / c.rows[0]["samples"],
        "sc": lambda c: correct(pick(c, lambda r: r["count"])),
    }
    for v in verifiers:
        key = f"p_{v}"
        out[v] = lambda c, key=key: correct(pick(c, lambda r: r[key]))
        w = weights.get(v)
        if w:
            out[f"{v}+prior"] = lambda c, key=key, w=w: correct(
                pick(c, lambda r: combined_score(r[key], r["count"], r["samples"], w))
            )
    return out


def scored(call: Call, key: str) -> bool:
    return all(r.get(key) is not None for r in call.rows)


def within_call(
    rows: Sequence[Mapping],
    verifiers: Sequence[str],
    weights: Mapping[str, float] | None = None,
    *,
    reps: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The within-call metrics (module docstring) of the table's ``rows`` for each of ``verifiers`` (their
    ``p_<verifier>`` columns); ``weights`` adds a ``<verifier>+prior`` pick scored by :func:`combined_score`.
    A verifier's top-1 and value use only the calls whose every candidate it scored (``scored_calls``)."""
    weights = dict(weights or {})
    calls = calls_of(rows)
    fns = pickers(verifiers, weights)
    out: dict[str, Any] = {}
    for part in PARTS:
        cs = [c for c in calls if part == "all" or c.part == part]
        with_correct = [c for c in cs if c.has_correct]
        entry: dict[str, Any] = {
            "calls": len(cs),
            "mixed_calls": sum(c.mixed for c in cs),
            "calls_with_correct": len(with_correct),
            "auroc": {},
            "top1": {},
            "value_over_sample": {},
        }
        for v in verifiers:
            key = f"p_{v}"
            counts = [pair_counts(c, key) for c in cs if c.mixed]
            entry["auroc"][v] = _rate([x for x in counts if x[1]], reps, seed)
        for name, fn in fns.items():
            key = f"p_{name.split('+')[0]}"
            usable = [c for c in with_correct if name in ("greedy", "sample", "sc") or scored(c, key)]
            vals = [(fn(c), 1.0) for c in usable]
            entry["top1"][name] = _rate(vals, reps, seed)
            if name != "sample":
                diffs = [(fn(c) - fns["sample"](c), 1.0) for c in usable]
                entry["value_over_sample"][name] = _rate(diffs, reps, seed)
        out[part] = entry
    return out


def best_weight(
    rows: Sequence[Mapping], verifier: str, grid: Sequence[float], part: str = "replan"
) -> list[dict[str, Any]]:
    """Top-1 oracle-correct rate of ``verifier`` with each prior weight of ``grid`` on ``part``'s calls with a
    correct candidate (how ``bon.prior_weight`` is chosen on valid_seen: ``tools/bon_calls.py``), best first."""
    key = f"p_{verifier}"
    cs = [c for c in calls_of(rows) if (part == "all" or c.part == part) and c.has_correct and scored(c, key)]
    if not cs:
        raise ValueError(f"no {part} call with a correct candidate has every candidate scored by {verifier}")
    out = []
    for w in grid:
        hit = sum(
            pick(c, lambda r, w=w: combined_score(r[key], r["count"], r["samples"], w))["label"] == "correct"
            for c in cs
        )
        out.append({"weight": w, "top1": hit / len(cs), "calls": len(cs)})
    return sorted(out, key=lambda d: (-d["top1"], d["weight"]))


__all__ = [
    "BASE_COLUMNS",
    "Call",
    "CallTableError",
    "best_weight",
    "calls_of",
    "combined_score",
    "pair_counts",
    "pick",
    "read_table",
    "table_rows",
    "within_call",
    "write_table",
]
