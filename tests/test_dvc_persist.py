"""Every DVC output is `persist: true`, so DVC never deletes a stage's outputs before the stage has checked its
params (a bad value leaves the old model and metrics in place: tests/test_pipeline_e2e.py runs it), and every
stage replaces its outputs atomically, so persisting them cannot leave stale files behind."""

from __future__ import annotations

from pathlib import Path

import yaml

DVC = Path(__file__).resolve().parents[1] / "dvc.yaml"


def _outs(stage: dict):
    for kind in ("outs", "metrics", "plots"):
        for entry in stage.get(kind) or []:
            if isinstance(entry, str):
                yield kind, entry, {}
            else:
                ((path, opts),) = entry.items()
                yield kind, path, opts or {}


def test_every_stage_output_persists():
    stages = yaml.safe_load(DVC.read_text())["stages"]
    missing = [
        f"{name}.{kind}: {path}"
        for name, st in stages.items()
        for kind, path, opts in _outs(st)
        if opts.get("persist") is not True
    ]
    assert missing == []


def test_folder_outputs_are_written_by_a_whole_folder_swap(tmp_path):
    """prepare and decompose build their folder beside it and swap it in: a file the new run does not write
    (here an old split) is gone afterwards, and nothing of a failed run is left."""
    import pytest

    from embodied_rft.core.atomic import atomic_directory

    out = tmp_path / "episodes"
    out.mkdir()
    (out / "old_split.jsonl").write_text("{}\n")
    with atomic_directory(out) as tmp:
        (tmp / "train.jsonl").write_text("{}\n")
    assert sorted(p.name for p in out.iterdir()) == ["train.jsonl"]
    with pytest.raises(RuntimeError), atomic_directory(out) as tmp:
        (tmp / "half.jsonl").write_text("{")
        raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes"] and (out / "train.jsonl").exists()
