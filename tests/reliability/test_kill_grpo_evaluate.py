"""SIGKILL the local GRPO engine and the evaluation at random points (a real signal, in a child process); the
rerun resumes and ends exactly where an uninterrupted run ends, and no partial file is ever visible at an
output path. (tests/train/test_grpo_local.py and tests/evaluate/test_interactive.py stop these runs with an
exception raised from inside; a SIGKILL gives no chance to clean up.)

The uninterrupted reference runs in this process (torch on one thread, as in the child), which also times the
work; the child is killed a random fraction of that time after its imports, while a watcher polls the outputs.
A fast test checks that what a save killed midway leaves (its temp folder) is removed by the next save.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from embodied_rft.config import build
from embodied_rft.models import load_model
from tests.helpers import tiny_checkpoints as tc
from tests.helpers.grpo_fixtures import grpo_samples, sft_policy, write_jsonl
from tests.helpers.killing import kill_repeatedly, kill_rng, run_to_end, whole_json, whole_jsonl, whole_model

# 4 prompts, G = 4, N_B = 2, K_2 = 2: a checkpoint after every buffer (2 updates), held-out eval before/after
GRPO_CFG = {
    "group_size": 4,
    "temperature": 1.0,
    "max_new_tokens": 80,
    "max_prompt_tokens": 256,
    "rollout_batch_size": 2,
    "lr": 1e-4,
    "lr_scheduler": "constant_with_warmup",
    "warmup_ratio": 0.0,
    "filter": {"buffer_size": 2, "updates_per_buffer": 2},
    "train_batch_size": 4,
    "micro_batch_size": 4,
    "max_updates": 6,
    "num_episodes": 20,
    "save_every": 2,
    "report_to": [],
    "eval_max_samples": 2,
    "eval_batch_size": 2,
    "num_threads": 1,
}

GRPO = r"""
import json, sys
from pathlib import Path
import logging
import torch
torch.set_num_threads(1)
logging.basicConfig(level=logging.INFO)
from embodied_rft.config import build
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.grpo.driver import run_grpo_local
cfg = build(GRPOConfig, json.loads(sys.argv[1]), "grpo")
root = Path(sys.argv[4])
print("READY", flush=True)
run_grpo_local(cfg, sys.argv[2], sys.argv[3], sys.argv[3], root / "out", root / "metrics.json", root / "plots.csv",
               root / "work")
"""


def _grpo_in_process(root: Path, policy: Path, data: Path) -> dict:
    from embodied_rft.train.grpo.config import GRPOConfig
    from embodied_rft.train.grpo.driver import run_grpo_local

    return run_grpo_local(
        build(GRPOConfig, GRPO_CFG, "grpo"),
        policy,
        data,
        data,
        root / "out",
        root / "metrics.json",
        root / "plots.csv",
        root / "work",
    )


def _weights(path: Path) -> dict[str, torch.Tensor]:
    model, _ = load_model(path)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _plot_rows(path: Path) -> list[dict]:
    import csv

    return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in csv.DictReader(path.open())]


def _history(m: dict) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in m["history"]]


@pytest.mark.slow
def test_grpo_sigkilled_at_random_points_resumes_to_the_uninterrupted_result(tmp_path):
    """~60 s: a reference run and up to three SIGKILLed children, then the rerun to the end."""
    import time

    rng, replay = kill_rng("grpo")
    policy = sft_policy()
    data = write_jsonl(tmp_path / "decomposed" / "train.jsonl", grpo_samples())
    t0 = time.monotonic()
    ref = _grpo_in_process(tmp_path / "ref", policy, data)
    work_s = time.monotonic() - t0
    assert ref["updates"] == 6 and ref["heldout"] is not None

    root = tmp_path / "killed"
    args = [json.dumps(GRPO_CFG), str(policy), str(data), str(root)]

    def watch() -> None:
        whole_json(root / "metrics.json")
        whole_model(root / "out")

    kills = kill_repeatedly(GRPO, args, root, rng, work_s, watch)
    assert kills[0].killed, f"the child finished before the kill ({replay})"
    had_checkpoint = (root / "work" / "latest").exists()

    rerun = run_to_end(GRPO, args, root / "rerun.log")
    m = json.loads((root / "metrics.details.json").read_text())
    assert m["updates"] == ref["updates"] and m["buffers"] == ref["buffers"], replay
    assert m["counters"] == ref["counters"] and m["filter"] == ref["filter"], replay
    assert _history(m) == _history(ref), replay  # losses, rewards, filter counts: the same trajectory
    assert m["heldout"] == ref["heldout"]
    a, b = _weights(root / "out"), _weights(tmp_path / "ref" / "out")
    for name, v in a.items():
        assert torch.equal(v, b[name]), (name, replay)
    assert _plot_rows(root / "plots.csv") == _plot_rows(tmp_path / "ref" / "plots.csv")
    # resumed iff the kill came after the first checkpoint (and then it retraced only the rest)
    assert m["resumed"] is had_checkpoint and ("resumed from" in rerun.output) is had_checkpoint, replay
    # no temp folder of a save the kill cut short is left behind (a 7B one holds ~3x the model's size)
    leftovers = [p.name for p in [*(root / "work").glob(".*"), *root.glob(".*")] if p.is_dir()]
    assert not leftovers, leftovers


def test_what_a_save_killed_midway_leaves_is_removed_by_the_next_save(tmp_path):
    """A kill inside a checkpoint or final-model save leaves its temp folder (for a 7B policy: weights plus AdamW
    moments, ~3x the model). The next save clears such folders, and only those."""
    from embodied_rft.core.integrity import save_pretrained_atomic
    from embodied_rft.train.grpo.checkpoint import EngineState, load_checkpoint, save_checkpoint

    work, models = tmp_path / "work", tmp_path / "models"
    import subprocess
    import sys

    gone = int(
        subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout
    )  # a writer that no longer runs
    dead = [
        work / ".ckpt-0000002.k3x9q1zz",
        models / f".grpo.tmp-{gone}-a1b2c3d4",
        models / f".grpo.old-{gone}-0badcafe",
    ]
    kept = [work / "notes", models / ".grpo.work", models / "sft"]
    for d in dead + kept:
        d.mkdir(parents=True)
        (d / "x.bin").write_bytes(b"0" * 1024)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    save_checkpoint(work, "fp", model, opt, sched, EngineState(updates=4), None)

    class Saves:
        def save_pretrained(self, d):
            (Path(d) / "saved.txt").write_text("ok")

    save_pretrained_atomic(Saves(), Saves(), models / "grpo")
    assert not [d for d in dead if d.exists()]
    assert all(d.is_dir() for d in kept) and (models / "grpo" / "saved.txt").is_file()
    assert load_checkpoint(work, "fp")[1]["state"].updates == 4


EVALUATE = r"""
import json, sys
from pathlib import Path
import logging
import torch
torch.set_num_threads(1)
logging.basicConfig(level=logging.INFO)
from embodied_rft.config import build
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.evaluate import EvalConfig, run_evaluate
cfg = build(EvalConfig, json.loads(sys.argv[1]), "evaluate")
models = json.loads(sys.argv[2])
root = Path(sys.argv[5])
print("READY", flush=True)
run_evaluate(cfg, models, [sys.argv[3]], sys.argv[4], root / "eval.json", root / "eval.md", root / "plots", root / "work",
             prompt_cfg=PromptConfig(style="compact", action_list="extras"))
"""

EVAL_CFG = {
    "max_episodes": 0,
    "max_planner_calls": 3,
    "max_offline_samples": 2,
    "episodes_per_task": 1,
    "generation": {"max_new_tokens": 60, "device": "cpu"},
}


@pytest.mark.slow
def test_evaluate_sigkilled_at_random_points_resumes_to_the_same_report(tmp_path):
    """~60 s: a reference run and up to three SIGKILLed children, then the rerun to the end."""
    import time

    from embodied_rft.data.decompose import decompose_episode
    from embodied_rft.evaluate import EvalConfig, run_evaluate

    rng, replay = kill_rng("evaluate")
    eps = list(tc.episodes("valid_seen", 6))
    ep_path = write_jsonl(tmp_path / "episodes" / "valid_seen.jsonl", eps)
    val = write_jsonl(tmp_path / "decomposed" / "val.jsonl", list(decompose_episode(eps[0], tc.PROMPT))[:2])
    models = {"base": str(tc.text_model()), "sft": str(tc.fitted_model())}

    def run_ref(root: Path) -> dict:
        with tc.one_thread():
            return run_evaluate(
                build(EvalConfig, EVAL_CFG, "evaluate"),
                models,
                [ep_path],
                val,
                root / "eval.json",
                root / "eval.md",
                root / "plots",
                root / "work",
                prompt_cfg=tc.PROMPT,
            )

    t0 = time.monotonic()
    ref = run_ref(tmp_path / "ref")
    work_s = time.monotonic() - t0
    root = tmp_path / "killed"
    args = [json.dumps(EVAL_CFG), json.dumps(models), str(ep_path), str(val), str(root)]
    outputs = (root / "eval.json", root / "plots" / "evaluate_success_by_subset.json")

    report = (tmp_path / "ref" / "eval.md").read_text()

    def watch() -> None:
        for p in outputs:
            whole_json(p)
        if (root / "eval.md").exists():
            assert (root / "eval.md").read_text() == report
        for store in (root / "work").glob("*/episodes.jsonl"):
            # the per-episode store is append-only: at most its last line may be cut by the kill
            lines = store.read_bytes().split(b"\n")
            for line in lines[:-1]:
                json.loads(line)

    kills = kill_repeatedly(EVALUATE, args, root, rng, work_s, watch)
    assert kills[0].killed, f"the child finished before the kill ({replay})"
    # episodes whose result was written (a complete line) before the kill are not played again
    done = sum(s.read_bytes().count(b"\n") for s in (root / "work").glob("*/episodes.jsonl"))

    rerun = run_to_end(EVALUATE, args, root / "rerun.log")
    assert ("already done" in rerun.output) is (done > 0), replay
    m = json.loads((root / "eval.details.json").read_text())
    assert m["table"] == ref["table"], replay
    for name in ref["models"]:
        assert m["models"][name]["interactive"] == ref["models"][name]["interactive"], (name, replay)
        assert m["models"][name]["offline"] == ref["models"][name]["offline"], (name, replay)
    assert (root / "eval.md").read_text() == (tmp_path / "ref" / "eval.md").read_text()
    for store in (root / "work").glob("*/episodes.jsonl"):
        recs = [json.loads(x) for x in store.read_text().splitlines()]
        assert sorted(r["episode_id"] for r in recs) == sorted(e["episode_id"] for e in eps), store
    whole_jsonl(root / "work" / "sft" / "episodes.jsonl")


@pytest.fixture(autouse=True)
def _one_thread():
    with tc.one_thread():
        yield


def test_a_checkpoint_from_another_code_version_is_not_resumed(tmp_path, monkeypatch):
    """A state pickled by code whose module was since renamed (the train/ reorganisation moved EngineState)
    cannot be unpickled: the engine starts fresh instead of failing."""
    import sys
    import types

    import torch

    from embodied_rft.core.integrity import seal_folder
    from embodied_rft.train.grpo.checkpoint import _LATEST, _STATE, _WEIGHTS, load_checkpoint

    gone = types.ModuleType("embodied_rft_renamed_module")

    class EngineState:  # stands for the class at its old import path
        pass

    EngineState.__module__ = gone.__name__
    EngineState.__qualname__ = "EngineState"
    gone.EngineState = EngineState
    monkeypatch.setitem(sys.modules, gone.__name__, gone)
    folder = tmp_path / "ckpt-0000003"
    folder.mkdir()
    torch.save({}, folder / _WEIGHTS)
    torch.save({"fingerprint": "fp", "state": EngineState()}, folder / _STATE)
    (tmp_path / _LATEST).write_text("ckpt-0000003\n")
    seal_folder(folder)  # intact as written: only the class lookup fails
    monkeypatch.delitem(sys.modules, gone.__name__)  # the module is gone, as after a rename
    assert load_checkpoint(tmp_path, "fp") is None
