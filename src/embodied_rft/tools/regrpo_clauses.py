"""The issue's ReGRPO clauses across the published tables (docs/regrpo.md §7).

``python -m embodied_rft.tools.regrpo_clauses [--tables metrics/regrpo*.json] [--main metrics/regrpo.json]
[--report reports/regrpo.md]`` (``make regrpo-clauses``) reads every table ``tools/regrpo_seeds.py`` published — one
recipe each: the main arms, the own-failure SFT arms, the no-KL RL arms, … — and writes, under the main table's
``clauses`` and as the last section of its report, each clause of the issue with every check that tests it, per
table, its seeds and figures, and the tables where it holds (:func:`embodied_rft.regrpo.report.clauses`). It reads
published files only: no runs are needed. ``tools/regrpo_seeds.py`` calls :func:`refresh` after every table it
publishes beside the main one, so the index follows the tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from embodied_rft.core.atomic import write_json_atomic, write_text_atomic
from embodied_rft.regrpo.report import clauses, read_table, render


def refresh(main: str | Path, report: str | Path, tables: list[str | Path] | None = None) -> dict[str, Any]:
    """Rewrite the main table ``main`` (and its ``report``) with the clause index of ``tables`` (default: every
    ``regrpo*.json`` beside it); returns the index. ValueError naming the file when a table is not one."""
    main = Path(main)
    files = [Path(f) for f in tables] if tables else sorted(main.parent.glob("regrpo*.json"))
    read = {f.name: read_table(f) for f in files}
    if main.name not in read:
        raise ValueError(f"{main}: the main table is not among the tables read ({', '.join(read) or 'none'})")
    summary = read[main.name]
    summary["clauses"] = clauses(read)
    write_json_atomic(main, summary)
    write_text_atomic(Path(report), render(summary))
    return summary["clauses"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", nargs="+", default=None, help="published tables (default: metrics/regrpo*.json)")
    ap.add_argument("--main", default="metrics/regrpo.json", help="the table that carries the index")
    ap.add_argument("--report", default="reports/regrpo.md", help="the main table's report, rewritten with the index")
    args = ap.parse_args(argv)
    try:
        index = refresh(args.main, args.report, args.tables)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    for k, d in index.items():
        print(f"{k}: holds in {', '.join(d['holds_in']) or 'no table'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
