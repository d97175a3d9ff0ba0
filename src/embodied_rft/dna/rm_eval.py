"""Reward models on the bench (``rm_eval``): ranking, failure-as-success, per-frame agreement and cost.

Per reward model and bench record: the key frames (:func:`.frames.key_indices`), the model's progress at them,
interpolated to every state; the record's **score** is its final reward with ties broken by
how early the reward first reaches it (``final − 1e-4 × t*``, t* the first state within 1e-6 of the final reward:
two successes tie on the final reward, and the one with detours reaches it later: D&A's time to success).

- **τ (triplets)**: D&A-Bench's unit is a task's (success, suboptimal, failure) triplet. Per (task, instruction)
  group and failure kind, Kendall's τ-b of the scores of (optimal, suboptimal, that failure) against their levels
  2 > 1 > 0, averaged over the triplets (1 for a perfect ranking, −1 for the reverse; a tie counts half-way).
- **τ-b / τ-a (groups)**: the same over a whole group's six trajectories (four failures tied at level 0: a
  perfect ranking of distinct scores reaches τ-b ≈ 0.77 and τ-a = 0.6 there, the ceiling of that form).
- **failure-as-success** per failure kind: the share whose final reward reaches ``dna.eval.success_threshold``.
- **per-frame Spearman** against the planner's progress (records where both vary), **MAE** against it.
- **cost**: calls, tokens, seconds and parse failures per trajectory, from the models' assessments.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embodied_rft.config import ConfigError
from embodied_rft.core.stats import kendall_tau, spearman_rho
from embodied_rft.dna.config import KINDS, LEVELS, EvalConfig, FramesConfig
from embodied_rft.dna.frames import Trajectory, key_indices, replay
from embodied_rft.dna.llm import RewardModelFailed
from embodied_rft.dna.rms import RewardModel, assess

FAILURES = tuple(k for k in KINDS if LEVELS[k] == 0)
TIE_BREAK = 1e-4


def score(rewards: Sequence[float]) -> float:
    """A trajectory's ranking score: the final reward, ties broken by how early it is first reached (module doc)."""
    final = float(rewards[-1])
    first = next(t for t, r in enumerate(rewards) if abs(float(r) - final) <= 1e-6)
    return final - TIE_BREAK * first


def tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """τ-b of scores against levels; 0 when the scores are all tied (no ranking at all), NaN when the levels are."""
    if len(set(y)) < 2:
        return float("nan")
    if len(set(x)) < 2:
        return 0.0
    return kendall_tau(x, y, "b")


def _mean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if not math.isnan(x)]
    return round(float(np.mean(xs)), 4) if xs else None


def evaluate_rm(
    rm: RewardModel, records: Sequence[dict], frames: FramesConfig, cfg: EvalConfig, episodes: dict[str, dict]
) -> tuple[dict, list[dict]]:
    """One reward model's figures on the bench (module docstring) and its per-record rows (id, score, final,
    rewards at every state)."""
    rows: list[dict] = []
    failed: list[dict] = []
    cost = defaultdict(float)
    trajs: dict[tuple, Trajectory] = {}
    for r in records:
        key = (r["task"], tuple(r["actions"]))
        if key not in trajs:
            trajs[key] = replay(episodes[r["task"]], r["actions"], where=r["id"])
        traj = trajs[key]
        keys = key_indices(traj.n, frames.h)
        t0 = time.perf_counter()
        try:
            rewards, a = assess(rm, traj, keys, r["instruction"])
        except RewardModelFailed as exc:
            # the seed's research class scores such a trajectory 0 everywhere; counted, and capped below
            failed.append({"id": r["id"], "error": str(exc)})
            rewards, a = [0.0] * (traj.n + 1), None
        cost["seconds"] += time.perf_counter() - t0
        if a is not None:
            cost["calls"] += a.calls
            cost["tokens"] += a.tokens
            cost["parse_failures"] += a.parse_failures
        rows.append({"id": r["id"], "score": score(rewards), "final": rewards[-1], "rewards": rewards})
    if len(failed) > cfg.max_failed_share * len(records):
        raise RewardModelFailed(
            f"{rm.name}: {len(failed)} of {len(records)} trajectories without a valid answer (more than "
            f"dna.eval.max_failed_share = {cfg.max_failed_share}); the first: {failed[0]['error']}"
        )
    by_id = {row["id"]: row for row in rows}
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in records:
        groups[(r["task"], r["paraphrase"])][r["kind"]] = r
    triplet: dict[str, list[float]] = defaultdict(list)
    group_b, group_a = [], []
    for g in groups.values():
        if "optimal" in g and "suboptimal" in g:
            for kind in FAILURES:
                if kind in g:
                    items = [g["optimal"], g["suboptimal"], g[kind]]
                    triplet[kind].append(tau_b([by_id[i["id"]]["score"] for i in items], [i["level"] for i in items]))
        items = list(g.values())
        xs, ys = [by_id[i["id"]]["score"] for i in items], [i["level"] for i in items]
        group_b.append(tau_b(xs, ys))
        group_a.append(kendall_tau(xs, ys, "a"))
    fas = {
        kind: _mean([float(by_id[r["id"]]["final"] >= cfg.success_threshold) for r in records if r["kind"] == kind])
        for kind in FAILURES
    }
    rho, mae = [], []
    for r in records:
        rew, ref = by_id[r["id"]]["rewards"], r["progress"]
        mae.append(float(np.mean(np.abs(np.asarray(rew) - np.asarray(ref)))))
        if len(set(rew)) > 1 and len(set(ref)) > 1:
            rho.append(spearman_rho(rew, ref))
    n = max(1, len(records))
    all_triplets = [v for vs in triplet.values() for v in vs]
    figures = {
        "records": len(records),
        "failed_trajectories": len(failed),
        "failed_examples": failed[:5],
        "tau": _mean(all_triplets),
        "tau_by_failure": {k: _mean(v) for k, v in triplet.items()},
        "tau_b_group": _mean(group_b),
        "tau_a_group": _mean(group_a),
        "failure_as_success": fas,
        "spearman_per_frame": _mean(rho),
        "mae": _mean(mae),
        "per_trajectory": {k: round(v / n, 6) for k, v in cost.items()},
    }
    return figures, rows


BENCH_FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "task": str,
    "instruction": str,
    "paraphrase": int,
    "kind": str,
    "level": int,
    "actions": list,
    "progress": list,
    "target_type": str,
}


def read_bench(bench_dir: str | Path) -> tuple[list[dict], dict[str, dict]]:
    """The bench's records and its tasks' episodes, every field checked (file, line and field in the error)."""
    from embodied_rft.core.jsonl import DataError, iter_jsonl, require
    from embodied_rft.world.episode import read_episodes

    bench = Path(bench_dir) / "bench.jsonl"
    episodes = {e["episode_id"]: e for e in read_episodes(Path(bench_dir) / "tasks.jsonl")}
    records = []
    for line, rec in iter_jsonl(bench):
        where = f"{bench}:{line}"
        for field, typ in BENCH_FIELDS.items():
            require(rec, field, typ, where)
        if rec["kind"] not in LEVELS:
            raise DataError(f"{where}: field 'kind' must be one of {list(LEVELS)}, got {rec['kind']!r}")
        if rec["level"] != LEVELS[rec["kind"]]:
            raise DataError(f"{where}: field 'level' must be {LEVELS[rec['kind']]} for kind {rec['kind']!r}")
        if rec["task"] not in episodes:
            raise DataError(f"{where}: field 'task' {rec['task']!r} is not in {Path(bench_dir) / 'tasks.jsonl'}")
        if len(rec["progress"]) != len(rec["actions"]) + 1:
            raise DataError(f"{where}: field 'progress' must hold one value per state ({len(rec['actions']) + 1})")
        records.append(rec)
    return records, episodes


def bias_dial(figures: dict[str, dict]) -> dict | None:
    """τ and failure-as-success (wrong object, wrong receptacle) of the ``biased:<eps>`` models in order of eps;
    ``tau_strictly_decreasing`` and ``fas_rising`` (non-decreasing, last above first). None with fewer than two."""
    dial = sorted((float(k.partition(":")[2]), v) for k, v in figures.items() if k.startswith("biased:"))
    if len(dial) < 2:
        return None
    taus = [v["tau"] for _, v in dial]
    fas = [
        (v["failure_as_success"]["wrong_object"] or 0) + (v["failure_as_success"]["wrong_receptacle"] or 0)
        for _, v in dial
    ]
    return {
        "eps": [e for e, _ in dial],
        "tau": taus,
        "wrong_failure_as_success": [round(f / 2, 4) for f in fas],
        "tau_strictly_decreasing": all(b < a for a, b in zip(taus, taus[1:])),
        "fas_rising": all(b >= a for a, b in zip(fas, fas[1:])) and fas[-1] > fas[0],
    }


HEADLINE = {"rms": {"*": {"tau": True}}, "bias_dial": {"tau_strictly_decreasing": True, "fas_rising": True}}


def report(figures: dict[str, dict], dial: dict | None, n: int) -> str:
    lines = [
        "# Reward models on the bench (symbolic-simulator proxy)",
        "",
        f"{n} bench records (docs/dna.md §3; an LLM reward model scores a seeded draw of whole groups). τ: Kendall's τ-b of (optimal, suboptimal, one failure) against "
        "2 > 1 > 0 per (task, instruction), averaged; group τ-b / τ-a: over all six kinds (ceiling below 1: four "
        "failures share level 0). Failure-as-success: final reward ≥ the threshold. Spearman and MAE: per frame "
        "against the planner's progress.",
        "",
        "| reward model | records | failed | τ | group τ-b | group τ-a | FaS wrong object | FaS wrong receptacle | FaS incomplete "
        "| FaS regress | Spearman | MAE | calls / traj | tokens / traj | parse failures / traj |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, f in figures.items():
        fas, c = f["failure_as_success"], f["per_trajectory"]
        lines.append(
            f"| {name} | {f['records']} | {f['failed_trajectories']} | {f['tau']} | {f['tau_b_group']} | {f['tau_a_group']} | {fas['wrong_object']} | "
            f"{fas['wrong_receptacle']} | {fas['incomplete']} | {fas['regress']} | {f['spearman_per_frame']} | "
            f"{f['mae']} | {c.get('calls', 0)} | {c.get('tokens', 0)} | {c.get('parse_failures', 0)} |"
        )
    if dial:
        lines += [
            "",
            f"Bias dial (biased:ε, ε = {dial['eps']}): τ {dial['tau']} (strictly decreasing: "
            f"{dial['tau_strictly_decreasing']}); wrong object / receptacle failure-as-success "
            f"{dial['wrong_failure_as_success']} (rising: {dial['fas_rising']}).",
        ]
    return "\n".join(lines) + "\n"


def llm_groups(records: Sequence[dict], groups: int, seed: int) -> list[dict]:
    """The records of ``groups`` (task, instruction) groups, a seeded draw (0 = all), in bench order."""
    import random

    keys = sorted({(r["task"], r["paraphrase"]) for r in records})
    if groups and groups < len(keys):
        keys = random.Random(f"{seed}:llm-groups").sample(keys, groups)
    keep = set(keys)
    return [r for r in records if (r["task"], r["paraphrase"]) in keep]


def run_rm_eval(
    frames: FramesConfig,
    cfg: EvalConfig,
    bench_dir: str | Path,
    metrics_path: str | Path,
    report_path: str | Path,
    scores_path: str | Path,
    *,
    llm: Any = None,
    teacher: Any = None,
    cache_dir: str | Path | None = None,
    tiny: dict | None = None,
) -> dict:
    """Every reward model of ``cfg.rms`` on the bench: figures to ``metrics_path`` (headline) and its details
    file, the Markdown table to ``report_path``, per-record scores and rewards to ``scores_path`` (JSONL). The LLM
    reward models (``llm``: the ``dna.llm`` section; ``teacher``: the ``teacher`` section for its openai backend)
    score ``llm.groups`` groups, their answers cached in ``cache_dir``. ``tiny``: the learned tiny models' folders
    (``direct``, ``criterion``) and ``retries`` (``dna/learned.py``)."""
    from embodied_rft.core.atomic import write_jsonl_atomic, write_text_atomic
    from embodied_rft.core.metrics import write_metrics
    from embodied_rft.dna.rms import LLM_RMS, TINY_RMS, make_rm

    chat = None

    def llm_rm(method: str) -> RewardModel:
        nonlocal chat
        from embodied_rft.dna.llm import LLMRewardModel, local_chat, openai_chat
        from embodied_rft.teacher.cache import ResponseCache

        if chat is None:
            cache = ResponseCache(cache_dir) if cache_dir is not None else None
            chat = openai_chat(teacher, cache) if llm.backend == "openai" else local_chat(llm, cache)
        return LLMRewardModel(method, chat, retries=llm.retries, n_samples=llm.n_samples)

    tiny_chats: dict[str, Any] = {}

    def tiny_rm(name: str) -> RewardModel:
        from embodied_rft.dna.learned import CriterionTiny, DirectTiny, tiny_chat

        kind = "direct" if name == "direct_tiny" else "criterion"
        if kind not in tiny_chats:
            tiny_chats[kind] = tiny_chat(str(tiny[kind]))
        if kind == "direct":
            return DirectTiny(tiny_chats[kind], tiny["retries"])
        return CriterionTiny(tiny_chats[kind], tiny["retries"], grounded=name == "criterion_tiny")

    for spec in cfg.rms:  # a bad name, or a model without what it needs, fails before any work
        name = spec.partition(":")[0]
        if name in LLM_RMS and llm is None:
            raise ConfigError(f"dna.eval.rms: {spec!r} needs the dna.llm section")
        if name in TINY_RMS and tiny is None:
            raise ConfigError(f"dna.eval.rms: {spec!r} is a learned model: stage rm_eval_tiny scores it")
        if name not in LLM_RMS and name not in TINY_RMS:
            make_rm(spec)
    records, episodes = read_bench(bench_dir)
    figures, rows = {}, []
    try:
        for spec in cfg.rms:
            is_llm = spec.partition(":")[0] in LLM_RMS
            rm = tiny_rm(spec) if spec in TINY_RMS else make_rm(spec, llm=llm_rm)
            subset = llm_groups(records, llm.groups, llm.seed) if is_llm else records
            model_chat = getattr(rm, "chat", None)
            before = (model_chat.asked, model_chat.hits) if model_chat is not None else None
            figures[spec], rm_rows = evaluate_rm(rm, subset, frames, cfg, episodes)
            if before is not None:  # requests answered by the model, and from the caches (a repeat is free)
                figures[spec]["answers_asked"] = model_chat.asked - before[0]
                figures[spec]["answers_cached"] = model_chat.hits - before[1]
            if is_llm:
                figures[spec]["backend"] = chat.model
                figures[spec]["out_of_range"] = rm.out_of_range
            rows += [{"rm": spec, **row} for row in rm_rows]
    finally:
        for c in [chat, *tiny_chats.values()]:
            if c is not None:
                c.close()
    dial = bias_dial(figures)
    write_jsonl_atomic(scores_path, rows)
    write_text_atomic(report_path, report(figures, dial, len(records)))
    record = {"rms": figures, "bias_dial": dial, "h": frames.h, "success_threshold": cfg.success_threshold}
    write_metrics(metrics_path, record, HEADLINE)
    return record
