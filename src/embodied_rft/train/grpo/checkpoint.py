"""Resumable state of the local GRPO engine, and the atomic save of the final model.

Inputs/outputs: a work directory (``paths.work_dir``/grpo, not tracked by DVC) holding numbered checkpoint
folders ``ckpt-<updates>/`` and a ``latest`` pointer file; the final model folder (``models/grpo``).

A checkpoint holds everything a killed run needs to continue as if it had not stopped: the policy weights,
the AdamW moments and the LR schedule, the Python/torch RNG states, the engine's counters and prompt cursor
(:class:`EngineState`), and the filter's group buffer with the accepted groups it still holds (their
sampling-time log-probs included). It is written into a fresh folder, then the ``latest`` pointer is
replaced atomically, then older folders are removed — a kill at any moment leaves a loadable checkpoint.
A checkpoint records a fingerprint of the run's config and inputs; a checkpoint with another fingerprint
is ignored (with a warning), so a changed config never resumes into a stale run.

Nothing is unpickled: the weights are ``policy.safetensors``; the trainer state is read by ``torch.load`` with
``weights_only=True``, which builds only tensors, plain containers and the engine's own dataclasses listed in
:data:`STATE_TYPES` (an extension whose objects enter the buffer adds its classes with
:func:`register_state_types`). Every file is sealed in ``checksums.sha256`` (:mod:`embodied_rft.core.integrity`)
before the folder is published; a checkpoint whose bytes changed since (a flipped byte in the weights or the
state) is not resumed: the run starts afresh and says why, rather than training on from damaged weights.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from embodied_rft.core.atomic import write_text_atomic
from embodied_rft.core.digest import json_digest
from embodied_rft.core.integrity import IntegrityError, seal_folder, verify_folder
from embodied_rft.filtering import FilterConfig, FilterStats, GroupBuffer

log = logging.getLogger(__name__)

_LATEST = "latest"
_STATE = "trainer_state.pt"
_WEIGHTS = "policy.safetensors"


@dataclass
class EngineState:
    """Counters and cursor of a run (everything resumable besides weights, optimizer and buffer)."""

    updates: int = 0  # optimiser updates done
    buffers: int = 0  # buffers (N_B groups, or a flushed partial one) optimised
    episode: int = 0  # pass over the training prompts
    cursor: int = 0  # next position in this episode's prompt order
    calls: int = 0  # generation calls made (seeds the sampler)
    prompts_sampled: int = 0
    responses_sampled: int = 0
    response_tokens: int = 0
    row_steps: int = 0  # rows the fast sampler decoded, summed over steps (0 with generate)
    prompts_truncated: int = 0
    groups_trained: int = 0  # groups that went through at least one update
    zero_adv_groups_trained: int = 0  # of those, groups whose advantages were all 0 (the filter removes them)
    anchored_groups: int = 0  # groups given constructed members (grpo.anchors), offered to the filter
    exhausted: bool = False  # the prompt stream ran out (num_episodes passes done)
    seconds: dict[str, float] = field(
        default_factory=lambda: {
            "generate": 0.0,
            "reward": 0.0,
            "logprob": 0.0,
            "update": 0.0,
            "eval": 0.0,
            "checkpoint": 0.0,
        }
    )
    eval_before: dict | None = None
    history: list[dict] = field(default_factory=list)
    last_saved: int = 0  # updates at the last checkpoint
    wandb_id: str | None = None


#: Classes the trainer state may hold besides tensors and plain containers (see the module docstring); the engine
#: adds its group types (``train/grpo/engine.py``).
STATE_TYPES: list[type] = [EngineState, GroupBuffer, FilterConfig, FilterStats]


def fingerprint(obj: Any) -> str:
    """A stable 16-digit hash of a JSON-able description of the run (config, inputs)."""
    return json_digest(obj, 16)


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    work_dir: str | Path,
    fp: str,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    state: EngineState,
    buffer: Any,
    keep: int = 1,
) -> Path:
    """Write ``ckpt-<updates>/`` and point ``latest`` at it; keep the newest ``keep`` folders."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    # a run killed mid-save leaves its temp folder (weights + optimizer: ~3x the model size); only this
    # process writes checkpoints into work_dir, so any such folder is a dead run's
    for stale in work_dir.glob(".ckpt-*"):
        shutil.rmtree(stale, ignore_errors=True)
    name = f"ckpt-{state.updates:07d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=work_dir))
    save_model(model, str(tmp / _WEIGHTS))  # tied weights (embeddings = LM head) are stored once
    torch.save(
        {
            "fingerprint": fp,
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_state(),
            "state": state,
            "buffer": buffer,
        },
        tmp / _STATE,
    )
    seal_folder(tmp)
    final = work_dir / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_text_atomic(work_dir / _LATEST, name + "\n")
    old = sorted(p for p in work_dir.glob("ckpt-*") if p.is_dir() and p.name != name)
    for p in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    log.info("checkpoint %s (update %d)", final, state.updates)
    return final


def load_checkpoint(work_dir: str | Path, fp: str) -> tuple[Path, dict] | None:
    """The latest checkpoint's folder and trainer state, or None (none there, another run's, or damaged)."""
    pointer = Path(work_dir) / _LATEST
    if not pointer.exists():
        return None
    folder = Path(work_dir) / pointer.read_text().strip()
    if not (folder / _STATE).exists() or not (folder / _WEIGHTS).exists():
        log.warning("checkpoint pointer %s names %s, which is incomplete; starting fresh", pointer, folder)
        return None
    try:
        sealed = verify_folder(folder, "the checkpoint is not resumed")
    except IntegrityError as exc:
        log.warning("checkpoint damaged: %s; starting fresh", exc)
        return None
    if not sealed:
        log.warning("checkpoint %s has no checksums (written by an older version); starting fresh", folder)
        return None
    try:
        with torch.serialization.safe_globals(list(STATE_TYPES)):
            blob = torch.load(folder / _STATE, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, EOFError, RuntimeError, AttributeError) as exc:
        # written by another version of this code (a renamed or unregistered class): not resumable
        log.warning(
            "checkpoint %s cannot be read by this version (%s: %s); starting fresh",
            folder,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
        )
        return None
    if blob.get("fingerprint") != fp:
        log.warning(
            "checkpoint %s belongs to another run (config or inputs changed: %s != %s); starting fresh",
            folder,
            blob.get("fingerprint"),
            fp,
        )
        return None
    return folder, blob


def load_weights(folder: Path, model: Any) -> None:
    missing, unexpected = load_model(model, str(folder / _WEIGHTS), strict=True)
    if missing or unexpected:  # strict raises first; kept for a clear message should that change
        raise RuntimeError(f"{folder / _WEIGHTS}: missing {missing}, unexpected {unexpected}")


def register_state_types(*classes: type) -> None:
    """Allow objects of ``classes`` in the trainer state (e.g. an extension's group type in the buffer)."""
    for cls in classes:
        if cls not in STATE_TYPES:
            STATE_TYPES.append(cls)


__all__ = [
    "STATE_TYPES",
    "EngineState",
    "fingerprint",
    "load_checkpoint",
    "load_weights",
    "register_state_types",
    "save_checkpoint",
    "set_rng_state",
]
