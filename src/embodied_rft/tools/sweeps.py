"""Tables over sweeps: Hydra multirun jobs (``multirun/<date>/<time>/<n>/``) or DVC experiments.

``python -m embodied_rft.tools.sweeps multirun/<date>/<time> --stage grpo`` prints one row per job: its
overrides (from ``.hydra/overrides.yaml``) and the stage's headline metrics (for ``grpo``: held-out reward and
accuracy_full before/after, filter pass rate, updates). ``make sweep-filter`` runs the filter on/off sweep and
calls this.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

HEADLINES = {
    "grpo": [
        ("updates", ("updates",)),
        ("reward before", ("heldout", "before", "reward_mean")),
        ("reward after", ("heldout", "after", "reward_mean")),
        ("acc_full before", ("heldout", "before", "exact_plan_rate")),
        ("acc_full after", ("heldout", "after", "exact_plan_rate")),
        ("filter pass", ("filter", "pass_rate")),
        ("zero-adv groups trained", ("counters", "zero_adv_groups_trained")),
    ],
    "sft": [("steps", ("steps",)), ("final loss", ("final_loss",)), ("json valid", ("val", "json_valid_rate"))],
}


def _get(d: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def collect(sweep_dir: str | Path, stage: str) -> list[dict[str, Any]]:
    """One row per job directory that has ``metrics/<stage>.json``."""
    rows = []
    for metrics in sorted(Path(sweep_dir).glob(f"*/metrics/{stage}.json"), key=lambda p: p.parts):
        job = metrics.parent.parent
        ov = job / ".hydra" / "overrides.yaml"
        overrides = yaml.safe_load(ov.read_text()) if ov.exists() else []
        m = json.loads(metrics.read_text())
        row = {"job": job.name, "overrides": " ".join(overrides or [])}
        for name, path in HEADLINES.get(stage, []):
            row[name] = _get(m, path)
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no finished jobs)"
    cols = list(rows[0])
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else ("-" if v is None else str(v))  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir", help="a Hydra multirun sweep directory (or its parent: the newest is used)")
    ap.add_argument("--stage", default="grpo", choices=sorted(HEADLINES))
    args = ap.parse_args(argv)
    d = Path(args.sweep_dir)
    if not list(d.glob(f"*/metrics/{args.stage}.json")):
        subs = sorted((p for p in d.glob("*/*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
        d = subs[-1] if subs else d
    print(render(collect(d, args.stage)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
