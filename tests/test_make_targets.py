"""The Makefile's views (issue 63): `make help` lists every target once under its group, with the time of the long
ones; `make exp-show` and `make metrics` print the committed run in a terminal (`dvc exp show` has ~560 columns and
cut every cell to "…" at 120-400 columns; `dvc metrics show` put each file on one ~2,500-character row)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _make(target: str, columns: int | None = None) -> subprocess.CompletedProcess:
    """``make <target>`` with this interpreter's venv, never reinstalling it (``-o``: its stamp counts as current)."""
    venv = sys.prefix
    env = {**os.environ, **({"COLUMNS": str(columns)} if columns else {})}
    return subprocess.run(
        ["make", "-s", "-o", f"{venv}/.installed", f"VENV={venv}", target],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _groups_in_makefile() -> list[tuple[str, list[str]]]:
    """``(group header, [targets with a ## comment])`` in the Makefile's order."""
    groups: list[tuple[str, list[str]]] = []
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith("##@ "):
            groups.append((line[4:], []))
        elif m := re.match(r"^([a-zA-Z0-9_-]+):.*## ", line):
            assert groups, f"target {m.group(1)} comes before the first ##@ group header"
            groups[-1][1].append(m.group(1))
    return groups


def test_make_help_lists_every_target_once_under_its_group_with_the_long_ones_timed():
    r = _make("help")
    assert r.returncode == 0, r.stderr
    lines = ANSI.sub("", r.stdout).splitlines()
    groups = _groups_in_makefile()
    assert [g for g, _ in groups][:2] == ["Setup", "The paper's pipeline (`make repro`), its results and views"]
    assert len(groups) == 6
    listed = [ln.split()[0] for ln in lines if ln.startswith("  ")]
    every = [t for _, targets in groups for t in targets]
    assert sorted(listed) == sorted(set(every)) and len(listed) == len(every)  # each once
    assert {"repro", "results", "metrics", "exp-show", "study", "seeds", "bon", "test", "lint", "help"} <= set(listed)
    headers = [ln for ln in lines if ln and not ln.startswith("  ")]
    assert headers == [g for g, _ in groups]
    for group, targets in groups:  # each target printed under its own header
        start = lines.index(group)
        block = lines[start + 1 : start + 1 + len(targets)]
        assert [ln.split()[0] for ln in block] == targets, group
    timed = {ln.split()[0]: ln for ln in lines if ln.startswith("  ")}
    for target, cost in {
        "repro": "(~20 min)",
        "seeds": "~26 min per seed",
        "grpo-long": "~20 min",
        "bon": "~1.5 h",
        "test": "~13 min",
        "test-all": "~15-20 min",
    }.items():
        assert cost in timed[target], (target, timed[target])


def _width(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.skipif(not (REPO / "metrics" / "eval.json").exists(), reason="no committed run (metrics/eval.json)")
def test_make_exp_show_fits_a_120_column_terminal_with_the_headline_readable():
    r = _make("exp-show", columns=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert _width(out) <= 120, out
    # whole names and values, not "…" (params join these columns only where the workspace's differ from HEAD's)
    header = next(ln for ln in out.splitlines() if "Experiment" in ln).split()
    assert header[:4] == ["Experiment", "table.sft.avg", "table.grpo.avg", "paired.sft->grpo.p_mcnemar"]
    workspace = next(ln for ln in out.splitlines() if ln.split()[:1] == ["workspace"]).split()
    ev = json.loads((REPO / "metrics" / "eval.json").read_text())
    want = [ev["table"]["sft"]["avg"], ev["table"]["grpo"]["avg"], ev["paired"]["sft->grpo"]["p_mcnemar"]]
    assert [float(v) for v in workspace[1:4]] == pytest.approx(want, abs=1e-5)


@pytest.mark.skipif(not (REPO / "metrics" / "eval.json").exists(), reason="no committed run (metrics/eval.json)")
def test_make_metrics_lists_every_metric_on_its_own_row_within_200_columns():
    r = _make("metrics")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert _width(out) <= 200, _width(out)
    rows = [ln.split() for ln in out.splitlines()[1:]]
    assert out.splitlines()[0].split() == ["Path", "Metric", "HEAD", "workspace", "Change"]
    params = yaml.safe_load((REPO / "params.yaml").read_text())["paths"]["metrics_dir"]
    declared = {
        next(iter(e)).replace("${paths.metrics_dir}", params)
        for st in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].values()
        for e in st.get("metrics") or []
    }
    present = {p for p in declared if (REPO / p).exists()}
    assert {row[0] for row in rows} == present  # every metrics file the workspace has, none left out
    ev = json.loads((REPO / "metrics" / "eval.json").read_text())
    grpo_avg = next(row for row in rows if row[:2] == ["metrics/eval.json", "table.grpo.avg"])
    assert float(grpo_avg[3]) == pytest.approx(ev["table"]["grpo"]["avg"])  # the workspace column
    assert len(rows) > 100  # one row per number (the ~110 headline numbers), not one per file
