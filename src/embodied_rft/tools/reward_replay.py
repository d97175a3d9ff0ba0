"""Replay logged responses through the reward: ``python -m embodied_rft.tools.reward_replay FILE.jsonl``.

Input: a JSONL file with one record per line holding a response (``--response-key``, default
``response``: a string) and its sample's label (``--label-key``, default ``label``: the decomposed
sample's label string, or the label object/list itself). Output on stdout: a table with one row per
record (file line, the reward terms, the matched prefix n/k) and a final ``mean`` row; ``--summary``
prints the mean row only, ``--json`` writes the means as JSON instead. Bad records (invalid JSON, a
missing or mistyped field) are reported on stderr as ``file:line: message`` and skipped; the exit status
is 1 when there were any, 2 when the file cannot be read, else 0.

Use it to re-score a rollout log after a reward change, to compare variants on the same responses
(``--variant rr_code``), or to check what a teacher's replies would have earned.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import embodied_rft.regrpo.plugin  # noqa: F401 - registers the regrpo variant (a tool may import an extension)
from embodied_rft.reward import REWARDS, RewardBreakdown, score

COLUMNS = ("structure", "valid", "match", "accuracy", "total", "accuracy_full")


def iter_records(
    path: Path, response_key: str, label_key: str, errors: list[str]
) -> Iterator[tuple[int, object, object]]:
    """(line, response, label) for each good record; a bad one appends 'file:line: ...' to ``errors``."""
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError) as exc:
                errors.append(f"{where}: invalid JSON ({exc})")
                continue
            if not isinstance(rec, dict):
                errors.append(f"{where}: expected a JSON object, got {type(rec).__name__}")
                continue
            missing = [k for k in (response_key, label_key) if k not in rec]
            if missing:
                errors.append(f"{where}: missing field '{missing[0]}' (keys: {sorted(rec)[:8]})")
                continue
            response, label = rec[response_key], rec[label_key]
            if not isinstance(response, str):
                errors.append(f"{where}: field '{response_key}' must be a string, got {type(response).__name__}")
                continue
            if not isinstance(label, (str, dict, list)):
                errors.append(
                    f"{where}: field '{label_key}' must be a string, object or list, got {type(label).__name__}"
                )
                continue
            yield lineno, response, label


def _row(name: str, values: list[float], prefix: str) -> str:
    return f"{name:>8} " + " ".join(f"{v:>13.4f}" for v in values) + f"  {prefix}"


def replay(
    path: Path, response_key: str, label_key: str, variant: str, out: TextIO, summary: bool, as_json: bool
) -> tuple[int, list[str]]:
    """Score every good record, print the table (or JSON means); returns (records scored, errors)."""
    errors: list[str] = []
    sums = [0.0] * len(COLUMNS)
    n = 0
    header = f"{'line':>8} " + " ".join(f"{c:>13}" for c in COLUMNS) + "  n/k"
    if not (summary or as_json):
        print(header, file=out)
    for lineno, response, label in iter_records(path, response_key, label_key, errors):
        b: RewardBreakdown = score(response, label, variant)
        values = [getattr(b, c) for c in COLUMNS]
        sums = [s + v for s, v in zip(sums, values)]
        n += 1
        if not (summary or as_json):
            print(_row(str(lineno), values, f"{b.n_matched}/{b.n_gold}" if b.parsed else "unparsed"), file=out)
    means = [s / n if n else 0.0 for s in sums]
    if as_json:
        json.dump(
            {"file": str(path), "variant": variant, "records": n, "errors": len(errors), **dict(zip(COLUMNS, means))},
            out,
        )
        out.write("\n")
    else:
        if summary:
            print(header, file=out)
        print(_row("mean", means, f"({n} records, variant {variant})"), file=out)
    return n, errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m embodied_rft.tools.reward_replay",
        description="Replay logged responses through the reward and print a breakdown table.",
    )
    ap.add_argument("file", type=Path, help="JSONL file of logged responses with their labels")
    ap.add_argument("--response-key", default="response", help="record field holding the response text")
    ap.add_argument("--label-key", default="label", help="record field holding the sample's label")
    ap.add_argument("--variant", default="paper", choices=sorted(REWARDS), help="reward variant")
    ap.add_argument("--summary", action="store_true", help="print only the mean row")
    ap.add_argument("--json", action="store_true", help="print the means as one JSON object")
    args = ap.parse_args(argv)
    if not args.file.is_file():
        print(f"{args.file}: file not found", file=sys.stderr)
        return 2
    try:
        _, errors = replay(
            args.file, args.response_key, args.label_key, args.variant, sys.stdout, args.summary, args.json
        )
    except OSError as exc:
        print(f"{args.file}: cannot read ({exc})", file=sys.stderr)
        return 2
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"{len(errors)} bad record(s) skipped", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
