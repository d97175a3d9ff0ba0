"""The one content-identity rule behind SFT resume, GRPO resume and the evaluation's result store."""

import os

import pytest

from embodied_rft.core import digest as fpm
from embodied_rft.evaluate.store import dir_fingerprint
from embodied_rft.train.sft.config import SFTConfig
from embodied_rft.train.sft.resume import run_fingerprint


@pytest.fixture
def two_copies(tmp_path, monkeypatch):
    """Two model folders holding the same 3 MiB shard, above a 1 MiB whole-hash limit."""
    monkeypatch.setattr(fpm, "FULL_HASH_BYTES", 1 << 20)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    blob = bytearray(range(256)) * (3 * 4096)
    for d in (a, b):
        (d / "model.safetensors").write_bytes(blob)
        (d / "config.json").write_text('{"hidden_size": 8}')
    return a, b, blob


def test_a_small_file_is_hashed_whole(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_bytes(b"abc")
    assert fpm.file_digest(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # sha256("abc")


def test_a_large_file_is_identified_by_sampled_blocks_not_by_time(two_copies):
    """Above FULL_HASH_BYTES: size + evenly spread 1 MiB blocks. An identical copy with another mtime (a DVC
    checkout) keeps the identity; a retrained shard (every block differs) gets a new one."""
    a, b, blob = two_copies
    os.utime(b / "model.safetensors", ns=(1, 1))
    ida = fpm.path_identity(a)
    assert ida == fpm.path_identity(b)
    assert ida["files"]["model.safetensors"].startswith("sampled:")
    assert not ida["files"]["config.json"].startswith("sampled:")
    blob[0] ^= 1  # the first block is always sampled
    (b / "model.safetensors").write_bytes(blob)
    assert fpm.path_identity(b) != ida


def test_resume_and_result_store_follow_the_same_rule(two_copies, tmp_path):
    """SFT's run fingerprint and the evaluation store's model fingerprint: equal for a checked-out copy of the
    same weights, different for retrained weights of the same size (the mtime rule got both wrong)."""
    a, b, blob = two_copies
    data = tmp_path / "train.jsonl"
    data.write_text('{"id": 1}\n')
    cfg = SFTConfig()
    os.utime(b / "model.safetensors", ns=(1, 1))
    assert dir_fingerprint(a) == dir_fingerprint(b)
    assert run_fingerprint(cfg, a, data)["model"] == run_fingerprint(cfg, b, data)["model"]
    blob[-1] ^= 1  # the last block is always sampled
    (b / "model.safetensors").write_bytes(blob)
    assert dir_fingerprint(a) != dir_fingerprint(b)
    assert run_fingerprint(cfg, a, data)["model"] != run_fingerprint(cfg, b, data)["model"]
    blob[-1] ^= 1
    (b / "model.safetensors").write_bytes(blob)
    (b / "extra.bin").write_bytes(b"")  # same weights, one more file
    assert dir_fingerprint(b) != dir_fingerprint(a)
