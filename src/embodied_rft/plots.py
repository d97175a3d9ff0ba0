"""The pipeline's plots as SVG files, drawn here with matplotlib, so ``dvc plots show`` renders offline.

DVC draws tabular plot data with Vega-Lite, whose page loads vega, vega-lite and vega-embed from a CDN: with no
network (this project's promise) the page is blank. Images need no scripts, so the ``plots`` stage draws each
chart once, from the data files the training and evaluation stages write:

- ``plots/sft_loss.svg``: SFT training loss over optimiser steps (``plots/sft_loss.csv``);
- ``plots/grpo.svg``: GRPO's rollout reward, exact-plan rate and online-filter pass rate over updates
  (``plots/grpo.csv``), one panel each;
- ``plots/success_by_subset.svg``: interactive success rate per EB-ALFRED subset, grouped bars with one colour
  per model (``plots/evaluate_success_by_subset.json``; a symbolic-simulator proxy, as the title says).

Output is deterministic for the same data (no dates in the metadata, fixed element ids).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_rft.core.atomic import atomic_open

_SUBSET_ORDER = ("base", "common_sense", "complex_instruction", "spatial", "visual_appearance", "long_horizon")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "embodied_rft", "svg.fonttype": "none", "font.size": 9})
    return plt


def _save(fig: Any, path: str | Path) -> None:
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="svg", metadata={"Date": None}, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)


def read_csv_rows(path: str | Path) -> list[dict[str, float]]:
    """The rows of a metrics CSV as floats (empty cells and non-numbers dropped)."""
    out = []
    with Path(path).open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            vals = {}
            for k, v in row.items():
                try:
                    vals[k] = float(v)
                except (TypeError, ValueError):
                    continue
            out.append(vals)
    return out


def line_panels(
    rows: Sequence[dict[str, float]], x: str, panels: Sequence[tuple[str, str]], title: str, path: str | Path
) -> None:
    """One line panel per ``(column, y-axis label)`` of ``rows`` over column ``x``, stacked, shared x axis."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(6.4, 2.0 * len(panels) + 0.6), sharex=True, squeeze=False)
    for ax, (col, label) in zip(axes[:, 0], panels, strict=True):
        pts = [(r[x], r[col]) for r in rows if x in r and col in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], linewidth=1.2, color="#1f77b4")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(x)
    axes[0, 0].set_title(title)
    _save(fig, path)


def grouped_bars(rows: Sequence[dict[str, Any]], title: str, path: str | Path) -> None:
    """Success rate (%) per subset, one bar per model in each group, one colour per model, with a legend."""
    plt = _pyplot()
    models = list(dict.fromkeys(r["model"] for r in rows))
    present = {r["subset"] for r in rows}
    subsets = [s for s in _SUBSET_ORDER if s in present] + sorted(present - set(_SUBSET_ORDER))
    value = {(r["model"], r["subset"]): float(r["success_rate"]) for r in rows}
    width = 0.8 / max(1, len(models))
    fig, ax = plt.subplots(figsize=(8.0, 3.2))
    for i, m in enumerate(models):
        xs = [j + (i - (len(models) - 1) / 2) * width for j in range(len(subsets))]
        ax.bar(xs, [value.get((m, s), 0.0) for s in subsets], width, label=m, color=f"C{i}")
    ax.set_xticks(range(len(subsets)), subsets, rotation=20, ha="right")
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(title="model", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def render_pipeline_plots(plots_dir: str | Path) -> list[Path]:
    """Draw the three SVGs (module docstring) from the data files in ``plots_dir``; returns their paths."""
    d = Path(plots_dir)
    out = [d / "sft_loss.svg", d / "grpo.svg", d / "success_by_subset.svg"]
    line_panels(read_csv_rows(d / "sft_loss.csv"), "step", [("loss", "training loss")], "SFT loss", out[0])
    line_panels(
        read_csv_rows(d / "grpo.csv"),
        "update",
        [
            ("reward_mean", "rollout reward (max 1.5)"),
            ("accuracy_full_rate", "exact-plan rate"),
            ("filter_pass_rate", "filter pass rate"),
        ],
        "GRPO rollouts",
        out[1],
    )
    rows = json.loads((d / "evaluate_success_by_subset.json").read_text("utf-8"))
    grouped_bars(rows, "Success by EB-ALFRED subset (symbolic-simulator proxy)", out[2])
    return out


__all__ = ["grouped_bars", "line_panels", "read_csv_rows", "render_pipeline_plots"]
