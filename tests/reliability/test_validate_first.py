"""Validate before work (issue 63, items 3 and 6; issue 64): a study (``make study``) and the ``bon`` and ``evaluate``
stages refuse bad arguments, inputs and missing prerequisites with one line and exit status 2 before the first stage
runs — nothing run, nothing overwritten — and a study prints its plan and a time estimate before it starts. The
study file's own refusals (file, line, key; a merge table that cannot be pooled) are in tests/study/test_study.py;
the VeGAS study's missing zero-shot verifier in tests/vegas/test_study_table.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_rft.study import __main__ as study_cli
from embodied_rft.study import plan
from tests.helpers import tiny_checkpoints as tc

REPO = Path(__file__).resolve().parents[2]


def _refused(capsys, argv: list[str]) -> str:
    """The one stderr line ``python -m embodied_rft.study <argv>`` ends with (exit status 2), without ``error: ``."""
    assert study_cli.main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0].removeprefix("error: ")


@pytest.mark.parametrize(
    "seeds,message",
    [
        (["0", "0"], "seeds: a seed is given twice in [0, 0]; each seed runs once and counts once"),
        (["-1", "-2"], "seeds: expected a non-empty list of integers >= 0, got [-1, -2]"),
    ],
)
@pytest.mark.parametrize("study", ["seeds", "regrpo", "vegas"])
def test_a_repeated_or_negative_seed_is_refused_before_anything_is_written(study, seeds, message, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    before = {f: f.stat().st_mtime_ns for f in (REPO / "studies").rglob("*") if f.is_file()}
    err = _refused(capsys, ["run", study, "--seeds", *seeds])
    assert err.startswith(f"conf/study/{study}.yaml:") and message in err, err
    assert {f: f.stat().st_mtime_ns for f in (REPO / "studies").rglob("*") if f.is_file()} == before


@pytest.mark.parametrize(
    "override,message",
    [("sft.max_step=3", "sft.max_step"), ("evaluate.models=[]", "evaluate.models: name at least one model")],
)
def test_a_bad_override_is_refused_before_the_first_stage(override, message, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    err = _refused(capsys, ["run", "seeds", "--seeds", "0", "-o", override, "--dry-run"])
    assert "conf/study/seeds.yaml: arm 'pipeline'" in err and message in err, err


def test_the_estimate_takes_other_seeds_runs_else_the_workspace_s(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for seed, secs in ((0, 30.0), (2, 50.0)):
        d = tmp_path / f"runs/s/seed-{seed}/a/metrics"
        d.mkdir(parents=True)
        (d / "sft.details.json").write_text(json.dumps({"train_time_s": secs}))
        (d / "sft.json").write_text("{}")
    new = Path("runs/s/seed-1/a/metrics/sft.json")
    assert plan._estimate("sft", new) == 40.0  # the median of the other seeds' own timings
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics/grpo.json").write_text(json.dumps({"final": {"elapsed_s": 600}}))
    assert plan._estimate("grpo", Path("runs/s/seed-1/a/metrics/grpo.json")) == 600.0  # the workspace's run
    assert plan._estimate("prepare", Path("runs/s/seed-1/a/metrics/prepare.json")) is None
    assert plan.metrics_seconds("evaluate", {"timing": {"sft": {"interactive_s": 40, "offline_s": 2}}}) == 42.0
    assert plan.metrics_seconds("bon", {"selectors": {"greedy": {"wall_s": 5}, "sc": {"wall_s": 7}}}) == 12.0
    text = plan.render([("s.yaml:a-sft@1", 40.0), ("s.yaml:a-grpo@1", 600.0), ("s.yaml:a-prepare@1", None)])
    assert text.splitlines() == [
        "plan: 3 stages to run",
        "  s.yaml:a-sft@1 (~40 s)",
        "  s.yaml:a-grpo@1 (~10 min)",
        "  s.yaml:a-prepare@1 (unknown)",
        "estimate: ~11 min for 2 of the 3 stages, plus 1 of unknown duration (the stages' own timings in finished "
        "runs' metrics: other seeds, else the workspace's run)",
    ]
    assert plan.render([]) == "plan: nothing to run (every stage is up to date)"


def _stage(name: str, cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``python -m stages.<name>`` in ``cwd`` (a scratch workspace: its relative ``paths.*`` resolve there), the
    stages and conf/ from this checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "src")]), "HF_HUB_OFFLINE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            f"stages.{name}",
            *overrides,
            f"hydra.run.dir={cwd / 'hydra'}",
            "hydra.output_subdir=null",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _episodes(root: Path, *splits: str) -> None:
    d = root / "data" / "episodes"
    d.mkdir(parents=True)
    for split in splits:
        (d / f"{split}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in tc.episodes("valid_seen", 12)[:4]))


def test_evaluate_with_no_models_is_refused_and_leaves_the_published_results(tmp_path):
    _episodes(tmp_path, "valid_seen", "valid_unseen")  # what the reference rows would play before the fix
    published = {
        tmp_path / "metrics" / "eval.json": '{"table": "published"}\n',
        tmp_path / "metrics" / "eval.details.json": '{"models": "published"}\n',
        tmp_path / "reports" / "eval.md": "# published\n",
    }
    for f, text in published.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    r = _stage("evaluate", tmp_path, "evaluate.models=[]", "evaluate.max_offline_samples=0")
    assert r.returncode == 2, r.stderr[-2000:]
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: evaluate.models: name at least one model to evaluate"), err
    assert {f: f.read_text() for f in published} == published
    assert not (tmp_path / "plots").exists() and not (tmp_path / ".cache").exists()


def test_bon_without_a_verifier_is_refused_before_any_selector_plays(tmp_path):
    _episodes(tmp_path, "valid_unseen")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "sft").symlink_to(tc.text_model(), target_is_directory=True)  # a real policy
    r = _stage("bon", tmp_path, "bon.selectors=[greedy,sample,bon_ft]", "bon.max_episodes=2")
    assert r.returncode == 2, r.stderr[-2000:]
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1, err
    assert err[0].startswith(
        "error: paths.verifier_model: models/verifier holds no checkpoint (no config.json), which bon_ft "
        "(bon.selectors) needs before any selector plays; make it first (`dvc repro verifier`"
    ), err
    assert err[0].endswith("or leave bon_ft out of bon.selectors")
    assert not (tmp_path / ".cache").exists() and not (tmp_path / "metrics").exists()  # no selector played


def test_bon_checks_every_model_its_selectors_need(tmp_path):
    from embodied_rft.config import ConfigError
    from embodied_rft.models import ModelConfig
    from embodied_rft.vegas import bon
    from embodied_rft.vegas.bon_config import BonConfig

    policy = tc.text_model()
    damaged = tmp_path / "verifier"
    damaged.mkdir()
    (damaged / "config.json").write_text("{}")  # a cut-short copy: a config, no weights
    models = {"policy": policy, "sft": policy, "verifier": damaged}
    bon.check_models(BonConfig(selectors=("greedy", "bon_zs")), models)  # bon_zs: the SFT policy, present
    with pytest.raises(
        ConfigError, match=r"^paths.verifier_model: .*verifier: no weights .*\(bon_ft \(bon.live_verifiers\)"
    ):
        bon.check_models(BonConfig(selectors=("greedy",), live_verifiers=("bon_ft",)), models)
    zs = ModelConfig(name="smollm2_135m", kind="gguf", gguf_package="no_such_package", gguf_file="x.gguf")
    cfg = BonConfig(selectors=("bon_zs_smollm2",), zs_model=zs)
    with pytest.raises(ConfigError, match=r"^bon.zs_model: model.gguf_package: Python package 'no_such_package'"):
        bon.check_models(cfg, {}, checkpoints=False)
    with pytest.raises(ConfigError, match=r"^paths.sft_model: .*nowhere holds no checkpoint"):
        bon.check_models(BonConfig(selectors=("greedy",)), {**models, "policy": tmp_path / "nowhere"})
