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

from embodied_rft.core.atomic import write_text_atomic
from embodied_rft.core.digest import json_digest

log = logging.getLogger(__name__)

_LATEST = "latest"
_STATE = "trainer_state.pt"
_WEIGHTS = "policy.pt"


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
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp / _WEIGHTS)
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
    """The latest checkpoint's folder and trainer state, or None (none there, or another run's)."""
    pointer = Path(work_dir) / _LATEST
    if not pointer.exists():
        return None
    folder = Path(work_dir) / pointer.read_text().strip()
    if not (folder / _STATE).exists() or not (folder / _WEIGHTS).exists():
        log.warning("checkpoint pointer %s names %s, which is incomplete; starting fresh", pointer, folder)
        return None
    # our own files (pickled dataclasses and the buffer), never a downloaded artifact
    try:
        blob = torch.load(folder / _STATE, map_location="cpu", weights_only=False)
    except (ModuleNotFoundError, AttributeError, pickle.UnpicklingError, EOFError, RuntimeError) as exc:
        # written by another version of this code (a renamed module or class) or cut short: not resumable
        log.warning(
            "checkpoint %s cannot be read by this version (%s: %s); starting fresh", folder, type(exc).__name__, exc
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
    model.load_state_dict(torch.load(folder / _WEIGHTS, map_location="cpu", weights_only=True))


__all__ = [
    "EngineState",
    "fingerprint",
    "load_checkpoint",
    "load_weights",
    "save_checkpoint",
    "set_rng_state",
]
