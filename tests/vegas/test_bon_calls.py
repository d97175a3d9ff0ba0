"""Where Best-of-N acts (vegas/calls.py): the per-call table, the within-call metrics, the policy's prior in the
score and the weight search, on hand-made calls whose figures are worked out by hand."""

from __future__ import annotations

import json
import math

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.tools.bon_calls import main as bon_calls
from embodied_rft.vegas.bon_config import BonConfig
from embodied_rft.vegas.calls import (
    CallTableError,
    best_weight,
    calls_of,
    combined_score,
    pair_counts,
    read_table,
    table_rows,
    within_call,
    write_table,
)
from embodied_rft.vegas.select import Candidate, choose, with_prior


def _call(ep, call, greedy, cands, n=8):
    """A greedy-run live record: cands = [(action, count, label)]; the firsts list has n samples."""
    firsts = [a for a, k, _ in cands for _ in range(k)]
    firsts += [None] * (n - len(firsts))
    return {
        "call": call,
        "greedy": {"a": greedy[0], "label": greedy[1]},
        "firsts": firsts,
        "cands": [{"a": a, "n": k, "label": lab} for a, k, lab in cands],
    }


def _results():
    # e0 call 0: the verifier ranks the correct action first; call 1: the frequent action (6 of 8) is correct but
    # the verifier prefers a rare wrong one by a little; e1 call 1: no correct candidate; e1 call 2: all correct
    return [
        {
            "episode_id": "e0",
            "live": [
                _call("e0", 0, (1, "correct"), [(1, 5, "correct"), (2, 3, "wrong")]),
                _call("e0", 1, (3, "wrong"), [(4, 6, "correct"), (3, 1, "wrong"), (5, 1, "neutral")]),
            ],
        },
        {
            "episode_id": "e1",
            "live": [
                _call("e1", 1, (7, "wrong"), [(7, 8, "wrong")]),
                _call("e1", 2, (8, "correct"), [(8, 4, "correct"), (9, 4, "correct")]),
            ],
        },
    ]


SCORES = {
    "v": {
        "e0:0:1": 0.9, "e0:0:2": 0.2,
        "e0:1:4": 0.40, "e0:1:3": 0.45, "e0:1:5": 0.10,
        "e1:1:7": 0.3,
        "e1:2:8": 0.5, "e1:2:9": 0.6,
    },
    "z": {"e0:0:1": 0.5},  # a capped verifier that scored one item only
}  # fmt: skip


def test_table_rows_write_and_read_round_trip(tmp_path):
    rows = table_rows(_results(), SCORES)
    assert len(rows) == 8
    r = rows[2]
    assert (r["episode_id"], r["call"], r["action"], r["count"], r["samples"], r["label"], r["greedy"]) == (
        "e0", 1, 4, 6, 8, "correct", False
    )  # fmt: skip
    assert r["greedy_label"] == "wrong" and r["p_v"] == 0.40 and r["p_z"] is None
    write_table(tmp_path / "t.csv", rows, ["v", "z"])
    back = read_table(tmp_path / "t.csv")
    assert back == rows
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == (
        "episode_id,call,action,count,samples,label,greedy,greedy_label,p_v,p_z"
    )


def test_read_table_names_file_line_and_field(tmp_path):
    write_table(tmp_path / "t.csv", table_rows(_results(), SCORES), ["v"])
    lines = (tmp_path / "t.csv").read_text().splitlines()
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([lines[0], lines[1], lines[2], lines[3].replace(",correct,", ",maybe,", 1)]) + "\n")
    with pytest.raises(CallTableError, match=r"bad.csv:4: label: 'maybe'"):
        read_table(bad)
    bad.write_text("\n".join([lines[0], lines[1].replace("e0,0,1,5", "e0,zero,1,5")]) + "\n")
    with pytest.raises(CallTableError, match=r"bad.csv:2: call: cannot read 'zero'"):
        read_table(bad)
    bad.write_text("episode_id,call\ne0,0\n")
    with pytest.raises(CallTableError, match=r"bad.csv:1: missing column"):
        read_table(bad)


def test_within_call_auroc_top1_and_value_by_hand():
    rows = table_rows(_results(), SCORES)
    w = within_call(rows, ["v"], {"v": 1.0}, reps=200)
    # mixed calls: e0:0 (1 pair, right) and e0:1 (2 pairs: 0.40 < 0.45 wrong, 0.40 > 0.10 right) -> 2 of 3
    assert pair_counts(calls_of(rows)[1], "p_v") == (1.0, 2)
    a = w["all"]["auroc"]["v"]
    assert a["value"] == pytest.approx(2 / 3) and a["n"] == 2
    assert a["ci95"][0] <= a["value"] <= a["ci95"][1]
    assert w["first"]["auroc"]["v"]["value"] == 1.0 and w["replan"]["auroc"]["v"]["value"] == 0.5
    assert (w["all"]["calls"], w["all"]["mixed_calls"], w["all"]["calls_with_correct"]) == (4, 2, 3)
    t = w["replan"]["top1"]  # calls with a correct one: e0:1, e1:2
    assert t["greedy"]["value"] == 0.5  # wrong, then correct
    assert t["sample"]["value"] == pytest.approx((6 / 8 + 8 / 8) / 2)
    assert t["sc"]["value"] == 1.0  # action 4 (6 of 8), then a tie of counts -> the earlier row, correct
    assert t["v"]["value"] == 0.5  # action 3 (0.45) is wrong
    # with the prior: e0:1 scores logit(.40) + log(6/8) = -0.69 against logit(.45) + log(1/8) = -2.28 -> action 4
    assert combined_score(0.40, 6, 8, 1.0) > combined_score(0.45, 1, 8, 1.0)
    assert t["v+prior"]["value"] == 1.0
    v = w["replan"]["value_over_sample"]
    assert v["v"]["value"] == pytest.approx(0.5 - (6 / 8 + 1) / 2)
    assert v["v+prior"]["value"] == pytest.approx(1 - (6 / 8 + 1) / 2)
    assert "sample" not in v
    # the capped verifier: its within-call figures use only the calls it scored whole (none here is mixed)
    wz = within_call(rows, ["z"], reps=0)
    assert wz["all"]["auroc"]["z"]["n"] == 0 and wz["all"]["top1"]["z"]["n"] == 0


def test_combined_score_and_best_weight():
    # weight 0 ranks as P(yes); the clip keeps a certain verifier finite, so the prior still breaks its ties
    assert combined_score(0.3, 1, 8, 0.0) == pytest.approx(math.log(0.3 / 0.7))
    assert math.isfinite(combined_score(1.0, 1, 8, 1.0))
    assert combined_score(1.0, 4, 8, 1.0) > combined_score(1.0, 1, 8, 1.0)
    with pytest.raises(ValueError, match="count <= samples"):
        combined_score(0.5, 9, 8, 1.0)
    grid = best_weight(table_rows(_results(), SCORES), "v", [0.0, 1.0])
    assert grid[0] == {"weight": 1.0, "top1": 1.0, "calls": 2} and grid[1]["top1"] == 0.5
    with pytest.raises(ValueError, match="every candidate scored by z"):
        best_weight(table_rows(_results(), SCORES), "z", [0.0])


def test_play_uses_the_same_combined_score():
    # the stage's choice with bon.prior_weight: the same numbers as the table's weight search
    def cand(i, first):
        return Candidate(i, "", "ok", (first,), -1.0, "", 1)

    cands = [cand(0, 3)] + [cand(i, 4) for i in range(1, 7)] + [cand(7, 5)]
    scores = {4: 0.40, 3: 0.45, 5: 0.10}
    assert cands[choose("bon_ft", cands, scores)].first == 3
    assert cands[choose("bon_ft", cands, with_prior(scores, cands, 1.0))].first == 4
    assert with_prior(scores, cands, 1.0)[4] == combined_score(0.40, 6, 8, 1.0)
    assert build(BonConfig, {"prior_weight": 1.5}, "bon").prior_weight == 1.5
    with pytest.raises(ConfigError, match="prior_weight"):
        build(BonConfig, {"prior_weight": -1}, "bon")


def test_bon_calls_tool(tmp_path, capsys):
    write_table(tmp_path / "a.csv", table_rows(_results(), SCORES), ["v"])
    assert (
        bon_calls(
            [str(tmp_path / "a.csv"), str(tmp_path / "a.csv"), "--verifier", "v", "--weights", "0", "1", "--reps", "50"]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    # two copies of a table are two sets of calls, kept apart
    assert out["best_weight"] == 1.0 and out["weights"][0]["calls"] == 4
    assert out["within_call"]["replan"]["top1"]["v+prior"]["value"] == 1.0
    assert bon_calls([str(tmp_path / "a.csv"), "--verifier", "bon_ft"]) == 2
    assert "no column p_bon_ft; the tables score ['v']" in capsys.readouterr().err


def test_capped_live_items_are_whole_calls():
    from embodied_rft.vegas.bon import live_items

    ep = {"episode_id": "e", "instruction": "Put a mug in the sink."}
    calls = []
    for k in range(20):
        c = _call("e", k, (1, "wrong"), [(a, 1, "correct" if a == k % 3 else "wrong") for a in range(1 + k % 3)])
        for x in c["cands"]:
            x.update(name=f"find a A{x['a']}", reasoning="")
        calls.append((ep, {**c, "history": [], "observation": "You see a Mug."}))
    total = sum(len(c["cands"]) for _, c in calls)
    assert len(live_items(calls, 0, 0)) == total == 39
    items = live_items(calls, 10, 0)
    assert 10 <= len(items) < 13 and items == live_items(calls, 10, 0)  # seeded: the same draw
    by_call = {}
    for it in items:
        by_call.setdefault(it["episode_id"].rsplit(":", 1)[0], []).append(it)
    for key, its in by_call.items():
        assert len(its) == 1 + int(key.split(":")[1]) % 3  # every candidate of a drawn call
    assert items != live_items(calls, 10, 1)


def test_study_section_pools_the_seeds_tables_and_the_check_reads_it(tmp_path):
    from dataclasses import replace
    from pathlib import Path

    from embodied_rft.study.spec import load
    from embodied_rft.study.table import RunContext
    from embodied_rft.vegas.study import bon_within_call, within_call_auroc

    study = replace(load(Path(__file__).resolve().parents[2] / "conf/study/vegas.yaml"), seeds=(0, 1))
    ctx = RunContext(study, [0, 1], tmp_path)
    rows = table_rows(_results(), SCORES)
    for seed in (0, 1):
        f = ctx.outcome_file("vegas", "greedy", seed)
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"within_call": within_call(rows, ["v"], reps=0), "config": {"prior_weight": 1.0}}))
        write_table(f.parent.parent / "reports" / "bon_calls.csv", rows, ["v", "z"])
    sec = bon_within_call(ctx, "vegas", reps=100)
    assert sec["pooled_seeds"] == [0, 1] and set(sec["per_seed"]) == {"0", "1"}
    pooled = sec["pooled"]
    # the same calls twice, kept apart: twice the calls, the same rates; the seeds' prior weight is applied
    assert pooled["all"]["calls"] == 8 and pooled["all"]["auroc"]["v"]["value"] == pytest.approx(2 / 3)
    assert pooled["replan"]["top1"]["v+prior"]["value"] == 1.0 and pooled["replan"]["top1"]["v"]["n"] == 4
    table = {"sections": {"bon_within_call": sec}}
    holds, figs = within_call_auroc(table, "v", at_least=0.75)
    assert holds is False and figs["auroc"] == 0.5 and figs["mixed_calls"] == 2  # replanning calls: 1 of 2 pairs
    assert within_call_auroc(table, "v", part="first", at_least=0.75, lower_at_least=0.7)[0] is True
    assert within_call_auroc(table, "v", at_most=0.6)[0] is True
    assert within_call_auroc(table, "bon_ft", at_least=0.75) == (None, {})
    # a seed without its per-call table: per-seed records only, no pooled figures
    (ctx.outcome_file("vegas", "greedy", 1).parent.parent / "reports" / "bon_calls.csv").unlink()
    assert bon_within_call(ctx, "vegas")["pooled"] is None
