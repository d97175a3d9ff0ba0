"""pipeline.lineage: dvc.lock hashes are quoted only for the artifacts the run actually read."""

from __future__ import annotations

from pathlib import Path

import yaml

from embodied_rft.pipeline import lineage


def _lock(tmp_path: Path) -> Path:
    lock = tmp_path / "dvc.lock"
    lock.write_text(
        yaml.safe_dump(
            {
                "schema": "2.0",
                "stages": {
                    "sft": {
                        "params": {"params.yaml": {"sft": {"lr": 0.002}}},
                        "outs": [{"path": "models/sft", "md5": "abc.dir"}],
                    },
                    "grpo": {"outs": [{"path": "models/grpo", "md5": "def.dir"}]},
                },
            }
        )
    )
    return lock


def test_artifacts_listed_in_the_lock_get_their_hashes(tmp_path: Path) -> None:
    out = lineage(_lock(tmp_path), {"seed": 0}, used=["models/sft", "models/grpo"])
    assert out["dvc_lock"] == str(tmp_path / "dvc.lock") and "not_from_dvc_lock" not in out
    assert out["stages"]["sft"]["outs"] == {"models/sft": "abc.dir"}
    assert out["stages"]["grpo"]["outs"] == {"models/grpo": "def.dir"}
    assert len(out["stages"]["sft"]["params_sha256"]) == 16 and len(out["params_sha256"]) == 16


def test_a_run_on_other_paths_does_not_quote_the_lock(tmp_path: Path) -> None:
    out = lineage(_lock(tmp_path), used=["runs/seed-1/models/sft", "models/grpo"])
    assert out["dvc_lock"] is None and out["stages"] == {}
    assert out["not_from_dvc_lock"] == ["runs/seed-1/models/sft"]


def test_no_lock_no_hashes(tmp_path: Path) -> None:
    out = lineage(tmp_path / "missing.lock", used=["models/sft"])
    assert out["dvc_lock"] is None and out["stages"] == {} and "not_from_dvc_lock" not in out
