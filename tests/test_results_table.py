"""The README's results: the table and the prose verdict are rendered from the metrics' own values, the committed
README matches them, and no figure of a run stands in the README outside the generated blocks (issue 63: a fresh
`make repro` rewrote the table while the prose around it kept the committed run's "40 vs 13")."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from embodied_rft.tools.results import (
    BEGIN,
    END,
    ORDER_BEGIN,
    ORDER_END,
    _p,
    main,
    render,
    render_ordering,
    splice,
)


def generated_blocks(readme: str) -> list[str]:
    """The text of each generated block of ``readme`` (between its markers), in order."""
    return [readme.split(b, 1)[1].split(e, 1)[0] for b, e in ((BEGIN, END), (ORDER_BEGIN, ORDER_END))]


def outside_blocks(readme: str) -> str:
    """``readme`` without its generated blocks: the prose no run rewrites."""
    for b, e in ((BEGIN, END), (ORDER_BEGIN, ORDER_END)):
        head, rest = readme.split(b, 1)
        readme = head + rest.split(e, 1)[1]
    return readme


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
    readme.write_text(
        f"# Title\n\n{BEGIN}\nold table\n{END}\n\nbetween\n\n{ORDER_BEGIN}\nold prose\n{ORDER_END}\nafter\n"
    )
    assert main(["--metrics", str(m), "--readme", str(readme), "--check"]) == 1
    assert main(["--metrics", str(m), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# Title\n\n") and text.endswith(f"{ORDER_END}\nafter\n") and "old table" not in text
    assert "old prose" not in text and f"{END}\n\nbetween\n\n{ORDER_BEGIN}" in text
    assert main(["--metrics", str(m), "--readme", str(readme), "--check"]) == 0
    with pytest.raises(SystemExit, match="markers"):
        splice("no markers here", "x")
    readme.write_text(f"{BEGIN}\n{END}\n")  # a README without the prose block is refused, not half-written
    with pytest.raises(SystemExit, match="results:ordering"):
        main(["--metrics", str(m), "--readme", str(readme)])


def test_committed_readme_table_matches_the_committed_metrics():
    if not (ROOT / "metrics" / "eval.json").exists():
        pytest.skip("metrics/eval.json absent (no run committed)")
    assert main(["--metrics", str(ROOT / "metrics"), "--readme", str(ROOT / "README.md"), "--check"]) == 0


def _seeds(d: Path, grpo_sd: float = 7.3, gaps: tuple = (11.25, 5.0, -1.0)) -> None:
    ov = lambda m, sd: {"success": {"mean": m, "sd": sd}}  # noqa: E731
    (d / "seeds_table.json").write_text(
        json.dumps(
            {
                "outcomes": {
                    "pipeline/sft": ov(29.31, 4.34),
                    "pipeline/grpo": ov(38.2, grpo_sd),
                    "no_sft/grpo": ov(0, 0),
                },
                "comparisons": {
                    "sft_to_grpo": {
                        "seeds": [0, 1, 2],
                        "success_gap_per_seed": list(gaps),
                        "only_a": 42,
                        "only_b": 106,
                        "p_mcnemar_pooled": 1.4e-7,
                    }
                },
            }
        )
    )


def test_ordering_prose_says_what_the_metrics_say(tmp_path):
    d = _metrics(tmp_path / "m")
    (d / "base.json").write_text(json.dumps({"parameters": 3674368}))
    out = render_ordering(d, d / "seeds_table.json").replace("\n", " ")
    assert out.startswith("In the default run (3.7M parameters): base < SFT: no paired result in `metrics/eval.json`;")
    # 13.0 points, 17 episodes solved by GRPO alone and 4 by SFT alone, p = 0.0072 < 0.05
    assert (
        "SFT < SFT+GRPO holds, +13.0 points (SFT+GRPO alone solved 17 episodes, SFT alone 4; exact McNemar p = 0.0072)"
        in out
    )
    assert out.endswith("Seed spread: `make seeds` has not run (it writes `results/seeds/table.json` and `table.md`).")
    _seeds(d)
    out = render_ordering(d, d / "seeds_table.json").replace("\n", " ")
    assert (
        "SFT 29.3 ± 4.3% → SFT+GRPO 38.2 ± 7.3%, higher on 2 of 3 seeds, the gap of means (+8.9) within the spread"
        in out
    )
    assert (
        "(sum of the s.d. 11.6); pooled, SFT+GRPO alone solved 106 episodes, SFT alone 42 (exact McNemar p < 1e-6)"
        in out
    )
    assert out.endswith("; GRPO without SFT 0.0 ± 0.0%.")
    (d / "seeds_table.json").write_text(json.dumps({"seeds": [0], "outcomes": {}, "comparisons": {}}))
    assert (
        render_ordering(d, d / "seeds_table.json")
        .replace("\n", " ")
        .endswith("Seed spread: `results/seeds/table.md` (it has no SFT < SFT+GRPO comparison to quote here).")
    )
    _seeds(d)
    ev = json.loads((d / "eval.json").read_text())
    for gap, p, verdict in (
        (13.0, 0.2, "points the same way, not significantly (p ≥ 0.05)"),
        (-2.5, 0.6, "does not hold"),
    ):
        ev["paired"]["sft->grpo"].update(gap=gap, p_mcnemar=p)
        (d / "eval.json").write_text(json.dumps(ev))
        out = render_ordering(d, d / "seeds_table.json").replace("\n", " ")
        assert f"SFT < SFT+GRPO {verdict}, {gap:+.1f} points" in out


# figures as the README writes them: a signed number is a difference ("+11.2"), an unsigned one a level ("45.4");
# whole numbers below 100 are too common in prose to tell apart (counts of seeds, steps, subsets), so they count
# only inside "a vs b" (both orders); "p < 1e-6" is a bound of the format, not a figure
_NUM = r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])"


def _figures(text: str) -> set[str]:
    text = re.sub(r"p < \S+", "", " ".join(text.split()))
    out = set()
    for a, b in re.findall(rf"({_NUM}) vs ({_NUM})", text):
        out |= {f"{a} vs {b}", f"{b} vs {a}"}
    for n in re.findall(_NUM, text):
        if "." in n or "e" in n or int(n.lstrip("+-−").replace(",", "")) >= 100:
            out.add(n)
    return out


# what a rerun cannot change: the size of the evaluation and of training, the config, the seeds themselves
_FIXED = {"episodes", "per_split", "samples", "n", "steps", "updates", "parameters", "seeds", "prompts", "config"}


def _perturb(obj, key: str = ""):
    if key in _FIXED:
        return obj
    if isinstance(obj, dict):
        return {k: _perturb(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_perturb(v) for v in obj]
    if isinstance(obj, bool) or not isinstance(obj, int | float):
        return obj
    return obj + 5 if isinstance(obj, int) else round(obj * 0.8 + 0.11, 6)


def test_no_figure_of_a_run_stands_in_the_readme_outside_the_generated_blocks(tmp_path):
    """Another run's metrics (every outcome moved) rewrite the README: its prose outside the two generated blocks
    is unchanged and holds none of the committed run's figures, and the blocks carry the new ones."""
    if not (ROOT / "metrics" / "eval.json").exists():
        pytest.skip("metrics/eval.json absent (no run committed)")
    fresh = tmp_path / "metrics"
    fresh.mkdir()
    for name in ("eval", "grpo", "grpo.details", "sft", "distill", "base", "seeds"):
        if (ROOT / "metrics" / f"{name}.json").exists():
            obj = json.loads((ROOT / "metrics" / f"{name}.json").read_text())
            (fresh / f"{name}.json").write_text(json.dumps(_perturb(obj)))
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    assert main(["--metrics", str(fresh), "--readme", str(readme)]) == 0
    committed, rerun = (ROOT / "README.md").read_text(), readme.read_text()
    assert outside_blocks(rerun) == outside_blocks(committed)
    before, after = (_figures("\n".join(generated_blocks(t))) for t in (committed, rerun))
    run_figures = before - after  # the committed run's figures that another run changes
    ev, fresh_ev = (json.loads((d / "eval.json").read_text()) for d in (ROOT / "metrics", fresh))
    pair, fresh_pair = ev["paired"]["sft->grpo"], fresh_ev["paired"]["sft->grpo"]
    # the figures issue 63 found in the prose are among them: "+11.2 points", "40 vs 13", "p = 0.0003", "45.4"
    assert {
        f"{pair['gap']:+.1f}",
        f"{pair['only_b']} vs {pair['only_a']}",
        f"{ev['table']['grpo']['avg']:.1f}",
    } <= run_figures
    p_text = _p(pair["p_mcnemar"])  # "p = 0.0003" as the README writes it ("p < 1e-6" is a bound)
    assert p_text.startswith("p <") or p_text.split()[-1] in run_figures
    stray = run_figures & _figures(outside_blocks(committed))
    assert not stray, (
        f"figures of the committed run in the README's prose outside the generated blocks: {sorted(stray)}"
    )
    assert f"{fresh_pair['gap']:+.1f} points" in " ".join(generated_blocks(rerun)[1].split())
    if (ROOT / "results/seeds/table.json").exists():
        sft = json.loads((ROOT / "results/seeds/table.json").read_text())["outcomes"]["pipeline/sft"]["success"]
        assert f"SFT {sft['mean']:.1f} ± {sft['sd']:.1f}%" in " ".join(generated_blocks(rerun)[1].split())
