"""Where a study's runs live and what it records: the folders (``runs/<study>/seed-<s>/<arm>/``,
``studies/<name>/``, ``results/<name>/``), each arm's paths (what it does not make comes from the arm it starts from
or its ``inputs``), its evaluation runs and the file each outcome is read from, and the resolved study a table
records as its ``spec``. The DVC pipeline built on them is :mod:`.dvcgen`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from embodied_rft.study.registry import READERS
from embodied_rft.study.spec import Eval, Study

SEED = "${item}"  # DVC's foreach variable


def studies_dir(study: Study) -> Path:
    return Path("studies") / study.name


def results_dir(study: Study) -> Path:
    return Path("results") / study.name


def arm_dir(study: Study, arm: str, seed: int | str = SEED) -> str:
    return f"runs/{study.name}/seed-{seed}/{arm}"


@dataclass(frozen=True)
class Pipeline:
    """The paper pipeline's ``dvc.yaml`` stages and ``conf/config.yaml``'s paths: what a study's stages copy."""

    stages: dict[str, dict[str, Any]]
    paths: dict[str, str]

    @classmethod
    def read(cls, dvc_file: Path = Path("dvc.yaml"), conf_file: Path = Path("conf/config.yaml")) -> Pipeline:
        stages = (yaml.safe_load(dvc_file.read_text("utf-8")) or {}).get("stages") or {}
        paths = (yaml.safe_load(conf_file.read_text("utf-8")) or {}).get("paths") or {}
        return cls(stages, paths)

    def producer(self, key: str) -> str | None:
        """The stage whose outs are exactly ``${paths.<key>}``."""
        for name, st in self.stages.items():
            if f"${{paths.{key}}}" in [entry_name(o) for o in st.get("outs") or []]:
                return name
        return None


def entry_name(entry: Any) -> str:
    return next(iter(entry)) if isinstance(entry, dict) else str(entry)


def arm_paths(study: Study, pipe: Pipeline, arm: str, seed: int | str = SEED) -> dict[str, str | None]:
    """``{path key: path}`` for one arm (None: no arm of its chain makes it)."""
    a = study.arms[arm]
    out: dict[str, str | None] = {}
    for key, rel in pipe.paths.items():
        stage = pipe.producer(key)
        if stage is None or stage in a.stages:
            out[key] = f"{arm_dir(study, arm, seed)}/{rel}"
        elif key in a.inputs:
            src, src_key = a.inputs[key].split(".")
            out[key] = arm_paths(study, pipe, src, seed).get(src_key)
        elif a.start is not None:
            out[key] = arm_paths(study, pipe, a.start, seed)[key]
        else:
            out[key] = None
    return out


def eval_runs(study: Study, arm: str) -> dict[str, list[Eval]]:
    """The arm's evaluation runs in the study's modes: ``{folder: [evals]}``, evals of one stage with the same
    overrides sharing one run (folder ``<stage>`` when one run serves the stage, else ``<stage>-<mode>``)."""
    evals = [e for e in study.arms[arm].evals.values() if study.modes is None or e.mode in study.modes]
    groups: dict[tuple[str, tuple[str, ...]], list[Eval]] = {}
    for e in evals:
        groups.setdefault((e.stage, e.overrides), []).append(e)
    per_stage = {st: sum(1 for s, _ in groups if s == st) for st, _ in groups}
    return {(st if per_stage[st] == 1 else f"{st}-{es[0].mode}"): es for (st, _), es in groups.items()}


def outcome_file(study: Study, arm: str, mode: str, seed: int | str = SEED) -> str:
    """The file the table reads for outcome ``<arm>/<mode>`` of one seed."""
    for folder, es in eval_runs(study, arm).items():
        for e in es:
            if e.mode == mode:
                reader = READERS.get_or_fail(e.reader_name, f"{study.file}: arms.{arm}.evals.{mode}.stage")
                return f"{arm_dir(study, arm, seed)}/{folder}/metrics/{reader.file}"  # type: ignore[attr-defined]
    raise KeyError(f"{study.file}: {arm}/{mode}: not an outcome of this study")


def chain_overrides(study: Study, arm: str) -> list[str]:
    """The study's overrides, then each arm's of the chain from the farthest start to ``arm``."""
    return [*study.overrides, *(o for a in reversed(study.chain(arm)) for o in study.arms[a].overrides)]


def resolved(s: Study) -> dict[str, Any]:
    """The study as the table records it (its ``spec``): what makes two tables poolable."""
    return {
        "study": s.name,
        "overrides": list(s.overrides),
        "arms": {
            a: {
                "from": s.arms[a].start,
                "stages": list(s.arms[a].stages),
                "overrides": list(s.arms[a].overrides),
                "inputs": dict(s.arms[a].inputs),
                "evals": {m: [e.stage, e.read, list(e.overrides), e.reader_name] for m, e in s.arms[a].evals.items()},
                "tasks": list(s.arms[a].tasks),
            }
            for a in s.needed()
        },
        "run": list(s.run),
        "modes": list(s.modes) if s.modes else None,
        "comparisons": [c.__dict__ for c in s.comparisons],
        "checks": [c.__dict__ for c in s.checks],
        "sections": [[n, a] for n, a in s.sections],
    }
