"""A bad setting ends a stage with one line — the dotted key and what to change — and exit status 2, not a
Hydra traceback; a mistyped override is named before Hydra's own (misleading) advice to append it with `+`."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest


def _stage(repo_root, name: str, *overrides: str, full_error: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    if full_error:
        env["HYDRA_FULL_ERROR"] = "1"
    # Hydra's job log (<stage>.log) goes to a temporary run dir, never into the checkout
    with tempfile.TemporaryDirectory(prefix="config-errors-") as run_dir:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                f"stages.{name}",
                *overrides,
                f"hydra.run.dir={run_dir}",
                "hydra.output_subdir=null",
            ],
            cwd=repo_root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )


@pytest.mark.parametrize(
    "stage,override,message",
    [
        ("sft", "sft.max_step=3", "error: sft.max_step: unknown key; did you mean 'max_steps'?"),
        (
            "grpo",
            "grpo.filter.buffer_sise=2",
            "error: grpo.filter.buffer_sise: unknown key; did you mean 'buffer_size'?",
        ),
        ("sft", "sft.lr=-1", "error: sft.lr: must be > 0"),
        (
            "evaluate",
            "evaluate.models=[base,foo]",
            "error: evaluate.models: unknown model name(s) ['foo']; each names a "
            "paths.<name>_model checkpoint, one of ['base', 'sft', 'grpo']",
        ),
    ],
)
def test_one_line_with_the_dotted_key_and_exit_2(repo_root, stage, override, message):
    r = _stage(repo_root, stage, override)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith(message), r.stderr
    assert "Traceback" not in r.stderr and "+sft" not in r.stderr and "HYDRA_FULL_ERROR" not in r.stderr


def test_the_dvc_way_with_params_yaml_is_checked_too(repo_root):
    # dvc.yaml runs stages with --config-dir . --config-name params: the keys come from params.yaml
    r = _stage(repo_root, "sft", "--config-dir", ".", "--config-name", "params", "sft.max_step=3")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        "error: sft.max_step: unknown key; did you mean 'max_steps'?"
    )


def test_full_error_shows_the_traceback(repo_root):
    r = _stage(repo_root, "sft", "sft.lr=-1", full_error=True)
    assert r.returncode != 0 and "Traceback" in r.stderr and "ConfigError" in r.stderr
