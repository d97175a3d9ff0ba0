"""Offline metrics, the Table-1-shaped report, the config file, and run_evaluate end to end on tiny models."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from embodied_rft.config import ConfigError, build
from embodied_rft.data.decompose import decompose_episode
from embodied_rft.data.response import format_response
from embodied_rft.evaluate import (
    PROXY_LABEL,
    EvalConfig,
    render_markdown,
    run_evaluate,
    score_responses,
    select_episodes,
    split_paths,
    table_rows,
)
from embodied_rft.evaluate.report import plot_rows
from embodied_rft.reward import RewardConfig
from tests.helpers import tiny_checkpoints as tc

REPO = Path(__file__).resolve().parents[2]


def _samples(n_eps: int = 2) -> list[dict]:
    out = []
    for ep in tc.episodes()[:n_eps]:
        out.extend(decompose_episode(ep, tc.PROMPT))
    return out


def _gold(s: dict, keep: int | None = None) -> str:
    gold = json.loads(s["label"])["gold"]
    return format_response([tuple(p) for p in gold[:keep]])


# ---- offline metrics ---------------------------------------------------------------------------------
def test_offline_metrics_of_known_responses():
    samples = _samples()
    k = len(samples)
    gold = score_responses(samples, [_gold(s) for s in samples], RewardConfig())
    assert gold["samples"] == k
    assert (gold["json_valid_rate"], gold["format_rate"], gold["exact_plan_rate"], gold["prefix_accuracy"]) == (
        1.0,
        1.0,
        1.0,
        1.0,
    )
    assert gold["reward_mean"] == 1.5 and gold["match_mean"] == 0.25
    junk = score_responses(samples, ["no json here"] * k, RewardConfig())
    assert (junk["json_valid_rate"], junk["reward_mean"], junk["exact_plan_rate"]) == (0.0, 0.0, 0.0)
    # one correct first step out of k remaining: prefix credit 1*2/(k(k+1)), never "exact" unless k == 1
    first = score_responses(samples, [_gold(s, keep=1) for s in samples], RewardConfig())
    expect = (
        sum(2 / (len(json.loads(s["label"])["gold"]) * (len(json.loads(s["label"])["gold"]) + 1)) for s in samples) / k
    )
    assert first["prefix_accuracy"] == pytest.approx(expect, abs=1e-4)
    assert first["exact_plan_rate"] == pytest.approx(
        sum(len(json.loads(s["label"])["gold"]) == 1 for s in samples) / k, abs=1e-4
    )
    assert set(first["per_subset"]) == {s["subset"] for s in samples}
    with pytest.raises(ValueError, match="samples but"):
        score_responses(samples, [], RewardConfig())


# ---- report --------------------------------------------------------------------------------------------
def _model(per_subset: dict[str, float], reference: bool = False) -> dict:
    per = {s: {"episodes": 2, "success_rate": v} for s, v in per_subset.items()}
    return {"reference": reference, "interactive": {"per_subset": per, "overall": {}}, "offline": None}


def test_table_follows_the_paper_columns_and_averages_present_subsets():
    models = {
        "sft": _model({"base": 50.0, "common_sense": 0.0, "long_horizon": 100.0}),
        "expert": _model({"base": 100.0}, True),
    }
    rows = table_rows(models)
    assert list(rows["sft"]) == ["avg", "base", "common", "complex", "visual", "spatial", "long"]
    assert rows["sft"] == {
        "avg": 50.0,
        "base": 50.0,
        "common": 0.0,
        "complex": None,
        "visual": None,
        "spatial": None,
        "long": 100.0,
    }
    md = render_markdown(models)
    assert PROXY_LABEL in md.splitlines()[0]
    assert "| model | avg | base | common | complex | visual | spatial | long |" in md
    assert "| sft | 50.0 | 50.0 | 0.0 | – | – | – | 100.0 |" in md
    assert "| expert (reference) | 100.0 | 100.0 |" in md
    assert plot_rows(models)[:2] == [
        {"label": "base | sft", "model": "sft", "subset": "base", "success_rate": 50.0},
        {"label": "common_sense | sft", "model": "sft", "subset": "common_sense", "success_rate": 0.0},
    ]


def test_episode_subsample_is_balanced_across_subsets_and_seeded():
    eps = list(tc.episodes("valid_seen", 12))
    six = select_episodes(eps, 6, seed=0)
    assert len(six) == 6 and len({e["subset"] for e in six}) == 6
    assert [e["episode_id"] for e in six] == [e["episode_id"] for e in select_episodes(eps, 6, seed=0)]
    assert [e["episode_id"] for e in six] != [e["episode_id"] for e in select_episodes(eps, 6, seed=1)]
    assert select_episodes(eps, 0, seed=0) == eps


# ---- config ----------------------------------------------------------------------------------------
def test_conf_file_builds_and_comments_every_key():
    from omegaconf import OmegaConf

    path = REPO / "conf" / "evaluate" / "default.yaml"
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\s*([a-z_]+):", line)
        if m:
            assert lines[i - 1].strip().startswith("#"), (
                f"{path.name}:{i + 1}: key '{m.group(1)}' has no comment above it"
            )
    conf = OmegaConf.create({"seed": 3, "evaluate": yaml.safe_load(path.read_text())})
    cfg = build(EvalConfig, OmegaConf.to_container(conf, resolve=True)["evaluate"], "evaluate")
    assert cfg.seed == 3 and cfg.generation.seed == 3 and cfg.generation.greedy
    assert (cfg.max_env_steps, cfg.max_invalid_actions) == (30, 10)
    with pytest.raises(ConfigError, match=r"^evaluate\.max_invalid_actions: must be >= 1"):
        build(EvalConfig, {"max_invalid_actions": 0}, "evaluate")
    with pytest.raises(ConfigError, match=r"^evaluate\.generation\.top_p"):
        build(EvalConfig, {"generation": {"top_p": 0}}, "evaluate")
    with pytest.raises(ConfigError, match=r"evaluate\.max_episode: unknown key; did you mean 'max_episodes'"):
        build(EvalConfig, {"max_episode": 3}, "evaluate")


# ---- end to end -------------------------------------------------------------------------------------
def test_run_evaluate_end_to_end_and_resume(tmp_path):
    eps = list(tc.episodes())[:3]
    ep_path = tmp_path / "episodes" / "valid_seen.jsonl"
    ep_path.parent.mkdir()
    ep_path.write_text("".join(json.dumps(e) + "\n" for e in eps))
    val = tmp_path / "decomposed" / "val.jsonl"
    val.parent.mkdir()
    val_samples = list(decompose_episode(eps[0], tc.PROMPT))[:1] + list(decompose_episode(eps[1], tc.PROMPT))[:1]
    val.write_text("".join(json.dumps(s) + "\n" for s in val_samples))
    cfg = build(
        EvalConfig,
        {
            "max_episodes": 0,
            "max_planner_calls": 2,
            "max_offline_samples": -1,
            "episodes_per_task": 3,
            "generation": {"max_new_tokens": 120, "device": "cpu"},
        },
        "evaluate",
    )
    kw = dict(
        models={"base": tc.text_model(), "sft": tc.fitted_model()},
        episodes_paths=split_paths(cfg, tmp_path / "episodes"),
        val_samples_path=val,
        metrics_path=tmp_path / "metrics" / "evaluate.json",
        report_path=tmp_path / "reports" / "evaluate.md",
        plots_dir=tmp_path / "plots",
        work_dir=tmp_path / "work",
        prompt_cfg=tc.PROMPT,
    )
    with tc.one_thread():
        metrics = run_evaluate(cfg, **kw)
    on_disk = json.loads((tmp_path / "metrics" / "evaluate.details.json").read_text())
    assert on_disk["table"] == metrics["table"]
    # the metrics file holds the headline: the trained models' table and the paired tests, no per-episode data
    head = json.loads((tmp_path / "metrics" / "evaluate.json").read_text())
    assert head["table"] == {k: v for k, v in metrics["table"].items() if k in ("base", "sft", "grpo")}
    assert "models" not in head and "config" not in head
    assert metrics["label"] == PROXY_LABEL and metrics["episodes"] == {"total": 3, "per_split": {"valid_seen": 3}}
    table = metrics["table"]
    assert list(table) == ["base", "sft", "expert", "random"]
    assert table["expert"]["avg"] == 100.0 and table["random"]["avg"] == 0.0
    m = metrics["models"]
    # the fitted model solves episode 0 (its subset is base), the untrained one nothing
    assert m["sft"]["interactive"]["overall"]["success_rate"] == pytest.approx(100 / 3, abs=0.01)
    assert table["sft"]["base"] == 100.0
    assert m["base"]["interactive"]["overall"]["success_rate"] == 0.0
    assert m["base"]["interactive"]["overall"]["parse_failure_rate"] == 1.0
    # offline: the fitted model answers its sample exactly, the untrained one emits no JSON
    assert m["sft"]["offline"]["samples"] == 2 and m["sft"]["offline"]["exact_plan_rate"] == 0.5
    assert m["base"]["offline"]["json_valid_rate"] == 0.0
    assert m["expert"]["offline"] is None and m["expert"]["reference"] is True
    # paired comparison on the same episodes: sft alone solves episode 0
    ids = [e["episode_id"] for e in eps]
    assert m["sft"]["episode_success"] == {ids[0]: True, ids[1]: False, ids[2]: False}
    assert metrics["paired"] == {
        "base->sft": {
            "episodes": 3,
            "both": 0,
            "only_a": 0,
            "only_b": 1,
            "neither": 2,
            "gap": pytest.approx(33.33),
            "p_mcnemar": 1.0,
        }
    }
    report = (tmp_path / "reports" / "evaluate.md").read_text()
    assert "**base -> sft (paired)**: +33.3 pts on the same 3 episodes: 1 solved by sft alone" in report
    assert f"# Evaluation ({PROXY_LABEL})" in report
    assert [e["subset"] for e in eps] == ["base", "common_sense", "complex_instruction"]
    assert "| sft | 33.3 | 100.0 | 0.0 | 0.0 | – | – | – |" in report  # subsets without episodes show –
    plots = json.loads((tmp_path / "plots" / "evaluate_success_by_subset.json").read_text())
    assert {"label": "base | expert", "model": "expert", "subset": "base", "success_rate": 100.0} in plots
    # resume: a second run plays nothing again and reports the same numbers
    results = tmp_path / "work" / "sft" / "episodes.jsonl"
    before = results.read_text()
    with tc.one_thread():
        again = run_evaluate(cfg, **kw)
    assert results.read_text() == before
    assert again["table"] == metrics["table"]
    assert again["timing"]["sft"]["interactive_s"] < metrics["timing"]["sft"]["interactive_s"]


def test_run_evaluate_names_a_missing_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match=r"model 'grpo': .* is not a checkpoint directory"):
        run_evaluate(
            EvalConfig(),
            {"grpo": tmp_path / "nope"},
            [],
            None,
            tmp_path / "m.json",
            tmp_path / "r.md",
            tmp_path,
            tmp_path,
        )


def test_exact_mcnemar_against_hand_computed_binomial_tails():
    from embodied_rft.core.stats import mcnemar_exact, paired

    assert mcnemar_exact(0, 0) == 1.0
    # 0 vs 6 discordant: 2 * 0.5**6
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_exact(6, 0) == mcnemar_exact(0, 6)
    # 2 vs 8: 2 * (1 + 10 + 45) / 1024
    assert mcnemar_exact(2, 8) == pytest.approx(112 / 1024)
    assert mcnemar_exact(5, 5) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)
    with pytest.raises(ValueError, match="share no evaluated episode"):
        paired({"a": True}, {"b": True})
