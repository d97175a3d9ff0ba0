"""Caches and checkpoints damaged on disk after they were written are found, never used silently (issue 63).

Each kind the red team damaged by hand: flipped bytes (and a flipped low mantissa bit, which leaves the file
well-formed) in model weights, bytes of a GRPO resume checkpoint's weights and its trainer state, one result
line of the evaluation episode store, an answer edited in the teacher cache (still valid JSON). Plus: the
trainer state is read without unpickling arbitrary objects, and a legacy (unsealed) cache is sealed once.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from pathlib import Path

import pytest
import torch

from embodied_rft.core.integrity import (
    MANIFEST,
    IntegrityError,
    record_intact,
    seal_folder,
    seal_record,
    verify_folder,
)
from embodied_rft.evaluate import EpisodeLimits, ExpertPolicy, ResultStore, aggregate, run_episodes
from embodied_rft.models import DamagedCheckpointError, ModelConfig, build_base_model, check_checkpoint, load_model
from embodied_rft.teacher import Answer, ResponseCache
from tests.helpers import tiny_checkpoints as tc
from tests.helpers.grpo import _weights, kill_at_3, run, tiny_cfg
from tests.helpers.grpo_fixtures import grpo_samples, sft_policy, write_jsonl


def _flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


# -- the seal itself -------------------------------------------------------------------------------------------
def test_a_sealed_folder_names_the_changed_or_missing_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "sub" / "b.json").write_text('{"x": 1}')
    seal_folder(tmp_path)
    lines = (tmp_path / MANIFEST).read_text().splitlines()
    assert [ln.split("  ")[1] for ln in lines] == ["a.bin", "sub/b.json"]  # sha256sum's format, sorted
    assert verify_folder(tmp_path, "fix") is True
    assert verify_folder(tmp_path / "sub", "fix") is False  # no manifest there: not checked, and said so

    _flip(tmp_path / "a.bin", 700, 0x01)
    with pytest.raises(IntegrityError, match=r"a\.bin: sha256 [0-9a-f]{12}… differs .* checksums\.sha256.*; fix"):
        verify_folder(tmp_path, "fix")
    _flip(tmp_path / "a.bin", 700, 0x01)  # restored: passes again
    assert verify_folder(tmp_path, "fix")
    (tmp_path / "sub" / "b.json").unlink()
    with pytest.raises(IntegrityError, match=r"b\.json: missing"):
        verify_folder(tmp_path, "fix")


def test_a_settled_file_is_hashed_once_per_process_and_a_changed_one_again(tmp_path, monkeypatch):
    import os
    import time

    from embodied_rft.core import integrity

    hashed = []
    real = integrity.sha256_file
    monkeypatch.setattr(integrity, "sha256_file", lambda p: hashed.append(Path(p).name) or real(p))
    (tmp_path / "old.bin").write_bytes(b"a" * 100)
    (tmp_path / "new.bin").write_bytes(b"b" * 100)
    seal_folder(tmp_path)
    hour_ago = time.time() - 3600
    os.utime(tmp_path / "old.bin", (hour_ago, hour_ago))  # written long before the check
    hashed.clear()
    assert verify_folder(tmp_path, "fix") and verify_folder(tmp_path, "fix")
    # the stage's early check and the load after it: the settled file once; the just-written one each time
    # (a write within the timestamp granularity could leave its signature unchanged)
    assert hashed == ["new.bin", "old.bin", "new.bin"]
    (tmp_path / "old.bin").write_bytes(b"c" * 100)  # same size, new mtime: hashed again, and found
    with pytest.raises(IntegrityError, match=r"old\.bin: sha256"):
        verify_folder(tmp_path, "fix")


def test_a_sealed_record_is_intact_until_one_value_changes():
    rec = seal_record({"episode_id": "e1", "success": True, "progress": 0.75})
    assert record_intact(rec) and record_intact(json.loads(json.dumps(rec)))
    assert not record_intact({**rec, "success": False})
    assert not record_intact({k: v for k, v in rec.items() if k != "sha"})  # a record without a digest
    assert not record_intact(["not", "a", "dict"])


# -- model folders -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("base") / "base"
    build_base_model(ModelConfig(name="tiny", kind="tiny", vocab_size=400), ["pick up the apple", "open it"] * 50, out)
    return out


def test_a_flipped_byte_or_mantissa_bit_in_model_weights_is_found_on_load(tiny_model, tmp_path):
    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    assert (model / MANIFEST).is_file()
    check_checkpoint(model)  # as written: loads
    weights = model / "model.safetensors"
    header = 8 + int.from_bytes(weights.read_bytes()[:8], "little")
    # the lowest mantissa bit of one float32 (little-endian: its first byte): a well-formed file, another model
    _flip(weights, header + 400, 0x01)
    with pytest.raises(DamagedCheckpointError, match=r"m/model\.safetensors: sha256 .* differs.*dvc repro -f"):
        load_model(model)
    _flip(weights, header + 400, 0x01)
    _flip(weights, header + 64)  # 64 bytes would do the same; one is enough
    with pytest.raises(DamagedCheckpointError, match=r"model\.safetensors: sha256"):
        check_checkpoint(model)


# -- GRPO resume checkpoints -------------------------------------------------------------------------------------
@pytest.fixture
def killed_grpo(tmp_path):
    """The uninterrupted tiny GRPO run and a copy killed at update 3 (its checkpoint is ckpt-0000002)."""
    data = write_jsonl(tmp_path / "decomposed" / "train.jsonl", grpo_samples())
    cfg = tiny_cfg(max_updates=4, save_every=2, eval_max_samples=0)
    ref, root = kill_at_3(cfg, data, tmp_path)
    ckpt = root / "work" / "ckpt-0000002"
    assert sorted(p.name for p in ckpt.iterdir()) == [MANIFEST, "policy.safetensors", "trainer_state.pt"]
    return cfg, data, ref, root, ckpt


@pytest.mark.parametrize(
    ("name", "where", "mask"),
    [("policy.safetensors", 2000, 0xFF), ("policy.safetensors", 2000, 0x01), ("trainer_state.pt", 200, 0xFF)],
    ids=["weights-byte", "weights-mantissa-bit", "state-byte"],
)
def test_a_damaged_grpo_checkpoint_is_not_resumed_and_the_rerun_matches(killed_grpo, name, where, mask, caplog):
    cfg, data, ref, root, ckpt = killed_grpo
    _flip(ckpt / name, where, mask)
    with caplog.at_level(logging.WARNING, logger="embodied_rft.train.grpo.checkpoint"):
        again = run(cfg, sft_policy(), data, root)
    assert f"checkpoint damaged: {ckpt / name}: sha256" in caplog.text and "starting fresh" in caplog.text
    # a safe recompute: the run starts over and ends exactly where the uninterrupted one did
    assert again["resumed"] is False and again["updates"] == ref["updates"] == 4
    assert [r["loss"] for r in again["history"]] == pytest.approx([r["loss"] for r in ref["history"]], rel=1e-5)
    resumed, uninterrupted = _weights(root / "out"), _weights(ckpt.parents[2] / "ref" / "out")
    assert all(torch.allclose(v, uninterrupted[k], atol=1e-6) for k, v in resumed.items())


class _Payload:
    """Unpickling this runs code: a trainer state must never be read that way."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_the_trainer_state_is_read_without_unpickling_objects(killed_grpo, caplog):
    cfg, data, ref, root, ckpt = killed_grpo
    marker = ckpt.parent / "payload-ran"
    blob = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    blob["buffer"] = _Payload(marker)
    torch.save(blob, ckpt / "trainer_state.pt")
    seal_folder(ckpt)  # the seal matches: only the loader stands between the payload and its execution
    with caplog.at_level(logging.WARNING, logger="embodied_rft.train.grpo.checkpoint"):
        again = run(cfg, sft_policy(), data, root)
    assert not marker.exists()
    assert "cannot be read by this version (UnpicklingError" in caplog.text
    assert again["resumed"] is False and again["updates"] == 4


# -- the evaluation episode store --------------------------------------------------------------------------------
class _Counting(ExpertPolicy):
    def __init__(self) -> None:
        self.calls = 0

    def plan(self, messages_batch, images=None, contexts=None):
        self.calls += len(messages_batch)
        return super().plan(messages_batch, images, contexts)


def test_one_flipped_result_line_in_the_episode_store_is_played_again(tmp_path, caplog):
    eps = list(tc.episodes("valid_seen", 6))
    path = tmp_path / "sft" / "episodes.jsonl"
    first = run_episodes(eps, _Counting(), tc.PROMPT, EpisodeLimits(), ResultStore(path, "fp"))
    assert aggregate(first)["overall"]["success_rate"] == 100.0
    lines = path.read_text().splitlines()
    rec = json.loads(lines[2])
    assert rec["success"] is True and record_intact(rec)
    lines[2] = json.dumps({**rec, "success": False})  # what moved SFT's average from 34.58 to 34.17
    path.write_text("\n".join(lines) + "\n")

    with caplog.at_level(logging.WARNING, logger="embodied_rft.evaluate.store"):
        store = ResultStore(path, "fp")
    assert store.rejected == [3] and len(store) == 5
    assert "1 record(s) do not match the digest" in caplog.text and "lines 3" in caplog.text
    again = _Counting()
    recs = run_episodes(eps, again, tc.PROMPT, EpisodeLimits(), store)
    assert again.calls == 1  # only the damaged record's episode was played again
    assert aggregate(recs) == aggregate(first)
    assert all(record_intact(json.loads(x)) for x in path.read_text().splitlines()[-1:])


# -- the teacher cache -------------------------------------------------------------------------------------------
def test_an_edited_cached_answer_is_deleted_and_asked_again(tmp_path, caplog):
    path = tmp_path / "answers.sqlite"
    with ResponseCache(path) as c:
        plan = '{"executable_plan": [{"action_id": 3}]}'
        c.put("k1", Answer(plan, 10, 5, "stop"), model="m", sample_id="s", sample_index=0)
        c.put("k2", Answer("other", 1, 1, "stop"), model="m", sample_id="s2", sample_index=0)
    with sqlite3.connect(path) as db:  # still valid JSON: only the digest tells
        db.execute("UPDATE answers SET text = ? WHERE key = 'k1'", ('{"executable_plan": [{"action_id": 4}]}',))
    with caplog.at_level(logging.WARNING, logger="embodied_rft.teacher.cache"), ResponseCache(path) as c:
        assert c.get("k1") is None and c.rejected == 1
        assert c.get("k2") == Answer("other", 1, 1, "stop")
        assert len(c) == 1  # the bad row is gone, so the fresh answer can be stored
        assert c.put("k1", Answer("fresh", 1, 1, "stop"), model="m", sample_id="s", sample_index=0)
        assert c.get("k1").text == "fresh"
    assert "does not match the digest written with it" in caplog.text


def test_a_cache_written_before_digests_is_sealed_once(tmp_path, caplog):
    path = tmp_path / "answers.sqlite"
    with sqlite3.connect(path) as db:  # the schema before this change: no digest column
        db.execute(
            "CREATE TABLE answers (key TEXT PRIMARY KEY, model TEXT NOT NULL, sample_id TEXT NOT NULL, "
            "sample_index INTEGER NOT NULL, text TEXT NOT NULL, tokens_in INTEGER NOT NULL, "
            "tokens_out INTEGER NOT NULL, finish_reason TEXT, created REAL NOT NULL)"
        )
        db.execute("INSERT INTO answers VALUES ('k', 'm', 's', 0, 'old answer', 3, 4, 'stop', 0)")
    with caplog.at_level(logging.WARNING, logger="embodied_rft.teacher.cache"), ResponseCache(path) as c:
        assert c.get("k") == Answer("old answer", 3, 4, "stop")
    assert "sealed 1 answers cached before digests existed" in caplog.text
    with sqlite3.connect(path) as db:
        db.execute("UPDATE answers SET text = 'edited' WHERE key = 'k'")
    with ResponseCache(path) as c:
        assert c.get("k") is None and c.rejected == 1


# -- GRPO's on-policy state file -----------------------------------------------------------------------------------
def test_an_edited_on_policy_state_file_is_collected_again(tmp_path, caplog):
    from embodied_rft.train.grpo.onpolicy import load_or_collect

    calls = []

    def collect():
        calls.append(1)
        return [{"sample_id": "s1", "label": "a"}, {"sample_id": "s2", "label": "b"}], {"states": 2}

    path = tmp_path / "onpolicy.jsonl"
    first = load_or_collect(path, "k", collect)
    assert load_or_collect(path, "k", collect) == first and len(calls) == 1  # reused as written
    path.write_text(path.read_text().replace('"label":"b"', '"label":"c"'))
    with caplog.at_level(logging.WARNING, logger="embodied_rft.train.grpo.onpolicy"):
        again = load_or_collect(path, "k", collect)
    assert again == first and len(calls) == 2
    assert "does not match the sha256 in onpolicy.meta.json" in caplog.text
