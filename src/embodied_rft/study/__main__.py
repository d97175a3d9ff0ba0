"""``python -m embodied_rft.study`` — run a study through DVC, or write its table (docs/studies.md).

- ``run <study> [--seeds 0 1] [--dry-run]`` (``make study S=<study> [SEEDS=...]``): checks the study file and every
  arm's composed config (nothing runs when one is bad: one ``error:`` line, exit status 2), writes
  ``studies/<name>/`` (dvc.yaml, the arms' configs), prints DVC's plan (``dvc repro --dry``), then ``dvc repro``\\s
  it. A second run with nothing changed is a no-op: DVC finds every stage up to date.
- ``generate <study> [--seeds ...]``: only write ``studies/<name>/`` (``make studies``: every study).
- ``table <study> --seeds ...``: the table stage's command (DVC runs it): reads every finished outcome, merges the
  published tables under ``merge:``, writes ``results/<name>/table.json`` and ``table.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from embodied_rft.core.atomic import write_json_atomic, write_text_atomic
from embodied_rft.study.dvcgen import Generator
from embodied_rft.study.layout import results_dir, studies_dir
from embodied_rft.study.spec import STUDY_DIR, StudyError, load
from embodied_rft.study.table import RunContext, build, merge, read_runs, render


def _dvc() -> str:
    exe = Path(sys.executable).with_name("dvc")
    return str(exe) if exe.exists() else "dvc"


def table(name: str, seeds: list[int] | None) -> dict:
    study = load(name, seeds=seeds)
    from embodied_rft.study.registry import load_plugins

    load_plugins(study.plugins, str(study.file))
    ctx = RunContext(study, list(study.seeds))
    runs = read_runs(ctx)
    missing = [s for s, r in runs.items() if not r]
    if missing:
        raise StudyError(f"{study.file}: no finished outcome for seeds {missing} (run `make study S={study.name}`)")
    out = build(study, runs, ctx)
    if study.merge:
        parts = [json.loads(Path(f).read_text("utf-8")) for f in study.merge]
        out = merge([out, *parts], study)
    d = results_dir(study)
    write_json_atomic(d / "table.json", out)
    write_text_atomic(d / "table.md", render(out))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["run", "generate", "table", "list"])
    ap.add_argument("study", nargs="?", help=f"a name under {STUDY_DIR}/ or a path to a study file")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="replace the study's seeds")
    ap.add_argument(
        "--override", "-o", action="append", default=[], help="a Hydra override added to the study's (repeatable)"
    )
    ap.add_argument("--dry-run", action="store_true", help="run: print the plan, run nothing")
    args = ap.parse_args(argv)
    if args.command == "list":
        for f in sorted(STUDY_DIR.glob("*.yaml")):
            print(f"{f.stem}: {(load(f).description.splitlines() or [''])[0]}")
        return 0
    if not args.study:
        ap.error("name a study")
    try:
        if args.command == "table":
            print(render(table(args.study, args.seeds)))
            return 0
        study = load(args.study, seeds=args.seeds)
        if args.override:
            study = replace(study, overrides=(*study.overrides, *args.override))
        dvc_file = Generator(study).write()
    except (StudyError, KeyError) as exc:
        msg = " ".join(str(exc).strip("'\"").split())
        print(f"error: {msg}", file=sys.stderr)
        return 2
    print(f"wrote {studies_dir(study)}/ (seeds {list(study.seeds)}, arms {', '.join(study.needed())})", flush=True)
    if args.command == "generate":
        return 0
    from embodied_rft.study import plan

    print(plan.render(plan.plan(dvc_file)), flush=True)
    if args.dry_run:
        return 0
    return subprocess.run([_dvc(), "repro", dvc_file.as_posix()]).returncode


if __name__ == "__main__":
    sys.exit(main())
