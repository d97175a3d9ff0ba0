"""Checkpoint folders are written with the modes of every other output (issue 63): safetensors' ``save_file``
writes ``model.safetensors`` 0600, so the folder swap (``core.atomic.replace_directory``, under
``atomic_directory``, ``save_pretrained_atomic`` and the SFT trainer's staging folder) normalises modes first."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from embodied_rft.core.atomic import (
    DIR_MODE,
    FILE_MODE,
    atomic_directory,
    normalize_modes,
    replace_directory,
)
from embodied_rft.core.integrity import save_pretrained_atomic


def _modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.lstat().st_mode) for p in sorted(folder.rglob("*"))}


def test_safetensors_alone_writes_0600_the_cause():
    """The cause, pinned: if a safetensors release stops writing 0600 this fails and the note can go."""
    import tempfile

    import torch
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as d:
        save_file({"w": torch.zeros(2)}, os.path.join(d, "w.safetensors"))
        assert stat.S_IMODE(os.stat(os.path.join(d, "w.safetensors")).st_mode) == 0o600 != FILE_MODE


def test_base_and_grpo_checkpoints_have_file_mode_on_every_file(tmp_path):
    from embodied_rft.models import ModelConfig, build_base_model, load_model

    corpus = [f"find a {o}, pick up the {o}, put down the {o} in the sink" for o in ("apple", "mug", "plate")] * 20
    base = build_base_model(ModelConfig(name="tiny", kind="tiny", vocab_size=300), corpus, tmp_path / "base")
    model, tok = load_model(base, for_training=False)
    save_pretrained_atomic(model, tok, tmp_path / "grpo")  # the GRPO stage's writer
    for folder in (base, tmp_path / "grpo"):
        modes = _modes(folder)
        assert "model.safetensors" in modes and "config.json" in modes, modes
        assert modes == {name: FILE_MODE for name in modes}, folder  # model.safetensors was 0600
        assert stat.S_IMODE(folder.stat().st_mode) == DIR_MODE


def test_replace_directory_normalises_files_folders_and_keeps_exec_links_and_hard_links(tmp_path):
    staging = tmp_path / ".sft.staging"  # the SFT trainer's path: save into staging, then replace_directory
    (staging / "sub").mkdir(parents=True)
    for name, mode in (("model.safetensors", 0o600), ("sub/tokenizer.json", 0o640), ("run.sh", 0o700)):
        (staging / name).write_text(name)
        os.chmod(staging / name, mode)
    os.chmod(staging / "sub", 0o700)
    outside = tmp_path / "hf-cache-blob"
    outside.write_text("weights")
    os.chmod(outside, 0o444)
    os.link(outside, staging / "linked.safetensors")  # pretrained weights are hard-linked from the HF cache
    (staging / "alias").symlink_to(outside)
    replace_directory(staging, tmp_path / "sft")
    out = tmp_path / "sft"
    assert _modes(out) == {
        "alias": stat.S_IMODE((out / "alias").lstat().st_mode),  # a link: left alone
        "linked.safetensors": 0o444,  # not this folder's own file: left alone
        "model.safetensors": FILE_MODE,
        "run.sh": DIR_MODE,  # executable stays executable
        "sub": DIR_MODE,
        "sub/tokenizer.json": FILE_MODE,
    }
    assert stat.S_IMODE(outside.stat().st_mode) == 0o444 and not staging.exists()


def test_atomic_directory_folders_come_out_with_the_same_modes(tmp_path):
    with atomic_directory(tmp_path / "episodes") as tmp:
        (tmp / "train.jsonl").write_text("{}\n")
        os.chmod(tmp / "train.jsonl", 0o600)
    assert _modes(tmp_path / "episodes") == {"train.jsonl": FILE_MODE}
    normalize_modes(tmp_path / "episodes")  # idempotent
    assert _modes(tmp_path / "episodes") == {"train.jsonl": FILE_MODE}
