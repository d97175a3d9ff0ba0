"""The evaluation report: a markdown table laid out like the paper's Table 1, and plot data for ``dvc plots``.

Input: the per-model metrics :func:`~.run.run_evaluate` builds. Outputs:

- :func:`table_rows`: success rate (%) per model for ``avg, base, common, complex, visual, spatial, long``
  (the paper's columns; ``avg`` is the mean over the subsets present, as EB's average over its six equal-size
  subsets);
- :func:`render_markdown`: that table plus the behaviour statistics and the offline metrics, headed
  **symbolic-simulator proxy, not EmbodiedBench numbers** — the rows come from this project's symbolic
  EB-ALFRED simulator on its own held-out episodes, not from AI2-THOR;
- :func:`plot_rows`: ``[{"label", "model", "subset", "success_rate"}]`` for ``dvc plots``: DVC's built-in
  ``bar_horizontal`` template colours bars by revision, not by a field, so each (subset, model) pair is one
  bar, named by ``label`` = ``"<subset> | <model>"`` (``x: success_rate``, ``y: label``).
"""

from __future__ import annotations

from collections.abc import Mapping

PROXY_LABEL = "symbolic-simulator proxy, not EmbodiedBench numbers"

# The paper's Table 1 column names -> our subset names (docs/facts.md §4.4).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("base", "base"),
    ("common", "common_sense"),
    ("complex", "complex_instruction"),
    ("visual", "visual_appearance"),
    ("spatial", "spatial"),
    ("long", "long_horizon"),
)

# docs/facts.md §2, for orientation beside the proxy numbers (EB-ALFRED success %, paper Table 1).
PAPER_ROWS: tuple[tuple[str, tuple[float, ...]], ...] = (
    ("Qwen2.5-VL-7B (base)", (1.7, 4, 2, 2, 2, 0, 0)),
    ("paper's model (7B, SFT+RFT)", (35.6, 54, 42, 46, 28, 38, 6)),
    ("GPT-4o", (54.6, 62, 52, 68, 44, 48, 54)),
)


def table_rows(models: Mapping[str, dict]) -> dict[str, dict[str, float | None]]:
    """``{model: {"avg": ..., "base": ..., ...}}``: success %, None where a subset has no episodes."""
    out = {}
    for name, m in models.items():
        per = (m.get("interactive") or {}).get("per_subset", {})
        row: dict[str, float | None] = {}
        vals = []
        for col, subset in COLUMNS:
            s = per.get(subset)
            v = s["success_rate"] if s and s.get("episodes") else None
            row[col] = v
            if v is not None:
                vals.append(v)
        row_avg = round(sum(vals) / len(vals), 2) if vals else None
        out[name] = {"avg": row_avg, **row}
    return out


def plot_rows(models: Mapping[str, dict]) -> list[dict]:
    rows = []
    for name, m in models.items():
        per = (m.get("interactive") or {}).get("per_subset", {})
        for _, subset in COLUMNS:
            s = per.get(subset)
            if s and s.get("episodes"):
                rows.append(
                    {"label": f"{subset} | {name}", "model": name, "subset": subset, "success_rate": s["success_rate"]}
                )
    return rows


def _cell(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def render_markdown(models: Mapping[str, dict], notes: Mapping[str, str] | None = None) -> str:
    table = table_rows(models)
    cols = ["avg"] + [c for c, _ in COLUMNS]
    lines = [
        f"# Evaluation ({PROXY_LABEL})",
        "",
        f"**Success rate (%) in the symbolic EB-ALFRED simulator — a {PROXY_LABEL}.** Held-out episodes, "
        "EB's execution rules (replan after an invalid action; at most 30 environment steps and 10 invalid "
        "actions), greedy decoding. `avg` is the mean over the subsets present; `–` = no episodes of that subset.",
        "",
        "| model | " + " | ".join(cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for name, row in table.items():
        label = f"{name} (reference)" if models[name].get("reference") else name
        lines.append(f"| {label} | " + " | ".join(_cell(row[c]) for c in cols) + " |")
    lines += [
        "",
        "For orientation only, the paper's Table 1 on the real EB-ALFRED (AI2-THOR; not comparable):",
        "",
        "| model | " + " | ".join(cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for name, vals in PAPER_ROWS:
        lines.append(f"| {name} | " + " | ".join(f"{v:g}" for v in vals) + " |")
    lines += [
        "",
        "## Behaviour (all evaluated episodes)",
        "",
        "| model | episodes | success % | progress % | env steps | planner calls | invalid-action rate | parse-failure rate | response chars | response tokens | repeat after failure | recovered next call (executes / correct) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in models.items():
        o = (m.get("interactive") or {}).get("overall", {})
        if not o.get("episodes"):
            continue
        lines.append(
            f"| {name} | {o['episodes']} | {o['success_rate']:.1f} | {o['progress']:.1f} | {o['avg_env_steps']:.1f} | "
            f"{o['avg_planner_calls']:.1f} | {o['invalid_action_rate']:.3f} | {o['parse_failure_rate']:.3f} | "
            f"{o['avg_response_chars']:.0f} | {_cell(o.get('avg_response_tokens'), 0)} | "
            f"{_cell(o.get('repeat_after_failure_rate'), 3)} | {_cell(o.get('recovered_next_call_rate'), 3)} / "
            f"{_cell(o.get('recovered_next_call_correct_rate'), 3)} |"
        )
    offline = {k: m["offline"] for k, m in models.items() if m.get("offline") and m["offline"].get("samples")}
    if offline:
        lines += [
            "",
            "## Offline metrics (held-out decomposed samples, one greedy response each)",
            "",
            "| model | samples | JSON valid | format | reward (max 1.5) | exact plan | prefix accuracy |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, o in offline.items():
            lines.append(
                f"| {name} | {o['samples']} | {o['json_valid_rate']:.3f} | {o['format_rate']:.3f} | "
                f"{o['reward_mean']:.3f} | {o['exact_plan_rate']:.3f} | {o['prefix_accuracy']:.3f} |"
            )
    if notes:
        lines += ["", "## Notes", ""] + [f"- **{k}**: {v}" for k, v in notes.items()]
    return "\n".join(lines) + "\n"
