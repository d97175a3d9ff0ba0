"""What every stage entry point shares: paths, output redirection for sweeps, seeding, logging.

Inputs: the composed config (Hydra's ``conf/`` by hand, DVC's generated ``params.yaml`` under DVC).
Outputs: a :class:`StageContext` whose ``paths`` say where the stage reads and writes.

Paths are written once, in the ``paths:`` section of ``conf/config.yaml``; ``dvc.yaml`` templates its deps
and outs from the same keys of ``params.yaml``. A Hydra multirun (``python -m stages.grpo -m ...``) must
never overwrite DVC-tracked outputs: Hydra 1.3 does not change the working directory, so in multirun mode
the stage's *outputs* are re-rooted under the job's ``hydra.runtime.output_dir`` while its inputs are still
read from the pipeline's tracked paths.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import build, check, to_plain
from .core import plugins

log = logging.getLogger(__name__)


def compose_text(config_dir: str | Path = "conf", overrides: list[str] | None = None) -> str:
    """``conf/`` composed with ``overrides`` into the YAML DVC would write for them (``params.yaml`` without its
    header; ``make params``)."""
    import tempfile

    from dvc.utils.hydra import compose_and_dump

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "params.yaml"
        compose_and_dump(out, str(Path(config_dir).resolve()), None, "config", "", list(overrides or []))
        return out.read_text("utf-8")


def compose(config_dir: str | Path = "conf", overrides: list[str] | None = None) -> dict[str, Any]:
    """:func:`compose_text`, read."""
    import yaml

    return yaml.safe_load(compose_text(config_dir, overrides))


@dataclass(frozen=True)
class Paths:
    # normalised episodes, one <split>.jsonl each (prepare)
    episodes_dir: str = "data/episodes"
    # per-step RFT samples {train,val}.jsonl + images/ (decompose)
    decomposed_dir: str = "data/decomposed"
    # teacher-distilled chat records (distill)
    distilled: str = "data/distilled/sft.jsonl"
    # persistent teacher-answer cache; survives reruns so no answer is paid for twice (distill)
    teacher_cache: str = "data/teacher_cache"
    # untrained policy: tiny model + locally trained tokenizer, or a converted checkpoint (base)
    base_model: str = "models/base"
    # SFT checkpoint (sft)
    sft_model: str = "models/sft"
    # GRPO checkpoint (grpo)
    grpo_model: str = "models/grpo"
    # per-stage metrics JSON for `dvc metrics show`
    metrics_dir: str = "metrics"
    # plot data for `dvc plots show`
    plots_dir: str = "plots"
    # markdown reports (evaluation table)
    reports_dir: str = "reports"
    # resumable work dirs (checkpoints, per-episode results); not a DVC output
    work_dir: str = ".cache/work"
    # verification records {train,val}.jsonl (synth)
    verify_dir: str = "data/verify"
    # persistent teacher-answer cache of the verification chains of thought (synth with synth.cot=teacher)
    verify_cache: str = "data/verify_cache"
    # the trained verifier (verifier)
    verifier_model: str = "models/verifier"
    # D&A's reward benchmark: bench.jsonl and the episodes it uses, tasks.jsonl (rm_bench)
    rm_bench_dir: str = "data/rm_bench"
    # persistent answer cache of the LLM reward models, kept across reruns (rm_eval)
    rm_cache: str = "data/rm_cache"
    # D&A's learned tiny reward models: frames -> progress, instruction -> criterion (rm_train)
    rm_direct_model: str = "models/rm_direct"
    rm_criterion_model: str = "models/rm_criterion"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            check(isinstance(v, str) and bool(v), f"paths.{f.name}", f"must be a non-empty path, got {v!r}")

    @classmethod
    def from_config(cls, section: Any) -> Paths:
        """Pipeline paths are relative to the repo root: DVC tracks only paths inside the repository."""
        paths = build(cls, section, "paths")
        for f in dataclasses.fields(paths):
            v = getattr(paths, f.name)
            check(not os.path.isabs(v), f"paths.{f.name}", f"must be a non-empty relative path, got {v!r}")
        return paths

    def metrics(self, stage: str) -> Path:
        return Path(self.metrics_dir) / f"{stage}.json"

    def plot(self, name: str) -> Path:
        return Path(self.plots_dir) / name


# Which path keys each stage writes (everything else it only reads).
STAGE_OUTPUTS: dict[str, tuple[str, ...]] = {
    "prepare": ("episodes_dir", "metrics_dir"),
    "decompose": ("decomposed_dir", "metrics_dir"),
    "distill": ("distilled", "metrics_dir"),
    "base": ("base_model", "metrics_dir"),
    "sft": ("sft_model", "metrics_dir", "plots_dir", "work_dir"),
    "grpo": ("grpo_model", "metrics_dir", "plots_dir", "work_dir"),
    "evaluate": ("metrics_dir", "plots_dir", "reports_dir", "work_dir"),
    "plots": ("plots_dir",),
    "synth": ("verify_dir", "verify_cache", "metrics_dir"),
    "verifier": ("verifier_model", "metrics_dir", "plots_dir", "work_dir"),
    "bon": ("metrics_dir", "plots_dir", "reports_dir", "work_dir"),
    "rm_bench": ("rm_bench_dir", "metrics_dir"),
    "rm_eval": ("metrics_dir", "reports_dir", "rm_cache"),
    "rm_train": ("rm_direct_model", "rm_criterion_model", "metrics_dir", "plots_dir", "work_dir"),
    "rm_eval_tiny": ("metrics_dir", "reports_dir"),
}


@dataclass(frozen=True)
class StageContext:
    stage: str
    paths: Paths
    seed: int
    cfg: dict[str, Any]
    multirun_dir: str | None = None

    def section(self, name: str) -> Any:
        if name not in self.cfg:
            from .config import ConfigError

            raise ConfigError(f"{name}: section missing from the config (is params.yaml stale? run `make params`)")
        return self.cfg[name]


def _hydra_multirun_dir() -> str | None:
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
    except ImportError:  # pragma: no cover
        return None
    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        return str(hc.runtime.output_dir)
    return None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover
        pass
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover
        pass


def setup_logging(level: str | int = "INFO") -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", force=True
    )


def stage_context(cfg: Any, stage: str, multirun_dir: str | None = None) -> StageContext:
    """Turn a composed config into the stage's context; re-root outputs for Hydra multirun jobs."""
    plain = to_plain(cfg)
    if not isinstance(plain, dict):
        raise TypeError(f"config must be a mapping, got {type(plain).__name__}")
    check(stage in STAGE_OUTPUTS, "stage", f"unknown stage {stage!r}; known: {sorted(STAGE_OUTPUTS)}")
    paths = Paths.from_config(plain.get("paths", {}))
    seed = plain.get("seed", 0)
    check(
        isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0,
        "seed",
        f"must be an integer >= 0, got {seed!r}",
    )
    mr = multirun_dir if multirun_dir is not None else _hydra_multirun_dir()
    if mr:
        moved = {k: str(Path(mr) / getattr(paths, k)) for k in STAGE_OUTPUTS[stage]}
        paths = dataclasses.replace(paths, **moved)
        log.info("multirun job: outputs of %s go under %s", stage, mr)
    setup_logging(os.environ.get("EMBODIED_RFT_LOG_LEVEL", "INFO"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    seed_everything(seed)
    plugins.use(plain.get("plugins"))  # where the extensions the config names are loaded from (core/plugins.py)
    return StageContext(stage=stage, paths=paths, seed=seed, cfg=plain, multirun_dir=mr)


def lineage(
    lock_path: str | Path = "dvc.lock", params: dict | None = None, used: list[str] | None = None
) -> dict[str, Any]:
    """Where a result came from: the content hashes DVC recorded (``dvc.lock``) for every upstream stage's
    outputs (episodes, decomposed data, distilled data, teacher cache, checkpoints) and params, the hash of
    the params this run used, and the git commit. Read while ``dvc repro`` runs, dvc.lock already holds the
    finished upstream stages, so every number in a metrics file can be traced to the artifacts behind it."""
    import subprocess

    import yaml

    from embodied_rft.core.digest import json_digest

    out: dict[str, Any] = {"dvc_lock": None, "stages": {}}
    lock = Path(lock_path)
    stages = ((yaml.safe_load(lock.read_text("utf-8")) or {}).get("stages") or {}) if lock.exists() else {}
    lock_outs = {str(o.get("path")) for st in stages.values() for o in st.get("outs") or []}
    foreign = sorted(str(u) for u in used or () if str(u) not in lock_outs)
    if lock.exists() and foreign:
        # ``used``: the artifacts this run read; one that dvc.lock does not list (a by-hand run with other
        # paths, e.g. ``make seeds``) means the lock describes other files, so it is not quoted.
        out["not_from_dvc_lock"] = foreign
    elif lock.exists():
        out["dvc_lock"] = str(lock)
        for name, st in stages.items():
            out["stages"][name] = {
                "outs": {o["path"]: o.get("md5") or o.get("hash") for o in st.get("outs") or []},
                "params_sha256": json_digest(st.get("params") or {}, 16),
            }
    if params is not None:
        out["params_sha256"] = json_digest(params, 16)
    try:
        out["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        out["git_commit"] = None
    return out
