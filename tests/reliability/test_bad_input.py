"""Bad input at every stage boundary fails fast, naming the file, the line and the field, and what to do.

Table-driven over the readers each stage's library entry uses, all run before any model work starts:

- decomposed samples with wrong types, a cut line or a missing image -> ``distill`` (``run_distill``), the GRPO
  engine (``run_grpo_local``) and evaluation (``run_evaluate``'s held-out samples);
- episodes with wrong types or expert actions the scene does not have -> ``decompose`` and ``evaluate``;
- empty inputs -> every consumer says which file is empty instead of writing empty results;
- damaged checkpoints (cut or missing weights, cut or missing config.json, no tokenizer) -> ``load_model`` and
  ``run_evaluate``, which checks every model before playing any episode;
- a hand-edited ``params.yaml`` -> ``python -m embodied_rft.params --check`` names the key, and a stage run on
  it fails building its config, naming the key.

Covered elsewhere, not repeated: malformed and truncated ALFRED ``traj_data.json`` (tests/alfred/
test_alfred_reader.py, skip-and-list in test_alfred_prepare.py), SFT record types and missing SFT images
(tests/train/test_sft.py), config keys of each section (each package's tests).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.data.jsonl import DataError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def episodes() -> list[dict]:
    from embodied_rft.world.generator import GeneratorConfig, generate_episodes

    return generate_episodes(GeneratorConfig(seed=0, n_valid_seen=3), "valid_seen")


@pytest.fixture(scope="module")
def samples(episodes) -> list[dict]:
    from embodied_rft.data.decompose import decompose_episode
    from embodied_rft.data.prompt import PromptConfig

    return list(decompose_episode(episodes[0], PromptConfig(style="compact", action_list="extras")))[:2]


def _lines(path: Path, recs: list, cut_last: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in recs)
    if cut_last:  # a copy or a write cut short mid-line
        text = text[: len(text) - len(json.dumps(recs[-1])) // 2]
    path.write_text(text)
    return path


# ---- decomposed samples ---------------------------------------------------------------------------------
def _set(key, value):
    return lambda s: s.update({key: value})


SAMPLE_CASES = {
    "prompt_is_text": (_set("prompt", "Put a mug in the sink."), r"field 'prompt' must be list"),
    "prompt_empty": (_set("prompt", []), r"field 'prompt' must be a non-empty list of \{role, content\}"),
    "message_without_role": (_set("prompt", [{"content": "hi"}]), r"field 'prompt' must be a non-empty list"),
    "label_is_object": (_set("label", {"gold": [[0, "find a Apple"]]}), r"field 'label' must be str, got dict"),
    "label_missing": (lambda s: s.pop("label"), r"missing field 'label'"),
    "image_is_number": (_set("image", 5), r"field 'image' must be a relative path or null"),
    "image_file_missing": (
        _set("image", "images/ep0_1.png"),
        r"field 'image': .*images/ep0_1\.png not found; re-run `decompose`",
    ),
    "line_cut_short": (None, r"invalid JSON"),
}


def _distill(path: Path, tmp: Path) -> None:
    from embodied_rft.teacher import TeacherConfig, run_distill

    run_distill(build(TeacherConfig, {}, "teacher"), path, tmp / "sft.jsonl", tmp / "cache", tmp / "distill.json")


def _grpo(path: Path, tmp: Path) -> None:
    from embodied_rft.train.grpo.config import GRPOConfig
    from embodied_rft.train.grpo.driver import run_grpo_local

    # no policy at this path: the samples must be refused before any model is loaded
    run_grpo_local(GRPOConfig(), tmp / "no-model", path, path, tmp / "out", tmp / "m.json", tmp / "p.csv", tmp / "work")


def _evaluate(path: Path, tmp: Path, episodes_path: Path | None = None) -> None:
    from embodied_rft.evaluate import EvalConfig, run_evaluate

    cfg = EvalConfig(reference_policies=(), max_offline_samples=-1)
    run_evaluate(cfg, {}, [episodes_path], path, tmp / "eval.json", tmp / "eval.md", tmp / "plots", tmp / "work")


SAMPLE_CONSUMERS = {"distill": _distill, "grpo": _grpo, "evaluate": _evaluate}


@pytest.mark.parametrize("case", list(SAMPLE_CASES))
@pytest.mark.parametrize("consumer", list(SAMPLE_CONSUMERS))
def test_bad_decomposed_sample_is_named_by_file_line_and_field(consumer, case, samples, episodes, tmp_path):
    mutate, message = SAMPLE_CASES[case]
    recs = copy.deepcopy(samples)
    if mutate is not None:
        mutate(recs[1])
    path = _lines(tmp_path / "decomposed" / "val.jsonl", recs, cut_last=mutate is None)
    kw = (
        {"episodes_path": _lines(tmp_path / "episodes" / "valid_seen.jsonl", episodes)}
        if consumer == "evaluate"
        else {}
    )
    with pytest.raises(DataError, match=rf"val\.jsonl:2: {message}"):
        SAMPLE_CONSUMERS[consumer](path, tmp_path, **kw)
    # refused before anything was written where the next stage reads
    assert not any((tmp_path / n).exists() for n in ("sft.jsonl", "out", "eval.json", "m.json", "distill.json"))


def test_missing_images_are_refused_for_a_text_teacher_too(samples, tmp_path):
    """The scripted teacher never looks at images, but its records point SFT at them: before, a sample whose
    frame was gone became a record naming a file that does not exist, found only when SFT opened it."""
    recs = copy.deepcopy(samples)
    for i, r in enumerate(recs):
        r["image"] = f"images/s{i}.png"
    img = tmp_path / "decomposed" / "images"
    img.mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (8, 8)).save(img / "s0.png")
    path = _lines(tmp_path / "decomposed" / "train.jsonl", recs)
    with pytest.raises(DataError, match=r"train\.jsonl:2: field 'image': .*s1\.png not found"):
        _distill(path, tmp_path)
    Image.new("RGB", (8, 8)).save(img / "s1.png")
    _distill(path, tmp_path)
    out = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert all((tmp_path / r["images"][0]).is_file() for r in out) and len(out) == 2


# ---- episodes -------------------------------------------------------------------------------------------
def _plan(j, value):
    def f(ep):
        ep["expert_plan"][j] = value

    return f


EPISODE_CASES = {
    "task_type_is_number": (_set("task_type", 7), r"field 'task_type' must be str"),
    "task_type_unknown": (_set("task_type", "make_coffee"), r"field 'task_type': unknown task type 'make_coffee'"),
    "goal_missing": (lambda e: e.pop("goal"), r"missing field 'goal'"),
    "object_not_a_mapping": (
        lambda e: e["scene"]["objects"].__setitem__(0, "Mug"),
        r"field 'scene\.objects\[0\]' must be an object",
    ),
    "action_is_an_id": (_plan(1, 80), r"field 'expert_plan\[1\]' must be an action name string, got int"),
    "action_unknown": (
        _plan(1, "teleport to the Fridge"),
        r"field 'expert_plan\[1\]': unknown action 'teleport to the Fridge'.*dvc repro -f prepare",
    ),
    "instance_not_in_scene": (
        _plan(1, "find a Cabinet_9"),
        r"field 'expert_plan\[1\]': unknown action 'find a Cabinet_9'",
    ),
    "plan_empty": (_set("expert_plan", []), r"field 'expert_plan' is empty"),
}


def _decompose(ep_dir: Path, tmp: Path) -> None:
    from embodied_rft.data.decompose import DecomposeConfig, run_decompose
    from embodied_rft.data.prompt import PromptConfig

    run_decompose(
        DecomposeConfig(train_split="valid_seen", val_split="valid_seen"),
        PromptConfig(),
        ep_dir,
        tmp / "decomposed",
        tmp / "decompose.json",
    )


def _evaluate_episodes(ep_dir: Path, tmp: Path) -> None:
    _evaluate(None, tmp, ep_dir / "valid_seen.jsonl")


@pytest.mark.parametrize("case", list(EPISODE_CASES))
@pytest.mark.parametrize("consumer", ["decompose", "evaluate"])
def test_bad_episode_is_named_by_file_line_and_field(consumer, case, episodes, tmp_path):
    mutate, message = EPISODE_CASES[case]
    recs = copy.deepcopy(episodes)
    mutate(recs[1])
    _lines(tmp_path / "episodes" / "valid_seen.jsonl", recs)
    with pytest.raises(DataError, match=rf"valid_seen\.jsonl:2: {message}"):
        (_decompose if consumer == "decompose" else _evaluate_episodes)(tmp_path / "episodes", tmp_path)
    assert not (tmp_path / "decomposed").exists() and not (tmp_path / "eval.json").exists()


def test_an_unreplayable_expert_plan_names_the_episode_line(episodes, tmp_path):
    recs = copy.deepcopy(episodes)
    plan = recs[2]["expert_plan"]
    plan.insert(0, plan[1])  # act on an object before finding it: a known action that fails in the simulator
    _lines(tmp_path / "episodes" / "valid_seen.jsonl", recs)
    with pytest.raises(
        DataError, match=r"valid_seen\.jsonl:3: episode \S+: expert_plan\[0\] .* failed in the simulator"
    ):
        _decompose(tmp_path / "episodes", tmp_path)


# ---- empty inputs ---------------------------------------------------------------------------------------
def test_every_consumer_refuses_an_empty_input(episodes, tmp_path):
    empty = _lines(tmp_path / "decomposed" / "train.jsonl", [])
    with pytest.raises(DataError, match=r"train\.jsonl: no decomposed samples to distil"):
        _distill(empty, tmp_path)
    with pytest.raises(DataError, match=r"train\.jsonl: no train samples"):
        _grpo(empty, tmp_path)
    eps = _lines(tmp_path / "episodes" / "valid_seen.jsonl", episodes)
    with pytest.raises(DataError, match=r"train\.jsonl: no held-out samples"):
        _evaluate(empty, tmp_path, eps)
    with pytest.raises(ConfigError, match=r"evaluate\.splits: .*valid_unseen\.jsonl holds no episodes"):
        _evaluate(None, tmp_path, _lines(tmp_path / "episodes" / "valid_unseen.jsonl", []))
    from embodied_rft.train.sft.data import read_sft_records

    with pytest.raises(DataError, match=r"sft\.jsonl: no SFT records"):
        read_sft_records(_lines(tmp_path / "distilled" / "sft.jsonl", []))
    assert not (tmp_path / "sft.jsonl").exists() and not (tmp_path / "eval.json").exists()


# ---- damaged checkpoints --------------------------------------------------------------------------------
def _cut(f: Path, n: int | None = None) -> None:
    b = f.read_bytes()
    f.write_bytes(b[: len(b) // 2 if n is None else n])


DAMAGE = {
    "weights_cut_in_half": (lambda d: _cut(d / "model.safetensors"), r"model\.safetensors: .*cut short"),
    "weights_cut_to_5_bytes": (lambda d: _cut(d / "model.safetensors", 5), r"model\.safetensors: 5 bytes: too short"),
    "weights_empty": (lambda d: _cut(d / "model.safetensors", 0), r"model\.safetensors: 0 bytes"),
    "weights_header_cut": (
        lambda d: _cut(d / "model.safetensors", 40),
        r"model\.safetensors: header of \d+ bytes runs past",
    ),
    "weights_missing": (lambda d: (d / "model.safetensors").unlink(), r"no weights \(model\.safetensors\)"),
    "config_cut": (lambda d: _cut(d / "config.json"), r"config\.json: not valid JSON"),
    "config_missing": (lambda d: (d / "config.json").unlink(), r"no config\.json"),
    "tokenizer_missing": (lambda d: (d / "tokenizer.json").unlink(), r"no tokenizer files"),
}


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    from tests.helpers.grpo_fixtures import base_policy  # a tiny Qwen2 + tokenizer, cached on disk across test runs

    return base_policy()


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_named_with_what_to_do(damage, checkpoint, tmp_path):
    from embodied_rft.models import ModelNotAvailableError, load_model

    d = tmp_path / "sft"
    shutil.copytree(checkpoint, d)
    hurt, message = DAMAGE[damage]
    hurt(d)
    with pytest.raises(ModelNotAvailableError, match=message) as ei:
        load_model(d)
    assert str(d) in str(ei.value)
    if damage != "config_missing":  # (that one says "not a checkpoint": it may be the wrong folder)
        assert "dvc repro" in str(ei.value)


def test_evaluate_checks_every_checkpoint_before_playing(checkpoint, episodes, tmp_path):
    from embodied_rft.evaluate import EvalConfig, run_evaluate
    from embodied_rft.models import DamagedCheckpointError

    good, bad = tmp_path / "sft", tmp_path / "grpo"
    shutil.copytree(checkpoint, good)
    shutil.copytree(checkpoint, bad)
    _cut(bad / "model.safetensors")
    eps = _lines(tmp_path / "episodes" / "valid_seen.jsonl", episodes)
    with pytest.raises(DamagedCheckpointError, match=r"grpo/model\.safetensors: .*cut short"):
        run_evaluate(
            EvalConfig(max_offline_samples=0),
            {"sft": good, "grpo": bad},
            [eps],
            None,
            tmp_path / "eval.json",
            tmp_path / "eval.md",
            tmp_path / "plots",
            tmp_path / "work",
        )
    # the good model was not evaluated first only to fail on the second: nothing was played
    assert not (tmp_path / "work").exists() and not (tmp_path / "eval.json").exists()


# ---- params.yaml edited by hand ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fresh_params(tmp_path_factory) -> Path:
    """params.yaml exactly as `make params` writes it from today's conf/ (the checked-in one may be mid-edit)."""
    from embodied_rft.params import HEADER, compose_text

    d = tmp_path_factory.mktemp("params")
    (d / "params.yaml").write_text(HEADER + compose_text(REPO / "conf"))
    return d / "params.yaml"


def _check(params: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "embodied_rft.params", "--check", "--out", str(params), "--conf", str(REPO / "conf")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_a_hand_edited_params_yaml_is_caught_naming_the_key(fresh_params, tmp_path):
    import yaml

    assert _check(fresh_params).returncode == 0
    p = yaml.safe_load(fresh_params.read_text())
    p["grpo"]["lr"] = p["grpo"]["lr"] * 10
    edited = tmp_path / "params.yaml"
    edited.write_text(yaml.safe_dump(p))
    r = _check(edited)
    assert r.returncode == 1
    assert re.search(r"params\.yaml is stale: grpo\.lr: params\.yaml has .*, conf/ gives", r.stderr), r.stderr
    assert "make params" in r.stderr
    p = yaml.safe_load(fresh_params.read_text())
    p["sft"]["max_step"] = 5  # a typo for max_steps, added by hand
    edited.write_text(yaml.safe_dump(p))
    r = _check(edited)
    assert r.returncode == 1 and "sft.max_step: in params.yaml but not in conf/" in r.stderr, r.stderr


def test_a_stage_run_on_params_with_an_unknown_key_fails_naming_it(fresh_params, tmp_path):
    """The way dvc.yaml runs a stage, on a params.yaml whose decompose section has a typo: the stage refuses
    before reading or writing anything (it runs in an empty folder, so there is nothing it could read)."""
    import yaml

    p = yaml.safe_load(fresh_params.read_text())
    p["decompose"]["max_train_sample"] = 5
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "stages.decompose",
            "--config-dir",
            str(tmp_path),
            "--config-name",
            "params",
            "hydra.run.dir=.",
            "hydra.output_subdir=null",
            "hydra/job_logging=disabled",
            "hydra/hydra_logging=disabled",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert r.returncode != 0
    assert "decompose.max_train_sample: unknown key; did you mean 'max_train_samples'?" in r.stderr, r.stderr[-2000:]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["params.yaml"]  # nothing written
