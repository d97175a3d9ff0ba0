"""Validate before work (issue 63, items 3 and 6): every seed driver (tools/seeds.py, bon_seeds.py, regrpo_seeds.py)
and the ``bon`` and ``evaluate`` stages refuse bad arguments, inputs and missing prerequisites with one line and exit
status 2 before the first stage runs — nothing run, nothing overwritten — and a driver prints its plan and a time
estimate before it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from embodied_rft.tools import bon_seeds, regrpo_seeds, seeds
from tests.helpers import tiny_checkpoints as tc

REPO = Path(__file__).resolve().parents[2]
DRIVERS = {"seeds": seeds, "bon_seeds": bon_seeds, "regrpo_seeds": regrpo_seeds}


@pytest.fixture
def nothing_runs(monkeypatch):
    """Every way a driver starts work (a stage, a tool) fails the test; the drivers run from the repository root."""
    monkeypatch.chdir(REPO)

    def ran(cmd, **kw):
        raise AssertionError(f"ran {cmd[:3]} although the arguments were refused first")

    # every stage and tool of the three drivers starts through seeds._run's subprocess.run
    monkeypatch.setattr(seeds, "subprocess", types.SimpleNamespace(run=ran, STDOUT=subprocess.STDOUT))


def _refused(capsys, main, argv: list[str]) -> str:
    """The one stderr line ``main(argv)`` ends with (exit status 2), without its ``error: `` prefix."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0].removeprefix("error: ")


def _outs(tmp_path: Path) -> list[str]:
    return ["--out-metrics", str(tmp_path / "out.json"), "--out-report", str(tmp_path / "out.md")]


@pytest.mark.parametrize("driver", list(DRIVERS))
@pytest.mark.parametrize(
    "given,message",
    [
        (["0", "0"], "--seeds: 0 given more than once; each seed runs once and counts once"),
        (["1", "2", "1", "2"], "--seeds: 1, 2 given more than once"),
        (["-1", "-2"], "--seeds: -1 -2: a seed is an integer >= 0"),
    ],
)
def test_a_repeated_or_negative_seed_is_refused_before_any_stage(
    driver, given, message, tmp_path, capsys, nothing_runs
):
    runs = tmp_path / "runs"
    err = _refused(capsys, DRIVERS[driver].main, ["--seeds", *given, "--runs-dir", str(runs), *_outs(tmp_path)])
    assert err.startswith(message), err
    assert not runs.exists() and not (tmp_path / "out.json").exists()


def test_seeds_still_needs_two_seeds_for_a_spread(tmp_path, capsys, nothing_runs):
    err = _refused(capsys, seeds.main, ["--seeds", "3", "--runs-dir", str(tmp_path / "runs"), *_outs(tmp_path)])
    assert err == "--seeds: a spread needs at least 2 seeds"


def test_an_absolute_runs_dir_reaches_the_stages_as_a_path_they_take(tmp_path, monkeypatch, capsys):
    """The stages refuse absolute ``paths.*`` (pipeline.Paths): the driver hands them the same folders relative to
    the working directory, so the run lands under the absolute --runs-dir and the summary reads it back."""
    from embodied_rft.pipeline import Paths

    monkeypatch.chdir(REPO)
    runs = tmp_path / "runs"
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], log_file: Path) -> None:  # each stage "finishes": its metrics file appears
        calls.append(cmd)
        stage = cmd[2].split(".")[1]
        metrics = Path([a.split("=", 1)[1] for a in cmd if a.startswith("paths.metrics_dir=")][-1])
        metrics.mkdir(parents=True, exist_ok=True)
        (metrics / f"{'eval' if stage == 'evaluate' else stage}.json").write_text("{}")

    monkeypatch.setattr(seeds, "_run", fake_run)
    assert seeds.main(["--seeds", "0", "1", "--runs-dir", str(runs), *_outs(tmp_path)]) == 0
    assert [c[2] for c in calls] == [f"stages.{s}" for s in seeds.STAGES] * 2
    for cmd in calls:
        paths = {a[len("paths.") :].split("=", 1)[0]: a.split("=", 1)[1] for a in cmd if a.startswith("paths.")}
        Paths.from_config(paths)  # what every stage does first: no ConfigError
        seed = cmd[cmd.index(next(a for a in cmd if a.startswith("seed=")))].split("=")[1]
        assert all((REPO / v).resolve().is_relative_to(runs / f"seed-{seed}") for v in paths.values()), paths
    assert (runs / "seed-1" / "metrics" / "eval.json").is_file()
    assert json.loads((tmp_path / "out.json").read_text())["seeds"] == [0, 1]


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_every_driver_takes_an_absolute_runs_dir(driver, tmp_path, capsys, nothing_runs):
    runs = tmp_path / "runs"
    assert DRIVERS[driver].main(["--seeds", "5", "6", "--runs-dir", str(runs), "--dry-run", *_outs(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"under {os.path.relpath(runs)}/" in out and "seed 5: to run prepare" in out and "seed 6:" in out
    assert not runs.exists()  # a dry run plans only


def _table(seeds_: list[int], recipe: dict) -> dict:
    from embodied_rft.regrpo.report import summarise

    return {**summarise({}), "seeds": seeds_, "recipe": recipe}


def _recipe(arms: list[str]) -> dict:
    return {
        "shared": regrpo_seeds.RECIPE,
        "arms": {a: regrpo_seeds.ARMS[a] for a in arms},
        "overrides": [],
    }


@pytest.mark.parametrize(
    "content,message",
    [
        ("not json", "--merge: {f}: cannot read a published table: Expecting value: line 1"),
        ('{"label": "seeds", "seeds": [3]}', "--merge: {f}: not a table of tools/regrpo_seeds.py (label 'seeds')"),
    ],
)
def test_regrpo_a_merge_file_that_is_not_a_table_is_refused_before_any_seed_runs(
    content, message, tmp_path, capsys, nothing_runs
):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    argv = ["--seeds", "0", "--arms", "plain", "--runs-dir", str(tmp_path / "runs"), "--merge", str(bad)]
    err = _refused(capsys, regrpo_seeds.main, [*argv, *_outs(tmp_path)])
    assert err.startswith(message.format(f=bad)), err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out.json").exists()


def test_regrpo_a_merge_file_that_holds_a_seed_of_this_run_is_refused_before_any_seed_runs(
    tmp_path, capsys, nothing_runs
):
    arms = ["plain", "rot"]
    pub = tmp_path / "published.json"
    pub.write_text(json.dumps(_table([0, 1], _recipe(arms))))
    argv = ["--seeds", "1", "2", "--arms", *arms, "--runs-dir", str(tmp_path / "runs"), "--merge", str(pub)]
    err = _refused(capsys, regrpo_seeds.main, [*argv, *_outs(tmp_path)])
    assert err.startswith(f"--merge: {pub}: seeds [1] are already in --seeds; a seed is pooled once"), err
    # two published tables of the same seed: the second is refused, naming the first
    other = tmp_path / "other.json"
    other.write_text(json.dumps(_table([1, 3], _recipe(arms))))
    argv = ["--seeds", "2", "--arms", *arms, "--runs-dir", str(tmp_path / "runs"), "--merge", str(pub), str(other)]
    err = _refused(capsys, regrpo_seeds.main, [*argv, *_outs(tmp_path)])
    assert err.startswith(f"--merge: {other}: seeds [1] are already in {pub}"), err
    # another recipe: named by the part that differs
    argv = ["--seeds", "2", "--arms", "plain", "--runs-dir", str(tmp_path / "runs"), "--merge", str(pub)]
    err = _refused(capsys, regrpo_seeds.main, [*argv, *_outs(tmp_path)])
    assert err.startswith(f"--merge: {pub}: its recipe differs from this run's in arms"), err
    assert err.endswith("; not pooled")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out.json").exists()


def test_regrpo_a_missing_onpolicy_policy_is_refused_before_the_first_seed_runs(tmp_path, capsys, nothing_runs):
    runs = tmp_path / "runs"
    argv = ["--seeds", "0", "1", "--arms", "plain", "--modes", "free", "--runs-dir", str(runs), *_outs(tmp_path)]
    err = _refused(capsys, regrpo_seeds.main, [*argv, "--onpolicy-from", "regrpo/plain/models/sft"])
    assert err.startswith(f"--onpolicy-from: no model at {os.path.relpath(runs)}/seed-0/regrpo/plain/models/sft"), err
    assert not runs.exists()


def test_bad_overrides_are_refused_before_the_first_stage(tmp_path, capsys, nothing_runs):
    runs = ["--runs-dir", str(tmp_path / "runs"), *_outs(tmp_path)]
    err = _refused(capsys, seeds.main, ["--seeds", "0", "1", *runs, "evaluate.models=[]"])
    assert err.startswith("evaluate.models: name at least one model to evaluate"), err
    err = _refused(capsys, bon_seeds.main, ["--seeds", "0", *runs, "sft.max_step=3"])
    assert err.startswith("overrides sft.max_step=3: Could not override 'sft.max_step'"), err
    assert "+sft" not in err  # Hydra's advice to append the key would mislead
    assert not (tmp_path / "runs").exists()


def test_the_plan_and_its_estimate_are_printed_before_the_first_stage(tmp_path, monkeypatch, capsys):
    """Seed 0 finished earlier (its stages' metrics and recorded wall times are there): the plan marks it done and
    estimates seed 1's steps from seed 0's durations; a dry run runs nothing, a real one prints the plan first."""
    monkeypatch.chdir(REPO)
    runs = tmp_path / "runs"
    printed_first: list[bool] = []

    def fake_run(cmd: list[str], log_file: Path) -> None:
        if not printed_first:
            printed_first.append("plan:" in capsys.readouterr().out)
        stage = cmd[2].split(".")[1]
        metrics = Path([a.split("=", 1)[1] for a in cmd if a.startswith("paths.metrics_dir=")][-1])
        metrics.mkdir(parents=True, exist_ok=True)
        (metrics / f"{'eval' if stage == 'evaluate' else stage}.json").write_text("{}")

    monkeypatch.setattr(seeds, "_run", fake_run)
    # seed 0 finished earlier, by the driver: the folders it hands the stages are relative (the stamps hold them)
    seeds.run_seed(0, Path(os.path.relpath(runs)) / "seed-0", [], ablation=False)
    logs = runs / "seed-0" / "logs"
    for stage, secs in (("prepare", 12.0), ("decompose", 30.0), ("distill", 3.0), ("base", 15.0)):
        seeds.seconds_file(logs / stage).write_text(f"{secs}\n")  # what _run records after a stage
    # sft and grpo: only their own timing in their metrics details; evaluate: nothing recorded for any seed
    (runs / "seed-0" / "metrics" / "sft.details.json").write_text(json.dumps({"train_time_s": 300.0}))
    (runs / "seed-0" / "metrics" / "grpo.details.json").write_text(json.dumps({"final": {"elapsed_s": 600.0}}))

    def run_nothing(cmd, log_file):
        raise AssertionError("a dry run ran a stage")

    monkeypatch.setattr(seeds, "_run", run_nothing)
    argv = ["--seeds", "0", "1", "--runs-dir", str(runs), *_outs(tmp_path)]
    assert seeds.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    rel = os.path.relpath(runs)
    assert out[0] == f"plan: seeds [0, 1] under {rel}/, 7 stages each"
    assert out[1] == "  seed 0: done prepare, decompose, distill, base, sft, grpo, evaluate"
    # evaluate: no seed recorded it, so the workspace's own run (the committed default run's metrics) estimates it
    ws = seeds.metrics_seconds("evaluate", json.loads((REPO / "metrics" / "eval.details.json").read_text()))
    assert ws is not None and ws > 0
    assert out[2] == (
        "  seed 1: to run prepare (~12 s), decompose (~30 s), distill (~3 s), base (~15 s), sft (~5 min), "
        f"grpo (~10 min), evaluate (~{seeds._duration(ws)})"
    )
    assert out[3].startswith(f"estimate: ~{seeds._duration(960 + ws)} for 7 of the 7 steps to run")
    assert not (runs / "seed-1").exists() and not (tmp_path / "out.json").exists()
    monkeypatch.setattr(seeds, "_run", fake_run)
    printed_first.clear()
    assert seeds.main(argv) == 0
    assert printed_first == [True]
    assert (runs / "seed-1" / "metrics" / "eval.json").is_file()


def test_estimates_take_the_seed_s_own_last_run_else_the_median_of_the_others(tmp_path):
    for seed, secs in ((0, "10"), (1, "20"), (2, "60")):
        (tmp_path / f"seed-{seed}" / "logs").mkdir(parents=True)
        seeds.seconds_file(tmp_path / f"seed-{seed}" / "logs" / "prepare").write_text(secs)
    new = tmp_path / "seed-9"
    assert seeds.estimate_seconds(new, new / "logs" / "prepare", None, "prepare") == 20.0
    own = tmp_path / "seed-2"
    assert seeds.estimate_seconds(own, own / "logs" / "prepare", None, "prepare") == 60.0
    assert seeds.estimate_seconds(new, new / "logs" / "base", new / "metrics" / "base.json", "base") is None
    assert seeds.metrics_seconds("evaluate", {"timing": {"sft": {"interactive_s": 40, "offline_s": 2}}}) == 42.0
    assert seeds.metrics_seconds("bon", {"selectors": {"greedy": {"wall_s": 5}, "sc": {"wall_s": 7}}}) == 12.0
    assert seeds.metrics_seconds("prepare", {"splits": {}}) is None


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


def test_bon_seeds_refuses_a_missing_zero_shot_verifier_before_any_stage(tmp_path, capsys, nothing_runs):
    argv = ["--seeds", "0", "--runs-dir", str(tmp_path / "runs"), *_outs(tmp_path)]
    err = _refused(capsys, bon_seeds.main, [*argv, "bon.zs_model.gguf_package=no_such_package"])
    assert err.startswith("bon.zs_model: model.gguf_package: Python package 'no_such_package' is not installed"), err
    assert not (tmp_path / "runs").exists()
