"""The metrics files of one DVC pipeline file, for ``make metrics``.

``python -m embodied_rft.tools.metrics_files [DVC_YAML] [--all]``

``dvc metrics show`` and ``dvc metrics diff`` read every ``dvc.yaml`` of the repository: once a study has run,
``studies/<name>/dvc.yaml`` adds each seed's metrics files (and the union of their keys to every row). ``make
metrics`` is about the default run, so it passes this tool's list as ``--targets``: the metrics outputs DVC itself
resolves for the stages of ``DVC_YAML`` (default the root ``dvc.yaml``), one path a line, those present in the
workspace unless ``--all``.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def pipeline_metrics(dvc_yaml: str = "dvc.yaml", root: str | Path = ".") -> list[str]:
    """The metrics outputs (paths relative to ``root``) of the stages defined in ``dvc_yaml``, in stage order."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return [
            str(out.def_path)
            for stage in repo.index.stages
            if stage.path_in_repo == dvc_yaml
            for out in stage.outs
            if out.metric
        ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dvc_yaml", nargs="?", default="dvc.yaml")
    ap.add_argument("--all", action="store_true", help="list the declared files whether or not they exist")
    args = ap.parse_args(argv)
    paths = pipeline_metrics(args.dvc_yaml)
    if not paths:
        raise SystemExit(f"{args.dvc_yaml}: no stage declares metrics (is it a dvc.yaml of this repository?)")
    for p in paths:
        if args.all or Path(p).exists():
            print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
