"""Resumable SFT work folders: which run a folder belongs to, and where to resume from.

Inputs: the settings that decide the training trajectory (config, base model files, data file) and the
work folder. Output: the checkpoint to resume from (or None), after making sure the folder belongs to this
exact run. A checkpoint left by a run with different settings, data or base model is never resumed: the
folder is cleared instead, and the reason logged. Settings that do not change the trajectory (logging,
checkpoint frequency, tracking, the held-out check) are left out of the fingerprint, so changing them does
not throw away hours of training.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from embodied_rft.config import as_dict
from embodied_rft.core.atomic import write_text_atomic
from embodied_rft.core.digest import file_digest, folder_digests
from embodied_rft.core.integrity import IntegrityError, verify_folder
from embodied_rft.train.sft.config import SFTConfig

log = logging.getLogger(__name__)

FINGERPRINT = "run_fingerprint.json"
# Fields that never change what is trained (the trajectory is the same with any value of them).
_NOT_TRAJECTORY = {
    "save_steps",
    "save_total_limit",
    "resume",
    "keep_checkpoints",
    "logging_steps",
    "report_to",
    "wandb_mode",
    "wandb_project",
    "dataloader_workers",
    "num_threads",
    "val",
}


def run_fingerprint(cfg: SFTConfig, model_dir: Path, data_path: Path) -> dict:
    """What makes two runs the same training run (see the module docstring)."""
    settings = {k: v for k, v in as_dict(cfg).items() if k not in _NOT_TRAJECTORY}
    return {"settings": settings, "model": folder_digests(model_dir), "data": file_digest(data_path)}


def _problem(ckpt: Path) -> str | None:
    """Why ``ckpt`` cannot be resumed from, or None. A checkpoint is complete once it is sealed
    (``checksums.sha256``, written after the trainer saved every file: callbacks.SealCheckpoints) and its bytes
    still match the seal; its state file must parse too (transformers writes it in place, not atomically)."""
    try:
        if not verify_folder(ckpt, "not resumed from"):
            return "it is not sealed (cut short by a kill, or written by an older version)"
    except IntegrityError as exc:
        return f"it is damaged ({exc.path.name}: {exc.problem})"
    try:
        if isinstance(json.loads((ckpt / "trainer_state.json").read_text("utf-8")), dict):
            return None
    except (OSError, ValueError):
        pass
    return "its trainer_state.json is cut short or unreadable"


def _newest_checkpoint(work_dir: Path) -> Path | None:
    """The newest checkpoint that can be resumed from; newer ones that cannot are named in a warning, older ones
    are not checked (each check hashes the whole checkpoint)."""
    steps = [(int(p.name.split("-", 1)[1]), p) for p in work_dir.glob("checkpoint-*") if p.name[11:].isdigit()]
    for _, p in sorted(steps, reverse=True):
        problem = _problem(p)
        if problem is None:
            return p
        log.warning("ignoring checkpoint %s: %s", p, problem)
    return None


def _read_marker(marker: Path) -> dict | None:
    try:
        return json.loads(marker.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def prepare_work_dir(work_dir: Path, fingerprint: dict, resume: str) -> Path | None:
    """Make ``work_dir`` this run's folder; return the checkpoint to resume from, if any."""
    marker = work_dir / FINGERPRINT
    if work_dir.exists():
        reason = None
        if resume == "never":
            reason = "sft.resume=never"
        elif not marker.is_file():
            reason = "it has no run fingerprint"
        elif (old := _read_marker(marker)) is None:
            reason = "its run fingerprint is unreadable"
        elif old != fingerprint:
            reason = "it belongs to a run with other settings, data or base model"
        if reason:
            log.warning("clearing work folder %s: %s", work_dir, reason)
            shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(marker, json.dumps(fingerprint, indent=1, sort_keys=True))  # a kill mid-write must not leave half
    ckpt = _newest_checkpoint(work_dir)
    if ckpt is not None:
        log.info("resuming SFT from %s", ckpt)
    return ckpt
