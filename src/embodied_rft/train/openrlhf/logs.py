"""What an OpenRLHF job leaves behind, read back: the trainer's per-step log lines and our reward file's records.

OpenRLHF 0.11.2 writes no metrics file (W&B and TensorBoard only, both optional). Its PPO trainer logs every global
step (one rollout batch and its training epochs) as ``✨ Global step N: {…}``, a Python dict repr
(``openrlhf/trainer/ppo_trainer.py``, ``logger.info``); Ray prefixes it in the driver's log with the actor
(``(PPOTrainer pid=…) ``). The job's entrypoint (:mod:`.entry`) tees the trainer's output into ``trainer.log``, and
:func:`read_steps` parses those lines back.

The reward file (:mod:`.reward`) appends one record per scored sample to ``EMBODIED_RFT_REWARD_LOG/<host>-<pid>.jsonl``
(one file per process: OpenRLHF scores in every vLLM engine actor, in threads). :func:`rollout_batches` regroups them
into groups of G samples per prompt, in the order the groups completed, and into rollout batches the way OpenRLHF
fills one: N_B accepted groups with dynamic filtering on, N_B groups without. The filter's pass rate comes from the
scores themselves; the rate OpenRLHF logs is G× too high (docs/facts.md §5.4). Batch boundaries are reconstructed
from arrival order, so a batch's groups can differ from OpenRLHF's by the groups in flight at its edge; the totals
are exact.

:func:`job_metrics` turns what the stage collected into its metrics record, one row per global step
(:func:`history_rows`) under the local engine's column names where the two engines measure the same thing.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from embodied_rft.config import as_dict
from embodied_rft.data.jsonl import DataError
from embodied_rft.train.grpo.heldout import HELDOUT_HEADLINE

STEP_LINE = re.compile(r"Global step (\d+): (\{.*\})\s*$")
# the reward terms each record carries (reward.EXTRA_KEYS), averaged per batch
TERMS = ("structure", "valid", "match", "accuracy")
_NAMES = {"nan": math.nan, "inf": math.inf, "None": None, "True": True, "False": False}


def _value(node: ast.AST) -> Any:
    """A literal of a logged dict: numbers, strings, None/True/False, nan/inf, nested dicts/lists/tuples."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand)
        if isinstance(v, (int, float)):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e) for e in node.elts]
    raise ValueError(f"not a literal: {ast.dump(node)[:80]}")


def parse_step(line: str) -> tuple[int, dict[str, Any]] | None:
    """``(global step, logged values)`` of one trainer log line, None for any other line. Non-finite numbers
    become None (JSON has no NaN)."""
    m = STEP_LINE.search(line)
    if not m:
        return None
    try:
        values = _value(ast.parse(m.group(2), mode="eval").body)
    except (SyntaxError, ValueError):
        return None
    if not isinstance(values, dict):
        return None
    clean = {
        str(k): (None if isinstance(v, float) and not math.isfinite(v) else v)
        for k, v in values.items()
        if isinstance(v, (int, float, str, type(None)))
    }
    return int(m.group(1)), clean


def read_steps(path: str | Path) -> list[dict[str, Any]]:
    """One row per global step logged in ``path`` (``step`` first, then OpenRLHF's keys), in step order; a step
    logged twice (a resumed job) keeps its last line."""
    steps: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parsed = parse_step(line)
            if parsed is not None:
                steps[parsed[0]] = {"step": parsed[0], **parsed[1]}
    return [steps[k] for k in sorted(steps)]


def read_reward_records(folder: str | Path) -> list[dict[str, Any]]:
    """Every record the reward file appended under ``folder``, in time order. A last line cut short (a process
    killed mid-write) is skipped; any other unreadable line is an error naming the file and line."""
    records: list[dict[str, Any]] = []
    for f in sorted(Path(folder).glob("*.jsonl")):
        lines = f.read_text(encoding="utf-8").split("\n")
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                float(rec["t"]), str(rec["prompt"]), float(rec["reward"]), float(rec["score"])
            except (ValueError, KeyError, TypeError) as e:
                if i == len(lines):  # no newline after it: cut short
                    continue
                raise DataError(f"{f}:{i}: not a reward record ({e})") from None
            records.append(rec)
    records.sort(key=lambda r: r["t"])
    return records


def _mean(xs: Sequence[float]) -> float | None:
    return round(sum(xs) / len(xs), 6) if xs else None


def rollout_batches(
    records: Sequence[dict[str, Any]],
    group_size: int,
    buffer_size: int,
    keep: Callable[[Sequence[float]], bool] | None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rollout batches of the records (module docstring): one row per batch and a summary of the whole run.

    ``keep(scores)`` is the dynamic filter's rule for a group (None: the filter is off, every group counts)."""
    open_groups: dict[str, list[dict]] = {}
    groups: list[list[dict]] = []
    for rec in records:
        g = open_groups.setdefault(rec["prompt"], [])
        g.append(rec)
        if len(g) == group_size:
            groups.append(open_groups.pop(rec["prompt"]))
    groups.sort(key=lambda g: g[-1]["t"])
    batches: list[dict[str, Any]] = []
    cur: list[tuple[list[dict], bool]] = []

    def close(partial: bool) -> None:
        samples = [r for g, _ in cur for r in g]
        accepted = sum(k for _, k in cur)
        row = {
            "batch": len(batches) + 1,
            "groups": len(cur),
            "accepted": accepted,
            "pass_rate": round(accepted / len(cur), 6),
            "samples": len(samples),
            "reward_mean": _mean([float(r["reward"]) for r in samples]),
            "accuracy_full_rate": _mean([float(r["score"]) for r in samples]),
            **{f"reward_{t}": _mean([float(r[t]) for r in samples if t in r]) for t in TERMS},
        }
        if partial:
            row["partial"] = True
        batches.append(row)
        cur.clear()

    for g in groups:
        kept = keep([float(r["score"]) for r in g]) if keep is not None else True
        cur.append((g, kept))
        if sum(k for _, k in cur) == buffer_size:
            close(False)
    if cur:
        close(True)
    seen = sum(b["groups"] for b in batches)
    accepted = sum(b["accepted"] for b in batches)
    summary = {
        "samples": len(records),
        "groups_seen": seen,
        "groups_accepted": accepted,
        "pass_rate": round(accepted / seen, 6) if seen else None,
        "batches": len(batches),
        "incomplete_groups": len(open_groups),
        "reward_mean": _mean([float(r["reward"]) for g in groups for r in g]),
        "accuracy_full_rate": _mean([float(r["score"]) for g in groups for r in g]),
    }
    return batches, summary


# what metrics/grpo.json shows for a cluster run (config, per-step history, rollout batches and the job's record are
# in metrics/grpo.details.json)
OPENRLHF_HEADLINE = {
    "backend": True,
    "job": {"submission_id": True, "trainer": True, "openrlhf_version": True},
    "steps": True,
    "updates": True,
    "heldout": HELDOUT_HEADLINE,
    "filter": {"pass_rate": True},
    "rewards": {"samples": True, "reward_mean": True, "accuracy_full_rate": True},
}


def history_rows(steps: list[dict], batches: list[dict]) -> list[dict]:
    """One row per global step: OpenRLHF's logged values and, from our reward records, the same step's rollout
    batch under the local engine's names (``reward_mean``, ``accuracy_full_rate``, ``filter_pass_rate``), so
    ``plots/grpo.csv`` draws the same panels for both engines. Batches no step trained on (the groups scored when
    the run ended) stay out; with no step logged at all, one row per batch."""
    rows = []
    for i, step in enumerate(steps or [{"step": b["batch"]} for b in batches]):
        row: dict[str, Any] = {"update": step["step"], **{k: v for k, v in step.items() if k != "step"}}
        if i < len(batches):
            batch = batches[i]
            row.update({k: v for k, v in batch.items() if k not in ("batch", "pass_rate", "partial")})
            row["filter_pass_rate"] = batch["pass_rate"]
        rows.append(row)
    return rows


def job_metrics(
    where: dict[str, str], gcfg: Any, got: dict[str, Any], heldout: dict | None, wall: float, total: float
) -> dict[str, Any]:
    """The stage's metrics record of a finished job: ``where`` it ran (job server, folder), its ``grpo`` config,
    what the stage collected (``got``: the job's record, OpenRLHF's steps, the rollout batches and their summary),
    the held-out block and the job's and the stage's seconds. :data:`OPENRLHF_HEADLINE` is the part
    ``metrics/grpo.json`` shows."""
    rows = history_rows(got["steps"], got["batches"])
    record = got["record"]
    logged = [
        r["dynamic_filtering_pass_rate"] for r in got["steps"] if r.get("dynamic_filtering_pass_rate") is not None
    ]
    return {
        "backend": "openrlhf",
        "job": {
            **{k: v for k, v in record.items() if k != "argv"},
            **where,
            "status": "SUCCEEDED",
            "wall_s": round(wall, 3),
            "argv": record.get("argv"),
        },
        # OpenRLHF's global steps (one rollout batch each) and the optimiser updates they make (K_2 per step)
        "steps": len(got["steps"]),
        "updates": len(got["steps"]) * gcfg.filter.updates_per_buffer,
        "heldout": heldout,
        "filter": {
            "pass_rate": got["rewards"]["pass_rate"],
            "groups_seen": got["rewards"]["groups_seen"],
            "groups_accepted": got["rewards"]["groups_accepted"],
            # what OpenRLHF logged, divided by G (its logged rate counts samples, not groups; docs/facts.md §5.4)
            "openrlhf_logged_pass_rate": round(sum(logged) / len(logged) / 100 / gcfg.group_size, 6)
            if logged
            else None,
        },
        "rewards": got["rewards"],
        "final": rows[-1] if rows else {},
        "config": as_dict(gcfg),
        "history": rows,
        "rollout_batches": got["batches"],
        "wall_s": round(total, 3),
    }


__all__ = [
    "OPENRLHF_HEADLINE",
    "history_rows",
    "job_metrics",
    "parse_step",
    "read_reward_records",
    "read_steps",
    "rollout_batches",
]
