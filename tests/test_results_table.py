"""The README's results table: rendered from the metrics' own values, and the committed README matches them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied_rft.tools.results import BEGIN, END, main, render, splice

ROOT = Path(__file__).resolve().parents[1]


def _metrics(d: Path) -> Path:
    pair = {"episodes": 100, "both": 30, "only_a": 4, "only_b": 17, "neither": 49, "gap": 13.0, "p_mcnemar": 0.0072}
    table = {
        "sft": {"avg": 34.0, "base": 40.0, "long": 5.0},
        "grpo": {"avg": 47.0, "base": 55.0, "long": 9.0},
        "expert": {"avg": 100.0, "base": 100.0, "long": 100.0},
    }
    files = {
        "eval": {"table": table, "episodes": {"per_split": {"valid_unseen": 100}}, "paired": {"sft->grpo": pair}},
        "grpo.details": {"config": {"group_size": 8, "lr": 1e-4, "filter": {"updates_per_buffer": 2}}},
        "grpo": {
            "updates": 240,
            "filter": {"pass_rate": 0.42},
            "throughput": {"generated_tokens_per_s": 5914.2},
            "heldout": {
                "before": {"samples": 300, "reward_mean": 0.9, "exact_plan_rate": 0.3},
                "after": {"samples": 300, "reward_mean": 0.95, "exact_plan_rate": 0.36},
                "paired": {
                    "reward": {"ci95": [0.01, 0.09]},
                    "accuracy_full": {"only_a": 18, "only_b": 37, "p_mcnemar": 0.0145},
                },
            },
        },
        "sft": {"steps": 700, "first_loss": 7.67, "final_loss": 0.18, "tokens_per_s": 4234.0},
        "distill": {"model": "scripted-oracle(seed=0)", "validate": "none", "accepted": 8605, "kept_gold_rate": 0.7116},
    }
    d.mkdir()
    for name, obj in files.items():
        (d / f"{name}.json").write_text(json.dumps(obj))
    return d


def test_render_takes_every_figure_from_the_metrics(tmp_path):
    out = render(_metrics(tmp_path / "m"))
    assert "100 valid_unseen episodes" in out and "symbolic-simulator proxy" in out
    assert "| SFT | 40.0 | 5.0 | **34.0** |" in out and "| SFT+GRPO | 55.0 | 9.0 | **47.0** |" in out
    assert "4 vs 17 episodes (exact McNemar, p = 0.0072)" in out
    assert "base → SFT, same episodes | — |" in out  # not in the metrics: shown as missing, not invented
    assert "reward 0.900 → 0.950 (95% CI of the gain [+0.010, +0.090])" in out and "18 vs 37, p = 0.015" in out
    assert "240 updates (G = 8, lr 0.0001, K_2 = 2)" in out and "71.2% of them the expert's plan" in out


def test_a_cluster_run_names_its_job_instead_of_a_local_throughput(tmp_path):
    d = _metrics(tmp_path / "m")
    grpo = json.loads((d / "grpo.json").read_text())
    grpo.pop("throughput")
    grpo.update(
        backend="openrlhf",
        steps=30,
        job={
            "submission_id": "embodied-rft-grpo-ab",
            "trainer": "openrlhf.cli.train_ppo_ray",
            "openrlhf_version": "0.11.2",
        },
    )
    (d / "grpo.json").write_text(json.dumps(grpo))
    out = render(d)
    assert (
        "| GRPO | OpenRLHF job `embodied-rft-grpo-ab` (trainer `openrlhf.cli.train_ppo_ray`, OpenRLHF 0.11.2): "
        "30 steps, 240 updates (G = 8, lr 0.0001, K_2 = 2), filter pass rate 0.42 |" in out
    )


def test_splice_replaces_only_the_block_and_check_fails_on_drift(tmp_path):
    m = _metrics(tmp_path / "m")
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\n{BEGIN}\nold table\n{END}\n\nafter\n")
    assert main(["--metrics", str(m), "--readme", str(readme), "--check"]) == 1
    assert main(["--metrics", str(m), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# Title\n\n") and text.endswith(f"{END}\n\nafter\n") and "old table" not in text
    assert main(["--metrics", str(m), "--readme", str(readme), "--check"]) == 0
    with pytest.raises(SystemExit, match="markers"):
        splice("no markers here", "x")


def test_committed_readme_table_matches_the_committed_metrics():
    if not (ROOT / "metrics" / "eval.json").exists():
        pytest.skip("metrics/eval.json absent (no run committed)")
    assert main(["--metrics", str(ROOT / "metrics"), "--readme", str(ROOT / "README.md"), "--check"]) == 0
