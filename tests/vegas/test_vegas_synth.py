"""Failure synthesis (vegas/synth.py) on a small generated world: the issue's floors, balance, labels from the
oracle, records SFT can read, a held-out split by episode, a byte-identical rerun, and errors that name the line."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.jsonl import DataError
from embodied_rft.train.sft.data import read_sft_records
from embodied_rft.vegas.config import SynthConfig
from embodied_rft.vegas.synth import run_synth
from embodied_rft.vegas.text import parse_verdict
from embodied_rft.world import GeneratorConfig, Simulator, generate_episodes
from embodied_rft.world.oracle import WorldOracle

WORLD = GeneratorConfig(
    seed=5,
    task_types=("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep"),
    target_types=("Apple", "Tomato", "Mug", "Plate", "Bowl", "SoapBar", "Cloth", "Book", "CellPhone", "KeyChain"),
)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    eps = generate_episodes(WORLD, "train", 60)
    write_jsonl_atomic(root / "train.jsonl", eps)
    cfg = SynthConfig(val_fraction=0.2, reasoning="brief", seed=1)
    m = run_synth(cfg, root / "train.jsonl", root / "verify", root / "synth.json")
    recs = {
        s: [json.loads(x) for x in (root / "verify" / f"{s}.jsonl").read_text().splitlines()] for s in ("train", "val")
    }
    return root, cfg, eps, m, recs


def test_floors_of_the_issue_hold(synth):
    _, _, _, m, _ = synth
    assert m["floors"] == {
        "failures_for_90pct_of_episodes": True,
        "each_mode_20pct_of_negatives": True,
        "silent_30pct_of_negatives": True,
        "expert_steps_all_correct": True,
    }
    assert m["failure_rate"] >= 0.9 and m["expert_steps_not_correct"] == 0
    assert min(m["mode_share"].values()) >= 0.2 and m["silent_share"] >= 0.3
    head = json.loads((synth[0] / "synth.json").read_text())
    assert head["floors"] == m["floors"] and "config" not in head


def test_positives_and_negatives_are_balanced_and_labelled_by_the_oracle(synth):
    _, _, eps, m, recs = synth
    allr = recs["train"] + recs["val"]
    verdicts = Counter(r["verdict"] for r in allr)
    assert verdicts["yes"] == verdicts["no"] == m["positives"] == m["negatives"] > 50
    for r in allr:
        assert r["verdict"] == ("yes" if r["label"] == "correct" else "no")
        assert parse_verdict(r["messages"][-1]["content"]) == r["verdict"]
        assert r["source"] == ("expert" if r["mode"] is None else "failure")
    # every expert record is correct, every negative comes from an injected failure of a known mode
    assert all(r["label"] == "correct" for r in allr if r["source"] == "expert")
    neg = [r for r in allr if r["verdict"] == "no"]
    assert {r["mode"] for r in neg} == {"wrong_object", "wrong_receptacle", "precondition"}
    # silent modes execute, loud ones are rejected by the simulator
    assert all(r["executes"] for r in neg if r["mode"] in ("wrong_object", "wrong_receptacle") and r["step"] >= 0)
    assert all(not r["executes"] and r["reason"] == "invalid" for r in neg if r["mode"] == "precondition")
    # a record's label is what the oracle says when the record's history is replayed
    by_id = {e["episode_id"]: e for e in eps}
    for r in neg[:40]:
        ep = by_id[r["episode_id"]]
        sim = Simulator.from_episode(ep)
        for h in r["history"]:
            sim.step(h["action_id"])
        assert sim.observe_text() == r["observation"]
        assert WorldOracle(ep).judge(sim, r["candidate"]["action_id"]).label == r["label"]


def test_records_are_sft_chat_records_and_the_split_is_by_episode(synth):
    root, _, _, _, recs = synth
    sft = read_sft_records(root / "verify" / "train.jsonl")
    assert len(sft) == len(recs["train"]) and sft[0].messages[-1]["role"] == "assistant"
    assert sft[0].messages[0]["content"].startswith("Task: ") and "Candidate action: " in sft[0].messages[0]["content"]
    train_eps = {r["episode_id"] for r in recs["train"]}
    val_eps = {r["episode_id"] for r in recs["val"]}
    assert val_eps and not (train_eps & val_eps)


def test_a_rerun_writes_the_same_bytes(synth, tmp_path):
    root, cfg, _, _, _ = synth
    run_synth(cfg, root / "train.jsonl", tmp_path / "verify", tmp_path / "synth.json")
    for s in ("train", "val"):
        assert (tmp_path / "verify" / f"{s}.jsonl").read_bytes() == (root / "verify" / f"{s}.jsonl").read_bytes()


def _rerun(synth, tmp_path, **wording) -> tuple[list[dict], list[dict]]:
    """The fixture's train records and those of a rerun with other wording options, checked to be the same records."""
    root, cfg, _, _, recs = synth
    run_synth(dataclasses.replace(cfg, **wording), root / "train.jsonl", tmp_path / "verify", tmp_path / "synth.json")
    again = [json.loads(x) for x in (tmp_path / "verify" / "train.jsonl").read_text().splitlines()]
    assert [r["record_id"] for r in again] == [r["record_id"] for r in recs["train"]]
    return recs["train"], again


def test_find_sentence_relevance_rewords_only_the_finds(synth, tmp_path):
    before, again = _rerun(synth, tmp_path, find_sentence="relevance")
    finds = 0
    for a, b in zip(before, again, strict=True):
        assert a["verdict"] == b["verdict"] and a["messages"][0] == b["messages"][0]  # same prompt, same label
        ca, cb = a["messages"][-1]["content"], b["messages"][-1]["content"]
        if a["candidate"]["action_name"].startswith("find a "):
            finds += 1
            assert f"'{a['candidate']['action_name']}'" not in cb.splitlines()[1]  # no claim about the simulator
            assert a["facts"]["arg"] in cb.splitlines()[1]
        else:
            assert ca == cb
    assert finds > 20


def test_verdict_first_opens_every_verification_with_the_oracles_verdict(synth, tmp_path):
    before, again = _rerun(synth, tmp_path, verdict="first")
    for a, b in zip(before, again, strict=True):
        assert a["messages"][0] == b["messages"][0] and a["verdict"] == b["verdict"]
        la, lb = a["messages"][-1]["content"].splitlines(), b["messages"][-1]["content"].splitlines()
        assert lb[0] == f"action_is_correct: {a['verdict']}" and lb[1:] == la[:-1]
    assert {r["verdict"] for r in again} == {"yes", "no"}


def test_bad_episodes_fail_naming_file_and_line(tmp_path):
    eps = generate_episodes(WORLD, "train", 2)
    eps[1]["expert_plan"][0] = "pick up the Spaceship"
    write_jsonl_atomic(tmp_path / "train.jsonl", eps)
    with pytest.raises(DataError, match=r"train.jsonl:2: episode gen-train-000001"):
        run_synth(SynthConfig(), tmp_path / "train.jsonl", tmp_path / "verify", tmp_path / "m.json")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match="no episodes"):
        run_synth(SynthConfig(), tmp_path / "empty.jsonl", tmp_path / "verify", tmp_path / "m.json")
    assert not (tmp_path / "verify").exists()  # nothing half-written


def test_the_stage_creates_every_dvc_output_with_template_cots(synth, tmp_path):
    """dvc.yaml lists paths.verify_cache among synth's outputs: with synth.cot=template no teacher writes to it,
    and DVC fails a stage whose declared output is missing, so the stage must create it (as distill does)."""
    import subprocess
    import sys
    from pathlib import Path

    root = synth[0]
    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "run"
    rel = lambda p: __import__("os").path.relpath(p, repo)  # noqa: E731  (paths must be relative to the repo)
    proc = subprocess.run(
        [
            sys.executable, "-m", "stages.synth", "--config-dir", ".", "--config-name", "params", "hydra.run.dir=.",
            "hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled",
            "synth.cot=template", f"paths.episodes_dir={rel(root)}", f"paths.verify_dir={rel(out / 'verify')}",
            f"paths.verify_cache={rel(out / 'verify_cache')}", f"paths.metrics_dir={rel(out / 'metrics')}",
        ],
        cwd=repo, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "verify_cache").is_dir()
    assert (out / "verify" / "train.jsonl").stat().st_size > 0
    assert json.loads((out / "metrics" / "synth.json").read_text())
