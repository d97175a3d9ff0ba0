"""make seeds: the per-seed runner's commands and the mean ± spread summary."""

from __future__ import annotations

import json
import math
from pathlib import Path
from unittest.mock import ANY

import pytest
import yaml

from embodied_rft.tools import seeds

REPO = Path(__file__).resolve().parents[1]


def _eval(
    root: Path, rates: dict[str, float], subset_rates: dict[str, float] | None = None, name: str = "metrics"
) -> None:
    models = {}
    for model, rate in rates.items():
        per = {k: {"success_rate": v} for k, v in (subset_rates or {"base": rate}).items()}
        models[model] = {"interactive": {"overall": {"success_rate": rate}, "per_subset": per}}
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "eval.json").write_text(json.dumps({"models": models}))


def test_summary_is_mean_and_sample_sd_with_ordering_checks(tmp_path: Path) -> None:
    per_seed = {0: (0.0, 30.0, 40.0), 1: (0.0, 20.0, 35.0), 2: (5.0, 25.0, 45.0)}
    runs = {}
    for s, (b, f, g) in per_seed.items():
        runs[s] = tmp_path / f"seed-{s}"
        _eval(runs[s], {"base": b, "sft": f, "grpo": g})
        _eval(runs[s] / "ablation_no_sft", {"grpo": 0.0})
        (runs[s] / "metrics" / "grpo.json").write_text(
            json.dumps(
                {
                    "heldout": {
                        "before": {"reward_mean": 0.5, "exact_plan_rate": 0.2},
                        "after": {"reward_mean": 0.6 + s / 10, "exact_plan_rate": 0.3},
                    }
                }
            )
        )
    out = seeds.summarise(runs, ablation=True)
    sft = out["success"]["SFT"]["overall"]
    assert sft["values"] == [30.0, 20.0, 25.0] and sft["mean"] == pytest.approx(25.0)
    assert sft["sd"] == pytest.approx(math.sqrt((5.0**2 + 5.0**2 + 0) / 2))
    assert (sft["min"], sft["max"]) == (20.0, 30.0)
    assert out["success"]["GRPO without SFT"]["overall"]["mean"] == 0.0
    base_sft = out["ordering"]["base < SFT"]
    assert base_sft["beyond_spread"] and base_sft["every_seed"]
    sft_grpo = out["ordering"]["SFT < SFT+GRPO"]
    assert sft_grpo["gap"] == pytest.approx(15.0) and sft_grpo["every_seed"]
    assert sft_grpo["beyond_spread"] == (15.0 > sft["sd"] + out["success"]["SFT+GRPO"]["overall"]["sd"])
    assert out["grpo_heldout"]["grpo heldout reward_mean after"]["values"] == pytest.approx([0.6, 0.7, 0.8])
    text = seeds.render(out)
    assert (
        "| SFT | 25.0 ± 5.0 |" in text
        and "| base < SFT | +23.3 |" in text
        and "| base < SFT |" in text
        and "proxy" in text
    )
    # these grpo.json files predate the per-prompt comparison: nothing pooled, nothing rendered
    assert out["grpo_heldout_paired"] is None and "prompt by prompt" not in text


def test_heldout_prompt_pairs_are_pooled_over_seeds(tmp_path: Path) -> None:
    runs = {}
    for s, (up, down, ob, oa) in enumerate([(30, 10, 2, 6), (20, 20, 3, 3), (25, 15, 1, 5)]):
        runs[s] = tmp_path / f"seed-{s}"
        _eval(runs[s], {"base": 0.0, "sft": 20.0, "grpo": 25.0})
        paired = {
            "n": 300,
            "reward": {"up": up, "down": down, "same": 300 - up - down, "mean_diff": 0.01 * s},
            "accuracy_full": {"only_a": ob, "only_b": oa},
        }
        (runs[s] / "metrics" / "grpo.json").write_text(json.dumps({"heldout": {"paired": paired}}))
    hp = seeds.summarise(runs, ablation=False)["grpo_heldout_paired"]
    assert (hp["prompts"], hp["reward_up"], hp["reward_down"]) == (900, 75, 45)
    assert (hp["accuracy_full_only_before"], hp["accuracy_full_only_after"]) == (6, 14)
    assert hp["reward_p_sign"] == pytest.approx(seeds.mcnemar_exact(45, 75))
    assert hp["accuracy_full_p_mcnemar"] == pytest.approx(seeds.mcnemar_exact(6, 14))
    assert hp["reward_mean_diff_per_seed"] == [0.0, 0.01, 0.02]
    assert "higher after GRPO on 75, lower on 45" in seeds.render(seeds.summarise(runs, ablation=False))


def test_a_gap_inside_the_spread_is_not_called_beyond_it(tmp_path: Path) -> None:
    runs = {}
    for s, (f, g) in enumerate([(10.0, 30.0), (30.0, 10.0)]):
        runs[s] = tmp_path / f"seed-{s}"
        _eval(runs[s], {"base": 0.0, "sft": f, "grpo": g})
    check = seeds.summarise(runs, ablation=False)["ordering"]["SFT < SFT+GRPO"]
    assert check["gap"] == pytest.approx(0.0) and not check["beyond_spread"] and not check["every_seed"]


def test_each_seed_runs_every_stage_with_its_own_paths(tmp_path: Path, monkeypatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(seeds, "_run", lambda cmd, log_file: calls.append(cmd))
    root = tmp_path / "seed-7"
    seeds.run_seed(7, root, ["grpo.max_updates=2"], ablation=True)
    stages = [c[2] for c in calls]
    assert stages == [f"stages.{s}" for s in seeds.STAGES] + ["stages.grpo", "stages.evaluate"]
    conf_paths = seeds._conf_paths(REPO / "conf" / "config.yaml")
    for cmd in calls:
        assert "seed=7" in cmd and "grpo.max_updates=2" in cmd
        # every configured output is re-rooted under the seed's folder (later overrides win in Hydra)
        given = {}
        for a in cmd:
            if a.startswith("paths."):
                k, v = a[len("paths.") :].split("=", 1)
                given[k] = v
        assert set(given) == set(conf_paths)
        assert all(v.startswith(root.as_posix()) for v in given.values())
    assert "grpo.init=base" in calls[-2] and "evaluate.models=[grpo]" in calls[-1]


def test_a_rerun_skips_finished_stages_and_reruns_from_the_first_changed_one(tmp_path: Path, monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.chdir(REPO)
    root = tmp_path / "seed-3"

    def fake_run(cmd: list[str], log_file: Path) -> None:
        stage = cmd[2].split(".")[1]
        calls.append(log_file.stem)
        # the last paths.metrics_dir wins, as in Hydra (the ablation re-roots it)
        metrics = Path([a.split("=", 1)[1] for a in cmd if a.startswith("paths.metrics_dir=")][-1])
        metrics.mkdir(parents=True, exist_ok=True)
        (metrics / f"{'eval' if stage == 'evaluate' else stage}.json").write_text("{}")

    monkeypatch.setattr(seeds, "_run", fake_run)
    seeds.run_seed(3, root, [], ablation=True)
    assert calls == [*seeds.STAGES, "grpo_no_sft", "evaluate_no_sft"]
    calls.clear()
    seeds.run_seed(3, root, [], ablation=True)
    assert calls == []
    # a changed grpo section: grpo and everything after it rerun, the earlier stages do not
    real = seeds.stage_params
    monkeypatch.setattr(
        seeds, "stage_params", lambda stage: {**real(stage), **({"changed": True} if stage == "grpo" else {})}
    )
    seeds.run_seed(3, root, [], ablation=True)
    assert calls == ["grpo", "evaluate", "grpo_no_sft", "evaluate_no_sft"]
    calls.clear()
    # changed code of a stage (a file under one of its dvc.yaml deps): it and everything after it rerun
    code = seeds.stage_code
    monkeypatch.setattr(
        seeds, "stage_code", lambda stage: {**code(stage), **({"x.py": "new"} if stage == "sft" else {})}
    )
    seeds.run_seed(3, root, [], ablation=True)
    assert calls == ["sft", "grpo", "evaluate", "grpo_no_sft", "evaluate_no_sft"]
    calls.clear()
    # a data dep rebuilt outside this run (another tool retrained the seed's SFT model): the stages reading it rerun
    (root / "models" / "sft").mkdir(parents=True)
    (root / "models" / "sft" / "model.safetensors").write_bytes(b"retrained")
    seeds.run_seed(3, root, [], ablation=True)
    assert calls == ["grpo", "evaluate", "grpo_no_sft", "evaluate_no_sft"]
    calls.clear()
    # an override is part of every stage's stamp: everything reruns
    seeds.run_seed(3, root, ["sft.max_steps=1"], ablation=False)
    assert calls == list(seeds.STAGES)


def test_stage_params_are_the_sections_dvc_tracks(monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert seeds.stage_params("sft") == {"sft": params["sft"]}
    assert set(seeds.stage_params("evaluate")) == {"evaluate", "prompt", "reward"}
    with pytest.raises(ValueError, match="no stage 'nope'"):
        seeds.stage_params("nope")


def test_stage_code_hashes_the_code_deps_dvc_tracks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "run.py").write_text("print(1)\n")
    dvc = tmp_path / "dvc.yaml"
    dvc.write_text(yaml.safe_dump({"stages": {"s": {"deps": ["run.py", "pkg", "${paths.episodes_dir}"]}}}))
    first = seeds.stage_code("s", dvc)
    assert set(first) == {"run.py", "pkg/a.py"}  # no bytecode, no data deps
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\1")
    assert seeds.stage_code("s", dvc) == first
    (tmp_path / "pkg" / "a.py").write_text("A = 2\n")
    changed = seeds.stage_code("s", dvc)
    assert changed["pkg/a.py"] != first["pkg/a.py"] and changed["run.py"] == first["run.py"]
    (tmp_path / "run.py").unlink()
    with pytest.raises(ValueError, match="dep 'run.py' does not exist"):
        seeds.stage_code("s", dvc)
    with pytest.raises(ValueError, match="no stage 'nope'"):
        seeds.stage_code("nope", dvc)
    # the real dvc.yaml: the world code is part of every stage's stamp from prepare on
    monkeypatch.chdir(REPO)
    assert any(k.startswith("src/embodied_rft/world/") for k in seeds.stage_code("prepare"))


def test_stage_inputs_identify_the_data_deps_under_the_runs_paths(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    model = tmp_path / "sft"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w1")
    args = ["paths.sft_model=elsewhere", f"paths.sft_model={model.as_posix()}", f"paths.base_model={tmp_path}/none"]
    first = seeds.stage_inputs("sft", args)
    # the sft stage's ${paths.*} deps (dvc.yaml), each resolved with the last override or conf/config.yaml's value
    assert set(first) == {"${paths.base_model}", "${paths.distilled}", "${paths.decomposed_dir}/val.jsonl"}
    assert first["${paths.base_model}"] == {"missing": f"{tmp_path.as_posix()}/none"}
    assert seeds.stage_inputs("grpo", args)["${paths.sft_model}"] == {"files": {"model.safetensors": ANY}}
    before = seeds.stage_inputs("grpo", args)
    (model / "model.safetensors").write_bytes(b"w2")  # another tool retrained it: the stamp changes
    assert seeds.stage_inputs("grpo", args) != before
    assert seeds.stage_inputs("prepare", args) == {}


def test_unreadable_paths_config_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("paths: 3\n")
    with pytest.raises(ValueError, match="config.yaml: paths"):
        seeds._conf_paths(bad)


@pytest.mark.slow
def test_make_seeds_runs_two_seeds_and_the_ablation_on_the_micro_preset(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    runs = Path("runs") / f"pytest-{tmp_path.name}"
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "embodied_rft.tools.seeds",
                "--seeds",
                "3",
                "4",
                "--ablation-no-sft",
                "--runs-dir",
                str(runs),
                "--out-metrics",
                str(tmp_path / "seeds.json"),
                "--out-report",
                str(tmp_path / "seeds.md"),
                "experiment=micro",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        out = json.loads((tmp_path / "seeds.json").read_text())
        assert out["seeds"] == [3, 4]
        for label in ("base", "SFT", "SFT+GRPO", "GRPO without SFT"):
            vals = out["success"][label]["overall"]["values"]
            assert len(vals) == 2 and all(0.0 <= v <= 100.0 for v in vals)
        for s in (3, 4):
            ev = json.loads((REPO / runs / f"seed-{s}" / "metrics" / "eval.details.json").read_text())
            # the workspace's dvc.lock describes other files: it is not quoted as this run's lineage
            assert ev["lineage"]["dvc_lock"] is None and ev["lineage"]["not_from_dvc_lock"]
            assert (REPO / runs / f"seed-{s}" / "models" / "grpo_no_sft" / "config.json").exists()
        assert "| SFT |" in (tmp_path / "seeds.md").read_text() and "| SFT |" in r.stdout
    finally:
        shutil.rmtree(REPO / runs, ignore_errors=True)


def test_paired_outcomes_are_pooled_over_seeds_with_an_exact_mcnemar_test(tmp_path: Path) -> None:
    from embodied_rft.evaluate.aggregate import paired

    runs = {}
    # seed 0: grpo alone solves e1, e2; seed 1: grpo alone e1, sft alone e3
    outcomes = {
        0: ({"e1": 0, "e2": 0, "e3": 1, "e4": 0}, {"e1": 1, "e2": 1, "e3": 1, "e4": 0}),
        1: ({"e1": 0, "e2": 0, "e3": 1, "e4": 0}, {"e1": 1, "e2": 0, "e3": 0, "e4": 0}),
    }
    for s, (sft, grpo) in outcomes.items():
        runs[s] = tmp_path / f"seed-{s}"
        _eval(runs[s], {"base": 0.0, "sft": 25.0, "grpo": 25.0})
        ev_file = runs[s] / "metrics" / "eval.json"
        ev = json.loads(ev_file.read_text())
        ev["paired"] = {"sft->grpo": paired(sft, grpo)}
        ev_file.write_text(json.dumps(ev))
    out = seeds.summarise(runs, ablation=False)["paired"]["SFT < SFT+GRPO"]
    assert out["gap_per_seed"] == [50.0, 0.0] and out["gap_mean"] == pytest.approx(25.0)
    assert (out["only_a"], out["only_b"], out["episodes"]) == (1, 3, 8)
    # 4 discordant pairs, 1 vs 3: p = 2 * (C(4,0) + C(4,1)) / 16
    assert out["p_mcnemar"] == pytest.approx(2 * 5 / 16)
    assert "| SFT < SFT+GRPO | +50.0, +0.0 | +25.0 ± 35.4 | 1 | 3 | 8 | 0.625 |" in seeds.render(
        seeds.summarise(runs, ablation=False)
    )


def test_a_seed_without_paired_outcomes_gets_no_pooled_test(tmp_path: Path) -> None:
    runs = {s: tmp_path / f"seed-{s}" for s in (0, 1)}
    for root in runs.values():
        _eval(root, {"base": 0.0, "sft": 10.0, "grpo": 20.0})
    assert seeds.summarise(runs, ablation=False)["paired"] == {}
