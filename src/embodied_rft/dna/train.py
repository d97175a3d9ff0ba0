"""Stage ``rm_train``'s work: D&A's learned tiny reward models (``dna/learned.py``) trained with the project's SFT
(TRL's ``SFTTrainer``, ``train/sft/trainer.py``) on the optimal trajectories of ``dna.train.split``."""

from __future__ import annotations

import time
from typing import Any

from embodied_rft.dna.learned import training_records

TRAIN_HEADLINE = {"*": {"records": True, "final_loss": True, "minutes": True}}


def run_rm_train(
    cfg: Any,
    h: int,
    episodes_path: str,
    init_dir: str,
    out_dirs: dict[str, str],
    metrics_path: str,
    plots_dir: str,
    work_dir: str,
) -> dict:
    """Train ``direct_tiny`` and ``criterion_tiny`` (``out_dirs``: name -> model folder) from ``init_dir`` on the
    optimal trajectories of ``episodes_path`` (``dna.train``); each run resumes from its sealed checkpoints."""
    from pathlib import Path

    from embodied_rft.core.atomic import write_jsonl_atomic
    from embodied_rft.core.metrics import write_metrics
    from embodied_rft.train.sft.trainer import run_sft
    from embodied_rft.world.episode import read_episodes

    episodes = read_episodes(episodes_path)
    if cfg.episodes:
        episodes = episodes[: cfg.episodes]
    data = dict(zip(("direct", "criterion"), training_records(episodes, h, cfg.prefixes, cfg.seed), strict=True))
    work = Path(work_dir) / "rm_train"
    record: dict[str, Any] = {}
    for name, sft_cfg in (("direct", cfg.direct_sft), ("criterion", cfg.criterion_sft)):
        path = work / f"{name}.jsonl"
        write_jsonl_atomic(path, data[name])
        t0 = time.perf_counter()
        m = run_sft(
            sft_cfg,
            init_dir,
            path,
            out_dirs[name],
            work / f"{name}_metrics.json",
            Path(plots_dir) / f"rm_{name}_loss.csv",
            work_dir=work / f"{name}_checkpoints",
        )
        record[name] = {
            "records": len(data[name]),
            "episodes": len(episodes),
            "steps": m.get("steps"),
            "first_loss": m.get("first_loss"),
            "final_loss": m.get("final_loss"),
            "tokens_per_s": m.get("tokens_per_s"),
            "minutes": round((time.perf_counter() - t0) / 60, 2),
            "init_dir": str(init_dir),
        }
    write_metrics(metrics_path, record, TRAIN_HEADLINE)
    return record
