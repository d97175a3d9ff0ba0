"""One-source config: typed sections fail fast, params.yaml is generated and never stale, sweeps never
overwrite DVC-tracked outputs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest

from embodied_rft.config import ConfigError, as_dict, build, check
from embodied_rft.data.decompose import DecomposeConfig
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.params import HEADER, compose, stale_reason
from embodied_rft.pipeline import STAGE_OUTPUTS, Paths, stage_context


@dataclasses.dataclass(frozen=True)
class Inner:
    lr: float = 1e-5
    name: str = "x"


@dataclasses.dataclass(frozen=True)
class Outer:
    steps: int
    mode: Literal["a", "b"] = "a"
    inner: Inner = Inner()
    bounds: tuple[int, ...] = (1, 2)
    path: str | None = None

    def __post_init__(self) -> None:
        check(self.steps > 0, "outer.steps", f"must be > 0, got {self.steps}")


def test_build_converts_nested_types():
    cfg = build(Outer, {"steps": 3, "inner": {"lr": 1}, "bounds": [4, 5], "mode": "b"}, "outer")
    assert cfg == Outer(steps=3, mode="b", inner=Inner(lr=1.0), bounds=(4, 5))
    assert isinstance(cfg.inner.lr, float)
    assert as_dict(cfg) == {"steps": 3, "mode": "b", "inner": {"lr": 1.0, "name": "x"}, "bounds": [4, 5], "path": None}


@pytest.mark.parametrize(
    "mapping, message",
    [
        ({"steps": 1, "stpes": 2}, "outer.stpes: unknown key; did you mean 'steps'?"),
        ({"steps": "3"}, "outer.steps: expected an integer, got str '3'"),
        ({"steps": True}, "outer.steps: expected an integer, got bool True"),
        ({"steps": 1, "mode": "c"}, "outer.mode: 'c' is not one of ['a', 'b']"),
        ({"steps": 1, "inner": {"lr": "fast"}}, "outer.inner.lr: expected a number, got str 'fast'"),
        ({"steps": 1, "inner": {"learning_rate": 1}}, "outer.inner.learning_rate: unknown key"),
        ({"steps": 1, "bounds": "12"}, "outer.bounds: expected a list"),
        ({}, "outer.steps: missing required key"),
        ({"steps": 0}, "outer.steps: must be > 0, got 0"),
        ({"steps": 1, "path": 3}, "outer.path: expected a string"),
    ],
)
def test_build_rejects_bad_values_naming_the_key(mapping, message):
    with pytest.raises(ConfigError) as exc:
        build(Outer, mapping, "outer")
    assert message in str(exc.value)


def test_real_sections_reject_out_of_range():
    with pytest.raises(ConfigError, match="decompose.max_val_samples"):
        build(DecomposeConfig, {"max_val_samples": -1}, "decompose")
    with pytest.raises(ConfigError, match=r"prompt.style: 'long' is not one of \['compact', 'eb'\]"):
        build(PromptConfig, {"style": "long"}, "prompt")
    with pytest.raises(ConfigError, match="paths.sft_model: must be a non-empty relative path"):
        Paths.from_config({"sft_model": "/abs/models"})


def test_params_yaml_is_generated_and_not_stale(repo_root):
    text = (repo_root / "params.yaml").read_text()
    assert text.startswith(HEADER), "params.yaml must carry the generated header; run `make params`"
    reason = stale_reason(repo_root / "params.yaml", repo_root / "conf")
    assert reason is None, f"params.yaml is stale: {reason}. Run `make params`."


def test_stale_params_are_detected(tmp_path, repo_root):
    import yaml

    params = yaml.safe_load((repo_root / "params.yaml").read_text())
    params["seed"] = params["seed"] + 1
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert stale_reason(tmp_path / "params.yaml", repo_root / "conf") == (
        f"seed: params.yaml has {params['seed']}, conf/ gives {params['seed'] - 1}"
    )
    del params["prompt"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert stale_reason(tmp_path / "params.yaml", repo_root / "conf").startswith("prompt: missing from params.yaml")


def test_params_check_cli_exit_codes(tmp_path, repo_root):
    bad = tmp_path / "params.yaml"
    bad.write_text("seed: 12345\n")
    r = subprocess.run(
        [sys.executable, "-m", "embodied_rft.params", "--check", "--out", str(bad), "--conf", str(repo_root / "conf")],
        capture_output=True,
        text=True,
        cwd=repo_root,
    )
    assert r.returncode == 1 and "params.yaml is stale" in r.stderr and "make params" in r.stderr


def test_every_stage_section_composes_and_builds(repo_root):
    cfg = compose(repo_root / "conf")
    build(PromptConfig, cfg["prompt"], "prompt")
    build(DecomposeConfig, cfg["decompose"], "decompose")
    build(Paths, cfg["paths"], "paths")


def test_multirun_outputs_never_touch_tracked_paths(tmp_path, repo_root):
    cfg = compose(repo_root / "conf")
    for stage, outs in STAGE_OUTPUTS.items():
        ctx = stage_context(cfg, stage, multirun_dir=str(tmp_path / "multirun" / "0"))
        default = Paths(**cfg["paths"])
        for f in dataclasses.fields(Paths):
            got, tracked = getattr(ctx.paths, f.name), getattr(default, f.name)
            if f.name in outs:
                assert Path(got) == tmp_path / "multirun" / "0" / tracked, (stage, f.name)
            else:
                assert got == tracked, (stage, f.name)  # inputs still read from the pipeline's paths
    plain = stage_context(cfg, "grpo")
    assert plain.paths == Paths(**cfg["paths"]) and plain.multirun_dir is None
