"""The issue's ReGRPO clauses across the published tables (docs/regrpo.md §7).

``python -m embodied_rft.tools.regrpo_clauses [--tables metrics/regrpo*.json] [--main metrics/regrpo.json]
[--report reports/regrpo.md]`` (``make regrpo-clauses``; every ``make regrpo-*`` target that publishes a table runs it)
reads every table ``tools/regrpo_seeds.py`` published — one recipe each: the main arms, the own-failure SFT arms, the
no-KL RL arms, … — and writes, under the main table's ``clauses`` and as the last section of its report, each clause
of the issue with every check that tests it, per table, its seeds and figures, and the tables where it holds
(:func:`embodied_rft.regrpo.report.clauses`). It reads published files only: no runs are needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from embodied_rft.core.atomic import write_json_atomic, write_text_atomic
from embodied_rft.regrpo.report import LABEL, clauses, render


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", nargs="+", default=None, help="published tables (default: metrics/regrpo*.json)")
    ap.add_argument("--main", default="metrics/regrpo.json", help="the table that carries the index")
    ap.add_argument("--report", default="reports/regrpo.md", help="the main table's report, rewritten with the index")
    args = ap.parse_args(argv)
    files = [Path(f) for f in args.tables] if args.tables else sorted(Path(args.main).parent.glob("regrpo*.json"))
    tables = {}
    for f in files:
        try:
            t = json.loads(f.read_text("utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise SystemExit(f"{f}: cannot read a published table: {e}") from None
        if t.get("label") != LABEL or "comparisons" not in t:
            raise SystemExit(f"{f}: not a table of tools/regrpo_seeds.py (label {t.get('label')!r})")
        tables[f.name] = t
    main_file = Path(args.main)
    if main_file.name not in tables:
        raise SystemExit(f"{main_file}: the main table is not among the tables read ({', '.join(tables) or 'none'})")
    summary = tables[main_file.name]
    summary["clauses"] = clauses(tables)
    write_json_atomic(main_file, summary)
    write_text_atomic(Path(args.report), render(summary))
    for k, d in summary["clauses"].items():
        print(f"{k}: holds in {', '.join(d['holds_in']) or 'no table'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
