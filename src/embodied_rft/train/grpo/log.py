"""Where the local GRPO engine's per-update rows go: history (metrics JSON), plot file, W&B.

Inputs: one flat dict of numbers per optimiser update (see ``engine`` for the keys). Outputs: the rows
kept in memory (and in the checkpoint) for ``metrics/grpo.json``'s ``history``; the plot file for
``dvc plots`` — CSV when the path ends in ``.csv``, else a JSON list of rows; and, when ``report_to``
names it, a Weights & Biases run (offline by default: it writes under the work dir and never touches the
network; ``wandb sync`` uploads it later). A W&B failure is logged and tracking continues without it.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from pathlib import Path
from typing import Any

from embodied_rft.core.atomic import write_text_atomic

log = logging.getLogger(__name__)


def _clean(row: dict) -> dict:
    """Rows as JSON-safe floats (NaN/inf become None so the JSON stays valid)."""
    out = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


class RunTracker:
    """Fan a run's rows out to history, plots and W&B."""

    def __init__(
        self,
        report_to: tuple[str, ...],
        wandb_mode: str,
        wandb_project: str,
        run_dir: str | Path,
        config: dict,
        history: list[dict],
        run_id: str | None = None,
    ) -> None:
        self.history = history
        self.run = None
        self.run_id = run_id
        if "wandb" in report_to and wandb_mode != "disabled":
            try:
                import wandb

                Path(run_dir).mkdir(parents=True, exist_ok=True)
                self.run = wandb.init(
                    project=wandb_project,
                    mode=wandb_mode,
                    dir=str(run_dir),
                    config=config,
                    id=run_id,
                    resume="allow" if run_id else None,
                    job_type="grpo",
                    reinit="finish_previous",
                )
                self.run_id = self.run.id
            except Exception as exc:  # noqa: BLE001 - tracking must never stop training
                log.warning("W&B could not start (%s); continuing with metrics/plots only", exc)
                self.run = None

    def log(self, row: dict) -> None:
        row = _clean(row)
        self.history.append(row)
        if self.run is not None:
            try:
                self.run.log({k: v for k, v in row.items() if v is not None}, step=int(row["update"]))
            except Exception as exc:  # noqa: BLE001
                log.warning("W&B log failed (%s); disabling it for this run", exc)
                self.run = None

    def summary(self, values: dict[str, Any]) -> None:
        if self.run is not None:
            try:
                for k, v in values.items():
                    self.run.summary[k] = v
            except Exception as exc:  # noqa: BLE001
                log.warning("W&B summary failed (%s)", exc)

    def write_plots(self, path: str | Path) -> None:
        path = Path(path)
        if path.suffix == ".csv":
            keys: list[str] = []
            for row in self.history:
                keys.extend(k for k in row if k not in keys)
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=keys, restval="")
            w.writeheader()
            for row in self.history:
                w.writerow({k: ("" if v is None else v) for k, v in row.items()})
            write_text_atomic(path, buf.getvalue())
        else:
            write_text_atomic(path, json.dumps(self.history, indent=1) + "\n")

    def close(self) -> None:
        if self.run is not None:
            try:
                self.run.finish()
            except Exception as exc:  # noqa: BLE001
                log.warning("W&B finish failed (%s)", exc)
            self.run = None


class RolloutStats:
    """Means over every response sampled since the last update row (accepted or not). With ``reflection`` (the
    ``regrpo`` reward, or RoT prompts) also the reflection block's tokens per response (``regrpo/text.py``), the
    share of responses that reflect, and the tokens per response on two kinds of prompt whose last action executed:
    "clean" calls (where ReGRPO's η should make reflections rare) and "silent" ones, recovery samples after a
    near-miss that executed (a RoT GroundingDrift state, where a reflection is needed); silent states are not
    clean ones."""

    KEYS = ("total", "structure", "valid", "match", "accuracy", "accuracy_full")

    def __init__(self, reflection: bool = False) -> None:
        self.n = 0
        self.sums = dict.fromkeys(self.KEYS, 0.0)
        self.tokens = 0
        self.truncated = 0
        self.reflection = reflection
        self.refl = self.reflected = self.clean = self.refl_clean = self.silent = self.refl_silent = 0

    def add(
        self, breakdown: Any, n_tokens: int, truncated: bool, refl: int = 0, clean: bool = True, silent: bool = False
    ) -> None:
        self.n += 1
        for k in self.KEYS:
            self.sums[k] += getattr(breakdown, k)
        self.tokens += n_tokens
        self.truncated += int(truncated)
        self.refl += refl
        self.reflected += refl > 0
        self.clean += clean
        self.refl_clean += refl if clean else 0
        self.silent += silent
        self.refl_silent += refl if silent else 0

    def row(self) -> dict[str, float]:
        n = max(self.n, 1)
        out = {f"reward_{k}" if k != "total" else "reward_mean": self.sums[k] / n for k in self.KEYS}
        out["accuracy_full_rate"] = out.pop("reward_accuracy_full")
        out["response_length"] = self.tokens / n
        out["truncated_rate"] = self.truncated / n
        out["responses_sampled"] = self.n
        if self.reflection:
            out["reflection_tokens"] = self.refl / n
            out["reflection_rate"] = self.reflected / n
            out["reflection_tokens_clean"] = self.refl_clean / max(self.clean, 1)
            out["reflection_tokens_silent"] = self.refl_silent / max(self.silent, 1)
        return out


__all__ = ["RolloutStats", "RunTracker"]
