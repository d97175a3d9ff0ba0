"""The clause index across study tables: each clause a set of tables tests, with every check that tests it.

A study's checks may name a ``clause`` (``checks: [{..., clause: <id>}]``, the text under the study's ``clauses:``);
several studies — one recipe each — test the same clause. :func:`index` groups the checks of several tables (the one
table schema, ``study/table.py``) by clause: per check its table, seeds, figures and verdict, and per clause the tables
where it holds. A check's seeds are its figures' ``seeds`` when it reports them, else those of the comparison it
reads (``args.comparison``), else its table's. It reads finished tables only: no runs are needed.

``python -m embodied_rft.study.clauses results/regrpo/table.json results/regrpo_bare/table.json ... --out
results/regrpo/clauses.md [--json results/regrpo/clauses.json]``: the clause texts come from each table's study file
(``conf/study/<study>.yaml``, where it still exists; else the clause's id).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from embodied_rft.core.atomic import write_json_atomic, write_text_atomic
from embodied_rft.study.spec import STUDY_DIR, StudyError, load


def _seeds(table: dict[str, Any], check: dict[str, Any]) -> list[int]:
    if isinstance((check.get("figures") or {}).get("seeds"), list):
        return list(check["figures"]["seeds"])
    c = table["comparisons"].get((check.get("args") or {}).get("comparison"))
    return list(c["seeds"]) if c else list(table["seeds"])


def index(tables: dict[str, dict[str, Any]], texts: dict[str, str] | None = None) -> dict[str, Any]:
    """``{clause: {clause: text, rows: [{table, check, seeds, figures, holds}], holds_in: [table]}}`` of ``tables``
    (``{name: table}``), clauses in the order of ``texts`` (every clause there, tested or not), then any other a
    check names."""
    texts = texts or {}
    out: dict[str, Any] = {k: {"clause": t, "rows": [], "holds_in": []} for k, t in texts.items()}
    for name, table in tables.items():
        for cid, ch in table["checks"].items():
            if ch.get("clause") is None:
                continue
            d = out.setdefault(ch["clause"], {"clause": ch["clause"], "rows": [], "holds_in": []})
            row = {"table": name, "check": cid, "seeds": _seeds(table, ch), "figures": ch["figures"]}
            d["rows"].append({**row, "holds": ch["holds"]})
            if ch["holds"] and name not in d["holds_in"]:
                d["holds_in"].append(name)
    return out


def study_texts(tables: dict[str, dict[str, Any]], study_dir: Path = STUDY_DIR) -> dict[str, str]:
    """The clause texts of the tables' study files (those still there), in the order they name them."""
    texts: dict[str, str] = {}
    for table in tables.values():
        try:
            texts.update({k: v for k, v in load(table["study"], study_dir).clauses.items() if k not in texts})
        except StudyError:
            continue
    return texts


def _fig(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fig(x) for x in v) + "]"
    return str(v)


def render(idx: dict[str, Any]) -> str:
    """The index as Markdown: one row per check and table, then where each clause holds."""
    lines = [
        "## Clauses across the tables",
        "",
        "Each table is one study (one recipe: its `spec`). Per clause, every check that tests it in every table, the "
        "seeds it pools, its figures (points, pooled; p: exact McNemar) and whether it holds.",
        "",
        "| clause | table | check | seeds | figures | holds |",
        "|---|---|---|---|---|---|",
    ]
    for d in idx.values():
        for r in d["rows"]:
            seeds = ", ".join(f"s{s}" for s in r["seeds"])
            figs = ", ".join(f"{k} {_fig(v)}" for k, v in r["figures"].items() if k != "seeds")
            holds = "–" if r["holds"] is None else ("yes" if r["holds"] else "no")
            lines.append(f"| {d['clause']} | {r['table']} | {r['check']} | {seeds} | {figs} | {holds} |")
    lines += ["", "Met in: " + "; ".join(f"{k}: {', '.join(d['holds_in']) or 'none'}" for k, d in idx.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="+", help="study tables (results/<study>/table.json)")
    ap.add_argument("--out", required=True, help="the index as Markdown")
    ap.add_argument("--json", default=None, help="the index as JSON too")
    args = ap.parse_args(argv)
    tables: dict[str, dict[str, Any]] = {}
    for f in args.tables:
        try:
            t = json.loads(Path(f).read_text("utf-8"))
        except (OSError, ValueError) as exc:
            print(f"error: {f}: not readable as a table ({exc})", file=sys.stderr)
            return 2
        if not isinstance(t, dict) or "checks" not in t or "study" not in t:
            print(f"error: {f}: not a study table (no `study` and `checks`)", file=sys.stderr)
            return 2
        tables[t["study"]] = t
    idx = index(tables, study_texts(tables))
    write_text_atomic(Path(args.out), render(idx))
    if args.json:
        write_json_atomic(Path(args.json), idx)
    for k, d in idx.items():
        print(f"{k}: holds in {', '.join(d['holds_in']) or 'no table'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
