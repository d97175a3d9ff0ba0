"""The shared core: one subset rule, one JSON digest, one vision-tower rule, the label format, atomic writes."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
import torch

from embodied_rft.core.atomic import atomic_open, write_json_atomic
from embodied_rft.core.digest import json_digest
from embodied_rft.core.subset import seeded_indices, seeded_subset
from embodied_rft.core.vision import VISION_MODULE_REGEX, freeze_vision, is_vision_param
from embodied_rft.data.jsonl import DataError
from embodied_rft.schema import format_label, read_label


def test_subset_zero_and_oversize_mean_all_and_choice_is_the_seeded_sample():
    items = list("abcdefghij")
    assert seeded_subset(items, 0, 3) == items and seeded_subset(items, 99, 3) == items
    assert seeded_subset(items, -1, 3) == items
    picked = seeded_subset(items, 4, 3)
    assert picked == [items[i] for i in sorted(random.Random(3).sample(range(10), 4))]
    assert seeded_indices(10, 4, 3) == sorted(random.Random(3).sample(range(10), 4))
    assert seeded_subset(items, 4, 4) != picked  # another seed, another choice (for these values)


def test_json_digest_is_the_sha256_of_canonical_json():
    obj = {"b": [1, 2], "a": "é", "p": 1.5}
    blob = json.dumps(obj, sort_keys=True, default=str)
    assert json_digest(obj) == hashlib.sha256(blob.encode()).hexdigest()
    assert json_digest(obj, 16) == json_digest({"p": 1.5, "a": "é", "b": [1, 2]})[:16]
    raw = json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()
    assert json_digest(obj, ensure_ascii=False) == hashlib.sha256(raw).hexdigest()


class _Tower(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(2, 2)


class _VLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Module()
        self.model.visual = _Tower()  # Qwen2.5-VL's name
        self.vision_tower = _Tower()  # LLaVA's
        self.multi_modal_projector = _Tower()
        self.lm_head = torch.nn.Linear(2, 2)


def test_one_vision_rule_for_parameters_and_lora_exclusion():
    import re

    m = _VLM()
    assert freeze_vision(m) == 3 * 6
    assert {n for n, p in m.named_parameters() if p.requires_grad} == {"lm_head.weight", "lm_head.bias"}
    for name in ("model.visual.proj", "vision_tower.proj", "multi_modal_projector.proj", "visual.blocks.0.mlp"):
        assert re.fullmatch(VISION_MODULE_REGEX, name) and is_vision_param(name + ".weight")
    for name in ("model.language_model.layers.0.mlp.gate_proj", "lm_head", "model.visualizer_head"):
        assert not re.fullmatch(VISION_MODULE_REGEX, name) and not is_vision_param(name + ".weight")


def test_label_round_trip_and_a_bad_label_names_its_field():
    label = format_label([(3, "find a Apple"), (7, "pick up the Apple")], ["find a Apple_2"])
    assert label == '{"gold":[[3,"find a Apple"],[7,"pick up the Apple"]],"extra_actions":["find a Apple_2"]}'
    assert read_label(label) == ([(3, "find a Apple"), (7, "pick up the Apple")], ("find a Apple_2",))
    with pytest.raises(DataError, match=r"s1: field 'label'"):
        read_label('{"plan": []}', "s1")


def test_atomic_write_leaves_the_old_file_when_the_body_fails(tmp_path):
    out = tmp_path / "m.json"
    write_json_atomic(out, {"a": 1})
    with pytest.raises(RuntimeError), atomic_open(out) as fh:
        fh.write("half")
        raise RuntimeError("killed")
    assert json.loads(out.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_outputs_keep_normal_modes_and_killed_writers_temps_are_removed(tmp_path):
    import os
    import subprocess
    import sys

    from embodied_rft.core import atomic
    from embodied_rft.core.atomic import DIR_MODE, FILE_MODE
    from embodied_rft.core.integrity import save_pretrained_atomic

    out = tmp_path / "sft.jsonl"
    write_json_atomic(out, {"a": 1})
    assert out.stat().st_mode & 0o777 == FILE_MODE and FILE_MODE & 0o044  # readable by group/others (umask 022)
    # a writer killed mid-write leaves .<name>.<pid>.<random>.tmp; the next write of that path removes it
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(child.stdout)
    orphan = tmp_path / f".sft.jsonl.{dead}.abcd1234.tmp"
    orphan.write_text("half")
    live = tmp_path / f".sft.jsonl.{os.getpid()}.efgh5678.tmp"  # this process's own: not touched
    live.write_text("mine")
    atomic._SWEPT.clear()  # the next run: a new process sweeps each folder at its first write
    write_json_atomic(out, {"a": 2})
    assert not orphan.exists() and live.exists() and json.loads(out.read_text()) == {"a": 2}

    class _Saver:
        def save_pretrained(self, d):
            (Path(d) / "w.bin").write_bytes(b"x")

    save_pretrained_atomic(_Saver(), _Saver(), tmp_path / "model")
    assert (tmp_path / "model").stat().st_mode & 0o777 == DIR_MODE
