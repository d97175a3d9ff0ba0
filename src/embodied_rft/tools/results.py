"""The README's results table, rendered from the default run's ``metrics/*.json`` so it cannot drift.

Input: a metrics folder written by ``dvc repro`` (``prepare``, ``distill``, ``sft``, ``grpo`` and ``eval`` JSON).
Output: a Markdown block (:func:`render`), written between the ``<!-- results:begin -->`` and
``<!-- results:end -->`` markers of ``README.md`` by ``python -m embodied_rft.tools.results`` (``make results``; ``make
repro`` runs it last). ``--check`` exits 1 when the README's block differs from what the metrics give (a test runs
it). Every success figure is a symbolic-simulator proxy, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def _load(d: Path, name: str) -> dict[str, Any]:
    path = d / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"{path}: missing; run `dvc repro` first") from None
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: line {e.lineno}: not JSON ({e.msg})") from None


def _p(p: float) -> str:
    return "p < 1e-6" if p < 1e-6 else f"p = {p:.2g}" if p < 0.01 else f"p = {p:.3f}"


def _pair(paired: dict, key: str) -> str:
    pr = paired.get(key)
    if not pr:
        return "—"
    return f"{pr['only_a']} vs {pr['only_b']} episodes (exact McNemar, {_p(pr['p_mcnemar'])})"


def render(metrics_dir: str | Path) -> str:
    d = Path(metrics_dir)
    ev, grpo, sft, distill = (_load(d, n) for n in ("eval", "grpo", "sft", "distill"))
    models = [m for m in ("base", "sft", "grpo") if m in ev["table"]]
    names = {"base": "base", "sft": "SFT", "grpo": "SFT+GRPO"}
    splits = ", ".join(f"{n} {s}" for s, n in ev["episodes"]["per_split"].items())
    rows = [
        "| model | " + " | ".join(k for k in ev["table"][models[0]] if k != "avg") + " | **average** |",
        "|---|" + "---|" * len(ev["table"][models[0]]),
    ]
    for m in [*models, "expert", "random"]:
        if m in ev["table"]:
            t = ev["table"][m]
            rows.append(
                f"| {names.get(m, m)} | "
                + " | ".join(f"{v:.1f}" for k, v in t.items() if k != "avg")
                + f" | **{t['avg']:.1f}** |"
            )
    h = grpo.get("heldout") or {}
    pr = h.get("paired", {})
    rw, af = pr.get("reward", {}), pr.get("accuracy_full", {})
    cfg = _load(d, "grpo.details").get("config", {})  # the run's settings are beside its headline numbers
    lines = [
        f"Success rate (%) by EB-ALFRED subset, {splits} episodes — **symbolic-simulator proxy results**, not",
        "EmbodiedBench numbers (`metrics/eval.json`, `reports/eval.md`):",
        "",
        *rows,
        "",
        "| comparison | figure |",
        "|---|---|",
        f"| base → SFT, same episodes | {_pair(ev['paired'], 'base->sft')} |",
        f"| SFT → SFT+GRPO, same episodes | {_pair(ev['paired'], 'sft->grpo')} |",
    ]
    if rw:
        lo, hi = rw["ci95"]
        lines.append(
            f"| GRPO, {h['before']['samples']} held-out decomposed samples (greedy) | reward "
            f"{h['before']['reward_mean']:.3f} → {h['after']['reward_mean']:.3f} (95% CI of the gain [{lo:+.3f}, "
            f"{hi:+.3f}]); exact remaining plan {h['before']['exact_plan_rate']:.3f} → "
            f"{h['after']['exact_plan_rate']:.3f} ({af.get('only_a')} vs "
            f"{af.get('only_b')}, {_p(af.get('p_mcnemar', 1.0))}{_ci(af)}) |"
        )
    lines += [
        f"| SFT | {sft['steps']} steps, loss {sft['first_loss']:.2f} → {sft['final_loss']:.2f}, "
        f"{sft['tokens_per_s']:,.0f} tokens/s |",
        _grpo_row(grpo, cfg),
        f"| teacher | `{distill['model']}`, validate `{distill['validate']}`: {distill['accepted']:,} answers kept, "
        f"{100 * distill['kept_gold_rate']:.1f}% of them the expert's plan |",
    ]
    return "\n".join(lines)


def _grpo_row(grpo: dict, cfg: dict) -> str:
    """The GRPO row: the engine's size and speed, and for a cluster run the job that trained it."""
    rate = grpo["filter"]["pass_rate"]
    size = (
        f"{grpo['updates']} updates (G = {cfg.get('group_size')}, lr {cfg.get('lr'):g}, K_2 = "
        f"{cfg.get('filter', {}).get('updates_per_buffer')}), filter pass rate "
        + (f"{rate:.2f}" if rate is not None else "not recorded")
    )
    if grpo.get("backend") == "openrlhf":
        job = grpo.get("job") or {}
        return (
            f"| GRPO | OpenRLHF job `{job.get('submission_id')}` (trainer `{job.get('trainer')}`, OpenRLHF "
            f"{job.get('openrlhf_version')}): {grpo['steps']} steps, {size} |"
        )
    return f"| GRPO | {size}, {grpo['throughput']['generated_tokens_per_s']:,.0f} generated tokens/s |"


def _ci(gain: dict) -> str:
    """``; 95% CI of the gain [lo, hi]`` for a comparison that has one (runs before it was recorded have not)."""
    if "ci95" not in gain:
        return ""
    lo, hi = gain["ci95"]
    return f"; 95% CI of the gain [{lo:+.3f}, {hi:+.3f}]"


def splice(readme: str, block: str) -> str:
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md: the markers {BEGIN} and {END} are missing")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", default="metrics")
    ap.add_argument("--readme", default="README.md")
    ap.add_argument("--check", action="store_true", help="exit 1 if the README's table differs from the metrics")
    a = ap.parse_args(argv)
    path = Path(a.readme)
    old = path.read_text()
    new = splice(old, render(a.metrics))
    if a.check:
        if new != old:
            print(f"{path}: the results table is not the one {a.metrics}/ gives; run `make results`", file=sys.stderr)
            return 1
        return 0
    if new != old:
        tmp = path.with_suffix(".md.tmp")
        tmp.write_text(new)
        tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
