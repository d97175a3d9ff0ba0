"""VeGAS as a study (conf/study/vegas.yaml, vegas/study.py): the published table (results/vegas/table.json) follows
from the counts it stores; the study loads and generates one shared ``bon`` run per arm whose deps are the models it reads; its table pools each
selector's discordant episodes over seeds (overall, long-horizon, against ``sample``) from the runs'
``bon.details.json``; and a missing zero-shot verifier is refused before anything runs."""

from __future__ import annotations

import json
import types
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from embodied_rft.core.stats import mcnemar_exact
from embodied_rft.study import __main__ as cli
from embodied_rft.study.dvcgen import Generator
from embodied_rft.study.layout import Pipeline, eval_runs
from embodied_rft.study.spec import load
from embodied_rft.study.table import RunContext, build, merge, read_runs, rebuild, render
from embodied_rft.vegas import study as vegas_study  # noqa: F401 - registers the bon reader, sections, check, task

REPO = Path(__file__).resolve().parents[2]
STUDY = REPO / "conf/study/vegas.yaml"
TABLE = REPO / "results/vegas/table.json"
SELECTORS = ("greedy", "sample", "sc", "bon_zs", "bon_ft", "bon_oracle")


def _roundtrip(x: dict) -> dict:
    return json.loads(json.dumps(x))


def _pipe() -> Pipeline:
    return Pipeline.read(REPO / "dvc.yaml", REPO / "conf/config.yaml")


# --- the migrated table ---


def test_pooled_figures_follow_from_the_stored_counts() -> None:
    if not TABLE.is_file():
        pytest.skip("results/vegas/table.json is written by `make study S=vegas` (five seeds; docs/experiments.md)")
    table = json.loads(TABLE.read_text("utf-8"))
    assert _roundtrip(rebuild(table, load(STUDY))) == table
    assert (REPO / "results/vegas/table.md").read_text("utf-8") == render(table)


# --- the study ---


def test_the_study_loads_and_its_selectors_share_one_bon_run() -> None:
    study = load(STUDY)
    assert study.name == "vegas" and study.seeds == (0, 1, 2, 3, 4) and study.run == ("vegas",)
    stages = Generator(study, _pipe(), REPO / "conf").stages()
    assert list(stages) == [f"vegas-{s}" for s in ("prepare", "decompose", "distill", "base", "sft")] + [
        "vegas-synth",
        "vegas-verifier",
        "vegas-bon",  # one run for the six played selectors (SmolLM2 scores live candidates only)
        "table",
    ]
    runs = eval_runs(study, "vegas")
    assert list(runs) == ["bon"] and [e.mode for e in runs["bon"]] == list(SELECTORS)
    bon = stages["vegas-bon"]["do"]
    arm = "runs/vegas/seed-${item}/vegas"
    for dep in (f"{arm}/models/sft", f"{arm}/models/verifier", f"{arm}/data/episodes"):
        assert dep in bon["deps"]
    assert f"{arm}/models/grpo" not in bon["deps"]  # bon.policy=sft: the SFT policy's candidates
    assert {f"{arm}/bon/metrics/bon.details.json": {"cache": False, "persist": True}} in bon["outs"]
    assert f"'paths.work_dir={arm}/bon/.cache/work'" in bon["cmd"]
    assert stages["vegas-verifier"]["do"]["outs"][0] == {f"{arm}/models/verifier": {"persist": True}}
    table = stages["table"]
    assert [d for d in table["deps"] if d.startswith("runs/")] == [
        f"runs/vegas/seed-{s}/vegas/bon/metrics/bon.details.json" for s in range(5)
    ]
    assert "src/embodied_rft/vegas/study.py" in table["deps"]


def test_the_grpo_policy_variant_reads_its_grpo_model(tmp_path) -> None:
    (tmp_path / "arms").mkdir()
    (tmp_path / "arms" / "vegas.yaml").write_text((REPO / "conf/study/arms/vegas.yaml").read_text())
    f = tmp_path / "g.yaml"
    f.write_text("seeds: [0]\nplugins: [embodied_rft.vegas.study]\ninclude: [arms/vegas]\nrun: [vegas_grpo]\n")
    gen = Generator(load(f), _pipe(), REPO / "conf")
    stages = gen.stages()
    assert "vegas_grpo-grpo" in stages and "vegas-verifier" in stages and "vegas_grpo-verifier" not in stages
    bon = stages["vegas_grpo-bon"]["do"]
    # its candidates come from its own GRPO model (not a dep of dvc.yaml's bon), its verifier is vegas's
    assert "runs/g/seed-${item}/vegas_grpo/models/grpo" in bon["deps"]
    assert "runs/g/seed-${item}/vegas/models/verifier" in bon["deps"]
    assert "runs/g/seed-${item}/vegas/models/sft" in bon["deps"]  # bon_zs: the SFT policy as verifier
    texts = gen.compose()
    assert yaml.safe_load(texts["vegas_grpo"])["bon"]["policy"] == "grpo"
    assert yaml.safe_load(texts["vegas"])["bon"]["policy"] == "sft"


def test_a_missing_zero_shot_verifier_is_refused_before_anything_runs(capsys, monkeypatch) -> None:
    """The GGUF file is no stage's dep: ``make study S=vegas`` refuses before DVC runs the hours before ``bon``."""
    monkeypatch.chdir(REPO)

    def ran(cmd, *a, **kw):
        raise AssertionError(f"ran {cmd[:3]} although the study was refused first")

    monkeypatch.setattr(cli, "subprocess", types.SimpleNamespace(run=ran))
    before = {p: p.read_bytes() for p in (REPO / "studies" / "vegas").rglob("*") if p.is_file()}
    assert cli.main(["run", "vegas", "-o", "bon.zs_model.gguf_package=no_such_package"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: conf/study/vegas.yaml: arm 'vegas', run 'bon': "), err
    assert "bon.zs_model: model.gguf_package: Python package 'no_such_package' is not installed" in err[0]
    assert {p: p.read_bytes() for p in (REPO / "studies" / "vegas").rglob("*") if p.is_file()} == before
    # without bon_zs_smollm2 among the played or scored selectors, nothing needs it
    no_zs = ("bon.selectors=[greedy,sample,bon_ft]", "bon.live_verifiers=[]")
    study = replace(load(STUDY), overrides=(*no_zs, "bon.zs_model.gguf_package=no_such_package"))
    assert "vegas-bon" in Generator(study, _pipe(), REPO / "conf").stages()


# --- the table from runs ---


def _details(success: dict[str, list[int]], long: range = range(0), coverage: dict | None = None) -> dict:
    """A ``bon.details.json`` record: per selector, episodes ``e0``... with these outcomes (those numbered in
    ``long`` long-horizon, the rest base); one planner call per episode, two model calls each."""
    subset = {f"e{i}": "long_horizon" if i in long else "base" for i in range(max(map(len, success.values())))}
    selectors = {}
    for sel, v in success.items():
        rate = round(100 * sum(v) / len(v), 2)
        selectors[sel] = {
            "episodes": len(v),
            "success": rate,
            "planner_calls": len(v),
            "model_calls_per_call": 2.0,
            "interactive": {
                "overall": {"success_rate": rate, "failures_followed": 4, "repeat_after_failure_rate": 0.25},
                "per_subset": {"base": {"success_rate": rate}},
            },
        }
    return {
        "selectors": selectors,
        "coverage": coverage or {},
        "live_auroc": {},
        "episode_success": {sel: {f"e{i}": bool(x) for i, x in enumerate(v)} for sel, v in success.items()},
        "episode_subset": subset,
    }


def _write(root: Path, seed: int, rec: dict) -> None:
    f = root / f"runs/vegas/seed-{seed}/vegas/bon/metrics/bon.details.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(rec))


def _table(root: Path, study) -> dict:
    ctx = RunContext(study, list(study.seeds), root)
    return _roundtrip(build(study, read_runs(ctx), ctx))


def _pair(only_a: int, only_b: int, both: int, n: int = 40) -> tuple[list[int], list[int]]:
    a = [1] * both + [1] * only_a + [0] * only_b
    b = [1] * both + [0] * only_a + [1] * only_b
    return a + [0] * (n - len(a)), b + [0] * (n - len(b))


def _study(*comparisons: str):
    """The vegas study reading greedy, sample and bon_ft only, with the comparisons among them."""
    study = load(STUDY)
    return replace(
        study,
        modes=("greedy", "sample", "bon_ft"),
        comparisons=tuple(c for c in study.comparisons if c.id in comparisons),
        checks=tuple(c for c in study.checks if c.args.get("comparison") in (None, *comparisons)),
    )


def test_the_table_pools_the_discordant_episodes_of_each_selector(tmp_path) -> None:
    study = _study("greedy_to_bon_ft", "greedy_to_bon_ft_long")
    cov = {"greedy_correct_rate": 0.2, "coverage_at": {"4": 0.32}, "headroom_at_4": 0.12, "planner_calls": 40}
    # bon_ft solves 20 of 40 on every seed; greedy alone / bon_ft alone: 2 / 8, 3 / 7, 5 / 4, all of them among the
    # seed's 10 long-horizon episodes
    for seed, (only_a, only_b) in enumerate([(2, 8), (3, 7), (5, 4)]):
        greedy, ft = _pair(only_a, only_b, both=20 - only_b)
        long = range(20 - only_b, 30 - only_b)
        rec = _details({"greedy": greedy, "sample": greedy, "bon_ft": ft}, long=long, coverage=cov)
        rec["live_auroc"] = {"bon_ft": {"items": 50, "positives": 9, "auroc": 0.9}}
        _write(tmp_path, seed, rec)
    t = _table(tmp_path, study)
    p = t["comparisons"]["greedy_to_bon_ft"]
    assert (p["only_a"], p["only_b"], p["episodes"], p["positive_seeds"]) == (10, 19, 120, 2)
    assert p["p_mcnemar_pooled"] == mcnemar_exact(10, 19) and p["success_gap_pooled"] == 7.5
    assert p["success_gap_per_seed"] == [15.0, 10.0, -2.5]
    assert p["p_mcnemar_per_seed"] == [mcnemar_exact(2, 8), mcnemar_exact(3, 7), 1.0]
    lp = t["comparisons"]["greedy_to_bon_ft_long"]  # the long-horizon episodes alone
    assert (lp["only_a"], lp["only_b"], lp["episodes"]) == (10, 19, 30) and lp["subset"] == "long_horizon"
    assert lp["success_gap_per_seed"] == [60.0, 40.0, -10.0] and lp["counts"] == {}
    checks = t["checks"]
    assert checks["coverage_at_4_10pts_over_greedy_correct"]["holds"]
    assert checks["bon_ft_over_greedy_5pts_p05"]["holds"] == (p["p_mcnemar_pooled"] < 0.05) is False
    # no run wrote within-call figures here: those checks are undecided, not failed
    assert checks["bon_ft_within_call_075_lower_070"]["holds"] is None
    assert checks["coverage_at_4_10pts_over_greedy_correct"]["figures"] == {"headroom_at_4_pts": [12.0] * 3}
    ft = t["outcomes"]["vegas/bon_ft"]
    assert ft["success"]["mean"] == 50.0 and [r["success"] for r in ft["per_seed"]] == [50.0] * 3
    assert ft["counts_pooled"] == {
        "model_calls_per_call": 2.0,
        "recovered_next_call_correct_rate": None,
        "recovered_next_call_rate": None,
        "repeat_after_failure_rate": 0.25,
    }
    auroc = t["sections"]["bon_live_auroc"]["per_seed"]
    assert [auroc[s]["bon_ft"]["auroc"] for s in ("0", "1", "2")] == [0.9, 0.9, 0.9]
    text = render(t)
    assert "| vegas/bon_ft | s0 50.0, s1 50.0, s2 50.0 | 50.0 ± 0.0 |" in text
    assert (
        "| greedy_to_bon_ft | vegas/bon_ft vs vegas/greedy | s0 +15.0 (0.109), s1 +10.0 (0.344), s2 -2.5 (1) | 10 | 19 | +7.5 |"
        in text
    )
    assert "| bon_ft | s0 0.900 (50 items), s1 0.900 (50 items), s2 0.900 (50 items) | 0.900 |" in text
    assert "| 0 | 40 | 20.0 | 32.0 | +12.0 |" in text
    # tables of disjoint seeds merge into the table of all of them, the VeGAS sections too
    parts = [_table(tmp_path, replace(study, seeds=keep)) for keep in ((2,), (0, 1))]
    assert _roundtrip(merge(parts, study)) == t


def test_each_verifier_selector_pairs_with_one_sample_on_the_same_episodes(tmp_path) -> None:
    study = replace(_study("sample_to_bon_ft"), seeds=(0, 1), sections=())
    for seed, (sample, ft) in enumerate([([1, 0, 0, 1], [1, 1, 1, 0]), ([0, 0, 1, 1], [0, 1, 0, 1])]):
        # bon_ft played one more episode than sample: only the common ones pair
        _write(tmp_path, seed, _details({"greedy": sample, "sample": sample, "bon_ft": [*ft, 1]}))
    t = _table(tmp_path, study)
    p = t["comparisons"]["sample_to_bon_ft"]
    # seed 0: only sample 1, only bon_ft 2; seed 1: 1 and 1
    assert (p["only_a"], p["only_b"], p["episodes"], p["success_gap_per_seed"]) == (2, 3, 8, [25.0, 0.0])
    assert p["p_mcnemar_pooled"] == mcnemar_exact(2, 3) and p["success_gap_pooled"] == 12.5
    assert "| sample_to_bon_ft | vegas/bon_ft vs vegas/sample | s0 +25.0 (1), s1 +0.0 (1) | 2 | 3 | +12.5 |" in render(
        t
    )
    # a seed whose run did not play `sample`: refused, naming the run's file, rather than a partial pool
    _write(tmp_path, 1, _details({"greedy": [1], "bon_ft": [0]}))
    with pytest.raises(ValueError, match=r"seed-1/vegas/bon/metrics/bon.details.json: no selector 'sample'"):
        _table(tmp_path, study)
