"""The ``prepare`` stage for ``data.source: alfred``: real ALFRED trajectories -> normalised episodes.

Input: :class:`AlfredConfig` (``config.build(AlfredConfig, data_section, "data")``; the section's
``source`` key is the dispatcher's and is dropped by :meth:`AlfredConfig.from_data_section`).
Output: ``<out_dir>/<split>.jsonl`` for every configured split whose folder exists (``train``,
``valid_seen``, ``valid_unseen``), plus ``<out_dir>/<eb_split_name>.jsonl`` when ``eb_split_file`` is
set, all written atomically; and a metrics dict: counts per split and task type, the replay success
rate of the converted expert plans in the simulator, every failure grouped by reason with its files,
how often each documented conversion departure fired, and (EB split) the agreement with EB's NL Steps.

Per trajectory: read (:mod:`reader`) -> objects and names (:mod:`scene`) -> plan (:mod:`convert`) ->
episodes (:mod:`episodes`) -> replay in the simulator (:mod:`replay`). A file that cannot be read or
converted raises (``on_error: raise``) or is skipped and listed (``skip``). A plan that does not reach
the goal in the simulator never raises: the episode is left out of the ALFRED splits and listed (its
expert plan would be a wrong training target); an EB evaluation episode is kept (EB's 50 per subset
are the benchmark) with ``meta.expert_replay_ok: false``.

Instance numbering: ALFRED does not record EB's instance numbers, and the simulator resolves a plain
name (``find a Book``) by a ranking rather than to instance 1, so the numbering decides whether a plan
is unambiguous there. The plan's instances are numbered in reverse order of first use; when that plan
does not replay, forward order is tried once (``metrics.replay.renumbered`` counts it).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from embodied_rft.alfred.convert import NOTES, Conversion, convert_plan
from embodied_rft.alfred.eb_split import compare_nl_steps, read_eb_split
from embodied_rft.alfred.episodes import base_episode, build_episodes
from embodied_rft.alfred.reader import Trajectory, read_trajectory, spread, trajectory_paths
from embodied_rft.alfred.replay import ReplayResult, replay
from embodied_rft.alfred.scene import PLAN_ORDERS, ConversionError, SceneIndex
from embodied_rft.config import as_dict, build, check, to_plain
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.jsonl import DataError
from embodied_rft.schema import SPLITS
from embodied_rft.world import episode_counts

log = logging.getLogger(__name__)

EB_MAX_STEPS = 30  # EB-ALFRED's episode length limit in environment steps (docs/facts.md §4.3)


@dataclass(frozen=True)
class AlfredConfig:
    # the json_2.1.0 folder of an ALFRED download (`make fetch-alfred`); relative paths are from the
    # working directory (the repo root under DVC). The paper builds its RFT data from ALFRED train.
    alfred_dir: str = "data/alfred/json_2.1.0"
    # ALFRED splits to convert; a split whose folder is absent is skipped and reported in the metrics
    splits: tuple[str, ...] = SPLITS
    # annotations -> episodes: all (one per trajectory, every annotation in meta; the paper's scale),
    # first (one per trajectory, first annotation only), per_annotation (one per annotation, ~3x)
    annotations: Literal["all", "first", "per_annotation"] = "all"
    # a malformed or unconvertible traj_data.json: raise (stop, naming file and field) or skip (list it)
    on_error: Literal["raise", "skip"] = "raise"
    # EmbodiedBench split file ({subset: [records]} or <subset>.json) -> EB-style eval episodes; null: none.
    # The paper evaluates on EB-ALFRED's 6 subsets x 50 episodes drawn from ALFRED valid_seen.
    eb_split_file: str | None = None
    # output split name of those episodes (<out_dir>/<eb_split_name>.jsonl)
    eb_split_name: str = "eb_valid"
    # the ALFRED split the EB records' full_scene_name points into (EB-ALFRED: valid_seen)
    eb_source_split: str = "valid_seen"
    # at most this many trajectories per split, evenly spaced over the sorted list (null: all)
    max_trajectories: int | None = None
    # replay every converted plan in the simulator and keep only plans that reach the goal
    replay: bool = True

    def __post_init__(self) -> None:
        check(len(self.splits) > 0, "data.splits", "list at least one ALFRED split")
        for s in self.splits:
            check(s in SPLITS, "data.splits", f"{s!r} is not one of {list(SPLITS)}")
        check(len(set(self.splits)) == len(self.splits), "data.splits", f"duplicate split in {list(self.splits)}")
        check(
            self.max_trajectories is None or self.max_trajectories > 0,
            "data.max_trajectories",
            f"must be > 0 or null, got {self.max_trajectories}",
        )
        check(
            self.eb_split_name not in SPLITS and re.fullmatch(r"[A-Za-z0-9_.-]+", self.eb_split_name) is not None,
            "data.eb_split_name",
            f"{self.eb_split_name!r} must be a plain file stem other than {list(SPLITS)}",
        )
        check(
            self.eb_source_split in SPLITS,
            "data.eb_source_split",
            f"{self.eb_source_split!r} is not one of {list(SPLITS)}",
        )

    @classmethod
    def from_data_section(cls, data: Any) -> AlfredConfig:
        """Build from the ``data`` config section (its ``source`` key belongs to the dispatcher)."""
        data = dict(to_plain(data) or {})
        data.pop("source", None)
        return build(cls, data, "data")


class _Failures:
    """Failures grouped by reason: {reason: {count, files, example}}."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}

    def add(self, reason: str, file: str, detail: str) -> None:
        g = self.groups.setdefault(reason, {"count": 0, "files": [], "example": detail})
        g["count"] += 1
        g["files"].append(file)

    def as_dict(self) -> dict[str, Any]:
        ordered = sorted(self.groups.items(), key=lambda kv: (-kv[1]["count"], kv[0]))
        return {"total": sum(g["count"] for g in self.groups.values()), "by_reason": dict(ordered)}


def _error_reason(stage: str, exc: DataError) -> str:
    """'read: field 'plan.high_pddl[i].planner_action.objectId' must be str' (path and values dropped)."""
    msg = str(exc).split(": ", 1)[-1]
    msg = re.sub(r"\[\d+\]", "[i]", msg)
    msg = re.sub(r", got .*$", "", msg)
    msg = re.sub(r"'[^']*'$|\(.*\)$", "", msg).strip()
    return f"{stage}: {msg[:120]}"


def convert_checked(
    traj: Trajectory, do_replay: bool = True
) -> tuple[SceneIndex, Conversion, ReplayResult | None, str]:
    """Scene, plan and replay result of one trajectory, trying the instance numberings in turn
    (see the module docstring); returns the first that replays, else the first numbering's result."""
    first = None
    for order in PLAN_ORDERS:
        scene = SceneIndex(traj, plan_order=order)
        conv = convert_plan(traj, scene)
        if not do_replay:
            return scene, conv, None, order
        res = replay(base_episode(traj, scene, conv, traj.split or "x"))
        if res.ok:
            return scene, conv, res, order
        if first is None:
            first = (scene, conv, res, order)
    assert first is not None
    return first


def _stage_for(exc: DataError) -> str:
    return "convert" if isinstance(exc, ConversionError) else "read"


def run_prepare_alfred(cfg: AlfredConfig, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Convert the configured ALFRED splits (and EB split file) into episodes under ``out_dir``."""
    t0 = time.perf_counter()
    root = Path(cfg.alfred_dir)
    if not root.is_dir():
        raise DataError(f"data.alfred_dir: {root} is not a directory (download ALFRED with `make fetch-alfred`)")
    out = Path(out_dir)
    failures = _Failures()
    notes: Counter[str] = Counter()
    unaddressable: Counter[str] = Counter()
    inferred: Counter[str] = Counter()
    metrics: dict[str, Any] = {"alfred_dir": str(root), "config": as_dict(cfg), "splits": {}, "missing_splits": []}
    replay_total = replay_ok = renumbered = 0
    by_type_total: Counter[str] = Counter()
    by_type_ok: Counter[str] = Counter()

    def handle(exc: DataError, stage: str, rel: str) -> None:
        if cfg.on_error == "raise":
            raise exc
        failures.add(_error_reason(stage, exc), rel, str(exc))
        log.warning("skipped %s: %s", rel, exc)

    for split in cfg.splits:
        if not (root / split).is_dir():
            metrics["missing_splits"].append(split)
            log.warning("ALFRED split %s not found under %s; skipped", split, root)
            continue
        paths = spread(trajectory_paths(root, split), cfg.max_trajectories)
        episodes: list[dict[str, Any]] = []
        counts: Counter[str] = Counter()
        tt_counts: dict[str, Counter[str]] = defaultdict(Counter)
        # disable=None: a progress bar on a terminal, silent in logs and under DVC's captured output
        for task_dir, path in tqdm(paths, desc=f"alfred {split}", unit="traj", disable=None, leave=False):
            rel = f"{split}/{task_dir}"
            counts["trajectories"] += 1
            try:
                traj = read_trajectory(path, split=split, task_dir=task_dir)
            except DataError as exc:
                handle(exc, "read", rel)
                continue
            counts["read"] += 1
            tt_counts[traj.task_type]["trajectories"] += 1
            try:
                scene, conv, res, order = convert_checked(traj, cfg.replay)
                eps = build_episodes(traj, scene, conv, cfg.annotations, split)
            except DataError as exc:
                handle(exc, _stage_for(exc), rel)
                continue
            counts["converted"] += 1
            notes.update({n: 1 for n in conv.notes})
            unaddressable.update(scene.dropped_types)
            inferred.update(x["why"] for x in scene.inferred)
            if res is not None:
                replay_total += 1
                by_type_total[traj.task_type] += 1
                if not res.ok:
                    failures.add(f"replay: {res.reason}", rel, res.detail or "")
                    continue
                replay_ok += 1
                by_type_ok[traj.task_type] += 1
                tt_counts[traj.task_type]["replay_ok"] += 1
                renumbered += order != PLAN_ORDERS[0]
            for ep in eps:
                ep["meta"]["instance_numbering"] = order
                if scene.inferred:
                    ep["meta"]["inferred_parents"] = list(scene.inferred)
            episodes.extend(eps)
        write_jsonl_atomic(out / f"{split}.jsonl", episodes)
        log.info(
            "alfred %s: %d trajectories -> %d episodes -> %s",
            split,
            counts["trajectories"],
            len(episodes),
            out / f"{split}.jsonl",
        )
        metrics["splits"][split] = {
            **{k: counts[k] for k in ("trajectories", "read", "converted")},
            "trajectories_by_task_type": {k: dict(v) for k, v in sorted(tt_counts.items())},
            **episode_counts(episodes),
            # EB ends an episode after 30 environment steps: longer expert plans cannot succeed there
            "plans_over_eb_step_limit": sum(len(e["expert_plan"]) > EB_MAX_STEPS for e in episodes),
        }

    if replay_total:
        metrics["replay"] = {
            "trajectories": replay_total,
            "ok": replay_ok,
            "success_rate": round(replay_ok / replay_total, 5),
            "renumbered": renumbered,
            "success_rate_by_task_type": {t: round(by_type_ok[t] / n, 5) for t, n in sorted(by_type_total.items())},
        }
    if cfg.eb_split_file:
        metrics["eb"] = _prepare_eb(cfg, root, out, failures, handle)
    metrics["conversion_notes"] = {n: notes[n] for n in NOTES}
    metrics["inferred_parents"] = dict(sorted(inferred.items()))
    metrics["unaddressable_types"] = dict(sorted(unaddressable.items()))
    metrics["failures"] = failures.as_dict()
    metrics["seconds"] = round(time.perf_counter() - t0, 2)
    return metrics


def _prepare_eb(cfg: AlfredConfig, root: Path, out: Path, failures: _Failures, handle) -> dict[str, Any]:
    """EB-style evaluation episodes with their subset labels, and the NL Steps agreement."""
    records = read_eb_split(cfg.eb_split_file)  # type: ignore[arg-type]
    episodes: list[dict[str, Any]] = []
    cache: dict[str, tuple] = {}
    nl = Counter()
    unexplained: dict[str, list[str]] = {}
    replay_fail = 0
    for rec in records:
        rel = f"{cfg.eb_source_split}/{rec.full_scene_name}"
        try:
            if rel not in cache:
                traj = read_trajectory(
                    root / cfg.eb_source_split / rec.full_scene_name / "traj_data.json",
                    split=cfg.eb_source_split,
                    task_dir=rec.full_scene_name,
                )
                cache[rel] = (traj, *convert_checked(traj, cfg.replay))
            traj, scene, conv, res, order = cache[rel]
            if rec.task_type is not None and rec.task_type != traj.task_type:
                raise DataError(
                    f"{cfg.eb_split_file}: field '{rec.subset}[{rec.index - 1}].task type': "
                    f"{rec.task_type!r} but {rel} is a {traj.task_type}"
                )
        except DataError as exc:
            handle(exc, "eb " + _stage_for(exc), f"{rec.subset}[{rec.index - 1}] {rel}")
            continue
        ep = base_episode(traj, scene, conv, cfg.eb_split_name, subset=rec.subset)
        ep["episode_id"] = f"{cfg.eb_split_name}:{rec.subset}:{rec.index}"
        ep["instruction"] = rec.instruction
        meta = ep["meta"]
        meta.update(repeat_idx=rec.repeat_idx, eb_index=rec.index, instance_numbering=order)
        if rec.repeat_idx < len(traj.annotations):
            meta["alfred_instruction"] = traj.annotations[rec.repeat_idx]
        if res is not None:
            meta["expert_replay_ok"] = res.ok
            if not res.ok:
                replay_fail += 1
                failures.add(f"eb replay: {res.reason}", ep["episode_id"], res.detail or "")
        if rec.nl_steps is not None:
            cmp = compare_nl_steps(conv.plan, rec.nl_steps)
            bad = cmp.unexplained(conv.notes)
            meta["nl_steps"] = list(rec.nl_steps)
            meta["nl_steps_equal"] = cmp.equal
            nl["compared"] += 1
            nl["equal"] += cmp.equal
            nl["documented"] += (not cmp.equal) and not bad
            if bad:
                unexplained[ep["episode_id"]] = bad
        episodes.append(ep)
    write_jsonl_atomic(out / f"{cfg.eb_split_name}.jsonl", episodes)
    res_metrics: dict[str, Any] = {
        "split": cfg.eb_split_name,
        "records": len(records),
        **episode_counts(episodes),
        "plans_over_eb_step_limit": sum(len(e["expert_plan"]) > EB_MAX_STEPS for e in episodes),
        "expert_replay_failures": replay_fail,
    }
    if nl["compared"]:
        res_metrics["nl_steps"] = {
            "compared": nl["compared"],
            "equal": nl["equal"],
            "agreement_rate": round(nl["equal"] / nl["compared"], 5),
            "documented_differences": nl["documented"],
            "unexplained": unexplained,
        }
    return res_metrics
