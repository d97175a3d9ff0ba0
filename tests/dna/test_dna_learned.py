"""D&A's learned tiny reward models' parts (dna/learned.py): the criterion's format, the frame reader and the rule
(grounded and not) on hand-made frames and on the bench with each episode's own goal, the training records, and the
training stage's files; an untrained model cannot write a criterion, and says so instead of scoring."""

from __future__ import annotations

import functools
import json

import pytest

from embodied_rft.config import build
from embodied_rft.dna.bench import build_bench
from embodied_rft.dna.config import BenchConfig, DnaConfig, EvalConfig, FramesConfig
from embodied_rft.dna.frames import key_indices, replay
from embodied_rft.dna.learned import (
    CriterionGold,
    CriterionTiny,
    criterion_progress,
    criterion_text,
    lookalike_classes,
    parse_criterion,
    read_frame,
    tiny_chat,
    training_records,
)
from embodied_rft.dna.llm import ParseError, RewardModelFailed, parse_answer, progress_values
from embodied_rft.dna.rm_eval import evaluate_rm
from embodied_rft.dna.rms import assess
from embodied_rft.dna.train import run_rm_train
from tests.helpers.dna_episodes import preset_episodes as episodes
from tests.helpers.tiny_checkpoints import one_thread, text_model


@functools.lru_cache(maxsize=1)
def _bench():
    eps = episodes("valid_unseen", 240)
    return build_bench(list(eps), BenchConfig(paraphrases=1))[0], {e["episode_id"]: e for e in eps}


def test_criterion_text_round_trips_and_bad_criteria_are_parse_errors():
    ep = next(e for e in episodes("valid_unseen", 20) if e["task_type"] == "look_at_obj_in_light")
    crit = parse_criterion(criterion_text(ep))
    assert crit["task"] == "look_at_obj_in_light" and crit["lamp"] == ep["goal"]["toggle_target"]
    for text, msg in (
        ('{"task": "fly", "object": "Apple"}', "field 'task'"),
        ('{"task": "pick_and_place_simple", "object": "Unicorn"}', "field 'object'"),
        ('{"task": "pick_and_place_simple", "object": "Apple", "receptacle": null}', "field 'receptacle'"),
        ("Apple on the table", "not JSON"),
    ):
        with pytest.raises(ParseError, match=msg):
            parse_criterion(text)


def test_the_rule_tracks_holding_cleaning_and_placing_and_ungrounded_merges_lookalikes():
    f = read_frame("You are at the Sink_2 in the kitchen.\nYou see: Sink_2 [Faucet (on), Bowl (clean)].\nIn hand: Mug.")
    assert f["held"] == ("Mug", set()) and ("Bowl", {"clean"}, "Sink") in f["seen"]
    crit = {"task": "pick_clean_then_place_in_recep", "object": "Bowl", "receptacle": "Cabinet", "lamp": None}
    frames = [
        "You are in the middle of the kitchen.\nAround you: Cabinet (closed), Sink.\nIn hand: nothing.",
        "You are at the Shelf in the kitchen.\nYou see: Shelf.\nIn hand: Bowl (dirty).",
        "You are at the Sink in the kitchen.\nYou see: Sink [Faucet (off), Bowl (clean)].\nIn hand: nothing.",
        "You are at the Cabinet in the kitchen.\nYou see: Cabinet (open) [Bowl (clean)].\nIn hand: nothing.",
        "You are at the Cabinet in the kitchen.\nYou see: Cabinet (closed).\nIn hand: nothing.",  # out of sight
        "You are at the Cabinet in the kitchen.\nYou see: Cabinet (open).\nIn hand: Bowl (clean).",  # taken out
    ]
    assert criterion_progress(frames, crit) == pytest.approx([0, 1 / 3, 2 / 3, 1, 1, 2 / 3])
    plate = [fr.replace("Bowl", "Plate") for fr in frames]
    assert criterion_progress(plate, crit) == [0.0] * 6
    assert lookalike_classes()["Plate"] == lookalike_classes()["Bowl"] == "Bowl/Plate"
    assert criterion_progress(plate, crit, grounded=False) == pytest.approx([0, 1 / 3, 2 / 3, 1, 1, 2 / 3])


def test_the_gold_criterion_ranks_perfectly_grounded_and_takes_lookalikes_for_success_ungrounded():
    records, eps = _bench()
    frames, cfg = FramesConfig(), EvalConfig()
    grounded = evaluate_rm(CriterionGold(True), records, frames, cfg, eps)[0]
    ungrounded = evaluate_rm(CriterionGold(False), records, frames, cfg, eps)[0]
    assert grounded["tau"] == 1.0 and grounded["failure_as_success"]["wrong_object"] == 0.0
    assert ungrounded["tau"] < grounded["tau"]
    lookalike = [r for r in records if r["kind"] == "wrong_object" and r["lookalike"]]
    assert lookalike and ungrounded["failure_as_success"]["wrong_object"] > 0


def test_training_records_hold_optimal_trajectories_and_their_prefixes():
    eps = episodes("train", 6)
    direct, crit = training_records(eps, 8, 2, seed=0)
    assert len(crit) == 6 and 6 < len(direct) <= 18
    for rec in direct:
        ep = next(e for e in eps if rec["sample_id"].startswith(e["episode_id"] + ":"))
        cut = int(rec["sample_id"].rsplit(":", 1)[1])
        values, _ = progress_values(parse_answer(rec["messages"][1]["content"]), len(key_indices(cut, 8)))
        assert values[0] == 0.0 and values == sorted(values)  # optimal: never falls
        assert (values[-1] == 1.0) == (cut == len(ep["expert_plan"]))
        assert ep["instruction"] in rec["messages"][0]["content"]
    assert {parse_criterion(r["messages"][1]["content"])["object"] for r in crit} == {
        e["goal"]["object_target"] for e in eps
    }


def test_rm_train_writes_both_models_and_an_untrained_one_fails_loudly(tmp_path):
    src = tmp_path / "train.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in episodes("train", 4)))
    tiny = {"lr": 1e-3, "max_steps": 2, "batch_size": 2, "grad_accum": 1, "max_len": 1024, "num_threads": 1}
    cfg = build(DnaConfig, {"train": {"episodes": 4, "direct_sft": tiny, "criterion_sft": tiny}}, "dna")
    with one_thread():
        rec = run_rm_train(
            cfg.train,
            8,
            str(src),
            str(text_model()),
            {"direct": str(tmp_path / "direct"), "criterion": str(tmp_path / "criterion")},
            str(tmp_path / "m" / "rm_train.json"),
            str(tmp_path / "plots"),
            str(tmp_path / "work"),
        )
        assert rec["direct"]["steps"] == rec["criterion"]["steps"] == 2 and rec["criterion"]["records"] == 4
        assert (tmp_path / "direct" / "config.json").is_file() and (
            tmp_path / "plots" / "rm_criterion_loss.csv"
        ).is_file()
        head = json.loads((tmp_path / "m" / "rm_train.json").read_text())
        assert set(head) == {"direct", "criterion"} and head["direct"]["records"] > 4
        ep = episodes("train", 1)[0]
        t = replay(ep, ep["expert_plan"])
        rm = CriterionTiny(tiny_chat(str(tmp_path / "criterion"), max_new_tokens=24), retries=2)
        with pytest.raises(RewardModelFailed, match=r"criterion_tiny \(tiny:.*no valid answer after 2 attempt"):
            assess(rm, t, key_indices(t.n, 8), ep["instruction"])
