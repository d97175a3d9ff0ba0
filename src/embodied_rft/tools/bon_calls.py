"""Within-call metrics and the prior weight, from ``bon`` per-call tables (``reports/bon_calls.csv``).

``python -m embodied_rft.tools.bon_calls TABLE [TABLE ...] [--verifier bon_ft] [--weights 0 0.5 1 2]
[--part replan] [--reps 1000]``

Reads the tables (several: e.g. one per seed, their calls kept apart), prints one JSON object: the top-1
oracle-correct rate of ``--verifier`` with the policy's prior at each weight of ``--weights`` on ``--part``'s calls
with a correct candidate, best first (``vegas/calls.py`` ``best_weight``: how ``bon.prior_weight`` is chosen on a
valid_seen run), and the within-call metrics with the best weight (``within_call``). Recomputes from the
versioned tables what a ``bon`` run reports, for any verifier column they hold.
"""

from __future__ import annotations

import argparse
import json
import sys

from embodied_rft.vegas.calls import CallTableError, best_weight, read_table, within_call


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m embodied_rft.tools.bon_calls", description=__doc__.split("\n")[0])
    ap.add_argument("tables", nargs="+")
    ap.add_argument("--verifier", default="bon_ft")
    ap.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0, 2.0, 4.0])
    ap.add_argument("--part", default="replan", choices=["all", "first", "replan"])
    ap.add_argument("--reps", type=int, default=1000)
    a = ap.parse_args(argv)
    rows = []
    try:
        for i, t in enumerate(a.tables):
            rows += [{**r, "episode_id": f"t{i}/{r['episode_id']}"} for r in read_table(t)]
    except (OSError, CallTableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not rows or f"p_{a.verifier}" not in rows[0]:
        have = sorted(k[2:] for k in (rows[0] if rows else {}) if k.startswith("p_"))
        print(
            f"error: {a.tables[0]}: no column p_{a.verifier}; the tables score {have or 'no verifier'}", file=sys.stderr
        )
        return 2
    try:
        grid = best_weight(rows, a.verifier, a.weights, a.part)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    w = grid[0]["weight"]
    out = {
        "weights": grid,
        "best_weight": w,
        "within_call": within_call(rows, [a.verifier], {a.verifier: w}, reps=a.reps),
    }
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
