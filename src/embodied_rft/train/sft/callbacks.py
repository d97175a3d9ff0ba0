"""Trainer callbacks of the SFT stage: throughput of this session, the held-out check during training, and the
seal of each checkpoint.

:class:`Throughput` records wall time and non-padding input tokens from the start of this session's
training loop (after a resume, the steps done before the kill are not counted again). :class:`ValCheck`
runs :func:`format_metrics` every ``every_steps`` optimiser steps on the live model and logs the rates
(they appear in W&B / TensorBoard next to the loss, and in ``trainer.state.log_history``). :class:`SealCheckpoints`
writes ``checksums.sha256`` into each ``checkpoint-<step>`` folder once the trainer has saved it (every process
has finished writing), so :mod:`.resume` resumes only from a checkpoint whose bytes are as written.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist
from transformers import TrainerCallback

from embodied_rft.core.integrity import seal_folder
from embodied_rft.train.sft.heldout import ValPrompt, format_metrics

log = logging.getLogger(__name__)


class Throughput(TrainerCallback):
    """Wall time, steps and input tokens of this session's training loop."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.tokens0 = 0
        self.step0 = 0
        self.seconds = 0.0
        self.tokens = 0
        self.steps = 0

    def on_train_begin(self, args, state, control, **kwargs):
        # a resumed run's state (step, tokens seen) is restored before this call: count from here
        self.t0 = time.perf_counter()
        self.tokens0 = int(state.num_input_tokens_seen or 0)
        self.step0 = int(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        self._update(state)

    def on_train_end(self, args, state, control, **kwargs):
        self._update(state)

    def _update(self, state) -> None:
        if self.t0 is None:
            return
        self.seconds = time.perf_counter() - self.t0
        self.steps = int(state.global_step) - self.step0
        self.tokens = int(state.num_input_tokens_seen or 0) - self.tokens0


class SealCheckpoints(TrainerCallback):
    """Seal ``<output_dir>/checkpoint-<step>`` after the trainer saved it (main process; after a barrier)."""

    def on_save(self, args, state, control, **kwargs):
        if dist.is_available() and dist.is_initialized():
            dist.barrier()  # every process wrote its part (its rng_state_<rank>.pth) before the digests
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                seal_folder(folder)


class ValCheck(TrainerCallback):
    """The held-out JSON-format check every ``every_steps`` optimiser steps (main process only)."""

    def __init__(
        self, processing_class: Any, prompts: list[ValPrompt], every_steps: int, max_new_tokens: int, batch_size: int
    ) -> None:
        self.tok = processing_class
        self.prompts = prompts
        self.every = every_steps
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if not self.every or state.global_step % self.every or not state.is_world_process_zero or model is None:
            return
        res = format_metrics(
            model, self.tok, self.prompts, max_new_tokens=self.max_new_tokens, batch_size=self.batch_size
        )
        state.log_history.append(
            {
                "step": state.global_step,
                "val_json_valid_rate": res["json_valid_rate"],
                "val_format_rate": res["format_rate"],
            }
        )
        log.info(
            "step %d held-out check: json %.2f, EB keys %.2f",
            state.global_step,
            res["json_valid_rate"],
            res["format_rate"],
        )
