"""What ``dvc repro`` of a study will run, and how long it should take, printed before it starts.

DVC decides what runs (a stage whose deps, params, command or outputs changed, and every stage downstream of one);
this reads that decision from DVC itself (``Stage.changed()`` and the index's graph) rather than re-implementing it.
``dvc repro --dry`` cannot be used for a plan: it stops at the first stage whose inputs another stage has yet to
make. Each step's estimate is its stage's own timing in its metrics (:func:`metrics_seconds`: a lower bound of its
wall time) from the same stage of another seed that finished, else from the workspace's own run of the paper
pipeline; ``unknown`` when neither has one.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from embodied_rft.core.metrics import details_path


def metrics_seconds(stage: str, record: dict[str, Any]) -> float | None:
    """A pipeline stage's own timing in its metrics record; None for a stage that keeps none."""
    try:
        if stage == "sft":
            return float(record["train_time_s"])
        if stage == "verifier":
            return float(record["sft"]["train_time_s"])
        if stage == "grpo":
            return float(record["final"]["elapsed_s"])
        if stage == "distill":
            return float(record["seconds"])
        if stage == "evaluate":
            return float(sum(t.get("interactive_s", 0) + t.get("offline_s", 0) for t in record["timing"].values()))
        if stage == "bon":
            return float(sum(s["wall_s"] for s in record["selectors"].values()))
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    return None


def _seconds(stage: str, metrics_file: Path) -> float | None:
    f = details_path(metrics_file) if details_path(metrics_file).is_file() else metrics_file
    try:
        record = json.loads(f.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return metrics_seconds(stage, record) if isinstance(record, dict) else None


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def plan(dvc_file: Path) -> list[tuple[str, float | None]]:
    """``(stage address, estimated seconds)`` of every stage ``dvc repro dvc_file`` would run, in run order."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(".") as repo, repo.lock:
        stages = repo.stage.collect(dvc_file.as_posix())
        graph = repo.index.graph
        todo = set()
        for st in stages:
            if st.changed():
                todo |= {st} | (nx.ancestors(graph, st) & set(stages))
        order = [st for st in reversed(list(nx.topological_sort(graph))) if st in todo]
        out = []
        for st in order:
            m = re.search(r"-m stages\.(\w+)", st.cmd or "")
            secs = None
            if m is not None:
                mfiles = [Path(o.def_path) for o in st.outs if o.metric]
                secs = _estimate(m.group(1), mfiles[0]) if mfiles else None
            out.append((st.addressing, secs))
    return out


def _estimate(stage: str, metrics_file: Path) -> float | None:
    """The stage's timing from other seeds' runs of the same step (median), else the workspace's own run."""
    parts = metrics_file.as_posix()
    others = []
    for f in sorted(Path(".").glob(re.sub(r"seed-\d+", "seed-*", parts))):
        if f.as_posix() != parts and (x := _seconds(stage, f)) is not None:
            others.append(x)
    if others:
        return statistics.median(others)
    return _seconds(stage, Path("metrics") / metrics_file.name)


def render(steps: list[tuple[str, float | None]]) -> str:
    if not steps:
        return "plan: nothing to run (every stage is up to date)"
    lines = [f"plan: {len(steps)} stages to run"]
    lines += [f"  {name} ({'~' + _duration(s) if s is not None else 'unknown'})" for name, s in steps]
    known = [s for _, s in steps if s is not None]
    unknown = len(steps) - len(known)
    lines.append(
        f"estimate: ~{_duration(sum(known))} for {len(known)} of the {len(steps)} stages"
        + (f", plus {unknown} of unknown duration" if unknown else "")
        + " (the stages' own timings in finished runs' metrics: other seeds, else the workspace's run)"
    )
    return "\n".join(lines)
