"""The experiment presets compose and validate without a GPU; the paper's preset carries the paper's settings."""

from __future__ import annotations

import subprocess
import sys

import pytest

from embodied_rft.filtering import openrlhf_range
from embodied_rft.params import compose, section_configs


@pytest.fixture(scope="module")
def paper(repo_root):
    return section_configs(compose(repo_root / "conf", ["experiment=paper_qwen25vl_7b"]))


def test_tiny_default_validates_every_section(repo_root):
    s = section_configs(compose(repo_root / "conf"))
    assert s["model"].kind == "tiny" and s["teacher"].backend == "scripted" and s["grpo"].backend == "local"
    assert s["prompt"].style == "compact" and s["evaluate"].splits == ("valid_unseen",)


def test_paper_preset_has_the_papers_sft_settings(paper):
    sft = paper["sft"]
    assert (sft.lr, sft.epochs, sft.scheduler, sft.warmup_ratio, sft.max_len) == (1e-5, 3.0, "cosine", 0.1, 2048)
    assert sft.freeze_vision and not sft.lora.enabled and sft.max_steps is None
    assert paper["model"].kind == "pretrained" and paper["model"].path == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert paper["model"].image_max_pixels == 262144
    assert paper["teacher"].backend == "openai" and paper["teacher"].openai.model == "gemini-2.0-flash"
    assert paper["prompt"].observation == "image" and paper["decompose"].images


def test_paper_preset_has_the_papers_grpo_settings(paper):
    g = paper["grpo"]
    assert g.backend == "openrlhf" and g.init == "sft"
    assert (g.group_size, g.temperature, g.lr, g.kl_coef, g.eps_clip) == (8, 1.0, 1e-6, 0.0, 0.2)
    assert (g.max_prompt_tokens, g.max_new_tokens) == (3000, 4096)
    assert g.filter.enabled and g.filter.bounds(8) == (1, 7)
    assert openrlhf_range(8, 1, 7) == pytest.approx((0.0625, 0.9375))
    assert paper["evaluate"].generation.backend == "vllm" and paper["evaluate"].parallel == "ray"


def test_bad_override_fails_at_make_params_naming_the_key(repo_root, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "embodied_rft.params", "grpo.group_size=one", "--out", str(tmp_path / "p.yaml")],
        capture_output=True,
        text=True,
        cwd=repo_root,
    )
    assert r.returncode == 2 and "grpo.group_size: expected an integer, got str 'one'" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "embodied_rft.params", "+sft.max_step=1", "--out", str(tmp_path / "p.yaml")],
        capture_output=True,
        text=True,
        cwd=repo_root,
    )
    assert r.returncode == 2 and "sft.max_step: unknown key; did you mean 'max_steps'?" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "embodied_rft.params", "data.generator.n_train=-5", "--out", str(tmp_path / "p.yaml")],
        capture_output=True,
        text=True,
        cwd=repo_root,
    )
    assert r.returncode == 2 and "data.generator.n_train: must be >= 0" in r.stderr
    assert not (tmp_path / "p.yaml").exists()


def test_the_makefiles_dvc_experiments_set_real_keys_to_valid_values(repo_root):
    # `make grpo-long` and `make ablation-no-sft` pass `-S key=value` to `dvc exp run`; a renamed key would only
    # fail an hour into a run, so each set of overrides must compose and validate here
    import re

    text = (repo_root / "Makefile").read_text("utf-8")
    # (`plots` is the target: the paper's pipeline, not the VeGAS stages after it in dvc.yaml)
    overrides = re.findall(r"^grpo-long:.*\n\t\$\(DVC\) exp run plots -S (\S+)$", text, re.M)
    assert overrides == ["experiment=tiny_long"]
    g = section_configs(compose(repo_root / "conf", overrides))["grpo"]
    default = section_configs(compose(repo_root / "conf"))["grpo"]
    assert g.max_updates == 2 * default.max_updates
    # twice the default's updates, the rest of its recipe unchanged
    assert (g.lr, g.filter.updates_per_buffer, g.group_size) == (
        default.lr,
        default.filter.updates_per_buffer,
        default.group_size,
    )
    abl = re.findall(r"exp run plots -S (\S+)", text)
    assert "grpo.init=base" in abl
    assert section_configs(compose(repo_root / "conf", ["grpo.init=base"]))["grpo"].init == "base"
