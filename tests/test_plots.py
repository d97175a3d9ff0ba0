"""The pipeline's plots render offline: SVG images drawn by the `plots` stage, each once, with axes that say what
they show and one colour per model; `dvc plots show` then writes a page that loads nothing from the network."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from embodied_rft.plots import render_pipeline_plots

REPO = Path(__file__).resolve().parents[1]
MODELS = ("base", "sft", "grpo", "expert", "random")
SUBSETS = ("base", "common_sense", "spatial")


def _data(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "sft_loss.csv").write_text("step,loss\n" + "".join(f"{s},{4.0 / s:.3f}\n" for s in range(1, 21)))
    cols = "update,reward_mean,accuracy_full_rate,filter_pass_rate,lr\n"
    (d / "grpo.csv").write_text(cols + "".join(f"{u},{0.5 + u / 100},{u / 50},0.3,1e-4\n" for u in range(1, 11)))
    rows = [
        {"label": f"{s} | {m}", "model": m, "subset": s, "success_rate": 10.0 * i + j}
        for i, m in enumerate(MODELS)
        for j, s in enumerate(SUBSETS)
    ]
    (d / "evaluate_success_by_subset.json").write_text(json.dumps(rows))
    return d


def _texts(svg: Path) -> list[str]:
    return [t.text or "" for t in ET.parse(svg).iter() if t.tag.endswith("text")]


def test_each_plot_is_an_svg_with_titles_axes_and_a_colour_per_model(tmp_path):
    a, b, c = render_pipeline_plots(_data(tmp_path / "p"))
    assert [p.name for p in (a, b, c)] == ["sft_loss.svg", "grpo.svg", "success_by_subset.svg"]
    assert {"SFT loss", "step", "training loss"} <= set(_texts(a))
    assert {"GRPO rollouts", "update", "rollout reward (max 1.5)", "exact-plan rate", "filter pass rate"} <= set(
        _texts(b)
    )
    bars = c.read_text()
    labels = set(_texts(c))
    assert set(MODELS) <= labels and set(SUBSETS) <= labels and "success rate (%)" in labels
    assert "Success by EB-ALFRED subset (symbolic-simulator proxy)" in labels
    # grouped bars: one fill colour per model (matplotlib's C0..C4), each used by that model's bars and legend
    fills = re.findall(r"fill: (#[0-9a-f]{6})", bars)
    for colour in ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"):
        assert fills.count(colour) == len(SUBSETS) + 1, colour


def test_plots_are_deterministic_and_load_nothing_remote(tmp_path):
    first = [p.read_bytes() for p in render_pipeline_plots(_data(tmp_path / "a"))]
    again = [p.read_bytes() for p in render_pipeline_plots(_data(tmp_path / "b"))]
    assert first == again
    for svg in first:
        assert b"<script" not in svg and not re.search(rb'(?:href|src)="https?:', svg)


def test_dvc_plots_show_writes_an_offline_page_with_each_plot_once(tmp_path):
    out = tmp_path / "html"
    r = subprocess.run(
        [sys.executable, "-m", "dvc", "plots", "show", "-o", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    page = (out / "index.html").read_text()
    assert "<script" not in page and "cdn." not in page and not re.search(r'src="https?:', page)
    images = re.findall(r'<img src="([^"]+)"', page)
    # each plot exactly once, as a local image next to the page (VeGAS's once `make bon` has written it)
    names = ["grpo", "sft_loss", "success_by_subset"]
    if (REPO / "plots" / "bon_success_by_selector.svg").is_file():
        names.append("bon_success_by_selector")
    assert sorted(images) == sorted(f"static/workspace_plots_{n}.svg" for n in names)
    assert all((out / i).is_file() for i in images)
