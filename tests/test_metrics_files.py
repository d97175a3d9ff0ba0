"""Metrics files hold headline numbers only, each with its complete record beside it: `dvc metrics show` is a
table a person can read (it was 8 rows x ~1,500 columns, lines of ~80,000 characters), and every headline number
is the same number as in the stage's details file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from embodied_rft.core.metrics import details_path, pick, write_metrics
from embodied_rft.tools.metrics_files import pipeline_metrics

REPO = Path(__file__).resolve().parents[1]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _metric_files() -> list[Path]:
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    out = []
    for st in stages.values():
        for entry in st.get("metrics") or []:
            path = next(iter(entry)) if isinstance(entry, dict) else entry
            out.append(REPO / path.replace("${paths.metrics_dir}", params["paths"]["metrics_dir"]))
    return out


# the VeGAS and D&A stages run outside `make repro` (`make bon`, `make rm-bench`): their metrics exist once that has run
OPTIONAL = {
    "synth.json",
    "verifier.json",
    "bon.json",
    "rm_bench.json",
    "rm_eval.json",
    "rm_train.json",
    "rm_eval_tiny.json",
}


def test_every_committed_metrics_file_is_a_headline_of_its_details():
    files = _metric_files()
    assert len(files) == 14 and {f.name for f in files} >= OPTIONAL
    assert all(f.exists() for f in files if f.name not in OPTIONAL)
    for f in (f for f in files if f.exists()):
        head = json.loads(f.read_text())
        if not details_path(f).exists():  # a stage with only a few numbers (base) writes them all as metrics
            assert len(_flat(head)) <= 10, f.name
            continue
        full = json.loads(details_path(f).read_text())
        flat_head, flat_full = _flat(head), _flat(full)
        assert len(flat_head) <= 45, (f.name, len(flat_head))
        assert {k: flat_full.get(k) for k in flat_head} == flat_head, f.name  # the same numbers
        assert len(flat_full) > len(flat_head), f.name


def test_dvc_metrics_show_is_a_short_table():
    # the default run's files, as `make metrics` names them (a study's dvc.yaml adds its seeds' files to a bare
    # `dvc metrics show`, and the union of their keys to every row)
    files = pipeline_metrics("dvc.yaml", REPO)
    assert [REPO / f for f in files] == _metric_files()
    r = subprocess.run(
        [sys.executable, "-m", "dvc", "metrics", "show", *files], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # a header and one row per metrics file (a VeGAS file that `make bon` has not written yet: a row of "-"); the
    # rows hold the union of every file's keys, so the width bounds the stages' headlines together, ~250 characters
    # of columns a stage: a wide one (all selectors' figures, say) belongs in its details file
    assert len(lines) == 1 + len(files) and max(map(len, lines)) < 250 * len(files)


def test_write_metrics_picks_the_headline_and_keeps_the_record(tmp_path):
    record = {"updates": 3, "config": {"lr": 1e-4}, "models": {"a": {"x": 1, "y": 2}, "b": {"x": 3, "y": 4}}}
    head = write_metrics(tmp_path / "m.json", record, {"updates": True, "models": {"*": {"x": True}}})
    assert head == {"updates": 3, "models": {"a": {"x": 1}, "b": {"x": 3}}}
    assert json.loads((tmp_path / "m.json").read_text()) == head
    assert json.loads((tmp_path / "m.details.json").read_text()) == record
    assert pick(record, {"missing": True, "config": True}) == {"config": {"lr": 1e-4}}


def test_metrics_files_lists_one_pipelines_files_and_refuses_a_file_without_metrics(capsys, monkeypatch):
    from embodied_rft.tools.metrics_files import main

    monkeypatch.chdir(REPO)
    assert main(["--all"]) == 0
    assert capsys.readouterr().out.split() == [str(f.relative_to(REPO)) for f in _metric_files()]
    with pytest.raises(SystemExit, match="no-such/dvc.yaml: no stage declares metrics"):
        main(["no-such/dvc.yaml"])
