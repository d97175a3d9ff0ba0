"""SFT under kills: a damaged work folder (what a kill mid-save leaves) resumes or restarts instead of crashing,
and (slow) SIGKILLs at random points of a real run end where an uninterrupted run ends.

tests/train/test_sft.py already SIGKILLs a run right after a checkpoint (a fixed point); the random points here
can land inside a save: transformers writes ``trainer_state.json`` in place, last, so a kill can leave it cut
short; the run fingerprint used to be written in place too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from embodied_rft.core.integrity import seal_folder
from embodied_rft.train.sft.resume import FINGERPRINT, prepare_work_dir
from tests.helpers.killing import kill_repeatedly, kill_rng, run_to_end, whole_json, whole_model

FP = {"settings": {"lr": 1}, "model": {}, "data": "x"}


def test_a_checkpoint_with_a_cut_trainer_state_is_passed_over(tmp_path, caplog):
    work = tmp_path / "work"
    assert prepare_work_dir(work, FP, "auto") is None
    for step, state in ((2, '{"global_step": 2}'), (4, '{"global_step": 4, "log_hist')):  # step 4: cut by a kill
        (work / f"checkpoint-{step}").mkdir()
        (work / f"checkpoint-{step}" / "trainer_state.json").write_text(state)
    seal_folder(work / "checkpoint-2")  # saved whole: sealed by callbacks.SealCheckpoints; step 4 never got there
    assert prepare_work_dir(work, FP, "auto") == work / "checkpoint-2"
    assert "ignoring checkpoint" in caplog.text and "checkpoint-4: it is not sealed" in caplog.text
    caplog.clear()
    seal_folder(work / "checkpoint-4")  # sealed, yet its state file does not parse: still passed over
    assert prepare_work_dir(work, FP, "auto") == work / "checkpoint-2"
    assert "checkpoint-4: its trainer_state.json is cut short or unreadable" in caplog.text


def test_a_cut_fingerprint_clears_the_folder_instead_of_crashing(tmp_path, caplog):
    work = tmp_path / "work"
    prepare_work_dir(work, FP, "auto")
    (work / "checkpoint-2").mkdir()
    (work / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (work / FINGERPRINT).write_text(json.dumps(FP)[:10])  # what an in-place write cut by a kill leaves
    assert prepare_work_dir(work, FP, "auto") is None
    assert "fingerprint is unreadable" in caplog.text and not (work / "checkpoint-2").exists()
    assert json.loads((work / FINGERPRINT).read_text()) == FP
    assert not [p.name for p in work.iterdir() if p.name.startswith(".")]  # written atomically, no temp left


SFT = r"""
import json, logging, sys
import torch
torch.set_num_threads(1)
logging.basicConfig(level=logging.INFO)
from embodied_rft.config import build
from embodied_rft.train.sft.trainer import run_sft
from embodied_rft.train.sft.config import SFTConfig
cfg = build(SFTConfig, json.loads(sys.argv[1]), "sft")
root = sys.argv[4]
print("READY", flush=True)
run_sft(cfg, sys.argv[2], sys.argv[3], root + "/sft", root + "/sft.json", root + "/sft_loss.csv", work_dir=root + "/work")
"""

SFT_CFG = {
    "lr": 2e-3,
    "max_steps": 10,
    "batch_size": 4,
    "grad_accum": 1,
    "warmup_ratio": 0.2,
    "logging_steps": 1,
    "save_steps": 1,
    "max_len": 384,
    "num_threads": 1,
    "device": "cpu",
    "val": {"max_samples": 0},
}


@pytest.mark.slow
def test_sft_sigkilled_at_random_points_resumes_to_the_uninterrupted_result(tmp_path):
    """~90 s: a checkpoint every step, so random kills land in saves as often as in steps."""
    from embodied_rft.config import build
    from embodied_rft.models import ModelConfig, build_base_model, load_model
    from embodied_rft.train.sft.config import SFTConfig
    from embodied_rft.train.sft.data import corpus_texts, read_sft_records
    from embodied_rft.train.sft.synthetic import write_synthetic_sft
    from embodied_rft.train.sft.trainer import run_sft

    rng, replay = kill_rng("sft")
    data = write_synthetic_sft(tmp_path / "sft.jsonl", 40, seed=0)
    base = build_base_model(
        ModelConfig(name="tiny", kind="tiny", vocab_size=800), corpus_texts(read_sft_records(data)), tmp_path / "base"
    )
    threads = torch.get_num_threads()
    t0 = time.monotonic()
    try:
        ref = run_sft(
            build(SFTConfig, SFT_CFG, "sft"),
            base,
            data,
            tmp_path / "ref" / "sft",
            tmp_path / "ref" / "sft.json",
            tmp_path / "ref" / "sft_loss.csv",
            work_dir=tmp_path / "ref" / "work",
        )
    finally:
        torch.set_num_threads(threads)
    work_s = time.monotonic() - t0

    root = tmp_path / "killed"
    args = [json.dumps(SFT_CFG), str(base), str(data), str(root)]

    def watch() -> None:
        whole_json(root / "sft.json")
        whole_model(root / "sft")

    kills = kill_repeatedly(SFT, args, root, rng, work_s, watch)
    assert kills[0].killed, f"the child finished before the kill ({replay})"
    run_to_end(SFT, args, root / "rerun.log")
    m = json.loads((root / "sft.details.json").read_text())  # the whole record (sft.json holds the headline)
    assert m["steps"] == ref["steps"] == 10 and m["tokens"] == ref["tokens"], replay  # same batches, same order
    assert m["final_loss"] == pytest.approx(ref["final_loss"], rel=1e-4), replay
    a, _ = load_model(root / "sft")
    b, _ = load_model(tmp_path / "ref" / "sft")
    rb = dict(b.named_parameters())
    for name, p in a.named_parameters():
        assert torch.allclose(p, rb[name], rtol=1e-4, atol=1e-6), (name, replay)
    got, want = (_loss_rows(p / "sft_loss.csv") for p in (root, tmp_path / "ref"))
    assert [s for s, _ in got] == [s for s, _ in want] == list(range(1, 11)), replay  # one row per step, none twice
    assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-4), replay


def _loss_rows(path: Path) -> list[tuple[int, float]]:
    import csv

    return [(int(r["step"]), float(r["loss"])) for r in csv.DictReader(path.open())]
