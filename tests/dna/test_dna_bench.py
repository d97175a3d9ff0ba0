"""D&A's reward benchmark on the tiny preset's own valid_unseen episodes (generated here, as `prepare` does): its
size and kinds, every trajectory executed and of the right outcome, the privileged reward models' ranking, the bias
dial, and the rm_bench / rm_eval stages' files with file:line:field errors on a bad bench."""

from __future__ import annotations

import functools
import json

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.core.jsonl import DataError
from embodied_rft.dna.bench import bench_checks, build_bench, run_rm_bench
from embodied_rft.dna.config import DnaConfig
from embodied_rft.dna.frames import replay
from embodied_rft.dna.rm_eval import evaluate_rm, read_bench, run_rm_eval, score
from embodied_rft.dna.rms import lookalike_credit, make_rm
from tests.helpers.dna_episodes import preset_config, preset_episodes


def _preset() -> tuple[DnaConfig, tuple[dict, ...]]:
    cfg = preset_config()
    return build(DnaConfig, cfg["dna"], "dna"), preset_episodes(cfg["dna"]["bench"]["split"])


@functools.lru_cache(maxsize=1)
def _bench() -> tuple[list[dict], dict]:
    dcfg, eps = _preset()
    return build_bench(list(eps), dcfg.bench)


def test_the_bench_has_every_kind_for_a_dozen_target_types_and_540_pairs():
    records, counts = _bench()
    assert counts["records"] == len(records) >= 540
    checks = bench_checks(records)
    assert checks["target_types_with_every_kind"] >= 12
    assert set(counts["kinds"]) == {
        "optimal",
        "suboptimal",
        "wrong_object",
        "wrong_receptacle",
        "incomplete",
        "regress",
    }
    assert len(set(counts["kinds"].values())) == 1  # every kind once per task and paraphrase
    assert 0 < counts["infeasible_share"] < 1 and counts["tasks_with_fewer_paraphrases"] == 0
    # ten distinct instructions per task, the episode's own first
    dcfg, eps = _preset()
    by_task = {}
    for r in records:
        if r["kind"] == "optimal":
            by_task.setdefault(r["task"], []).append(r["instruction"])
    assert all(len(set(v)) == dcfg.bench.paraphrases for v in by_task.values())
    first = {e["episode_id"]: e["instruction"] for e in eps}
    assert all(v[0] == first[t] for t, v in by_task.items())


def test_every_trajectory_executes_with_its_kinds_outcome_and_progress():
    records, _ = _bench()
    eps = {e["episode_id"]: e for e in _preset()[1]}
    checks = bench_checks(records)
    assert checks["optimal_progress_falls"] == 0
    assert checks["regress_final_below_peak"] == checks["regress_trajectories"] > 0
    for r in (r for r in records if r["paraphrase"] == 0):
        t = replay(eps[r["task"]], r["actions"])
        assert all(t.ok), r["id"]
        assert t.states[-1].is_success() == r["success"] == (r["kind"] in ("optimal", "suboptimal")), r["id"]
        assert len(r["progress"]) == t.n + 1 and (r["progress"][-1] == 1.0) == r["success"]
        opt = next(o for o in records if o["task"] == r["task"] and o["kind"] == "optimal")
        if r["kind"] == "suboptimal":
            assert len(r["actions"]) > len(opt["actions"])
        if r["kind"] in ("wrong_object", "wrong_receptacle"):
            assert r["substitute"] and r["substitute"] not in opt["actions"][0]
            assert r["progress"][-1] < 1.0


def test_privileged_reward_models_rank_and_the_bias_dial_lowers_tau():
    records, _ = _bench()
    dcfg, eps = _preset()
    by_id = {e["episode_id"]: e for e in eps}
    figs = {spec: evaluate_rm(make_rm(spec), records, dcfg.frames, dcfg.eval, by_id)[0] for spec in dcfg.eval.rms}
    assert figs["gt"]["tau"] >= 0.95 and figs["planner"]["tau"] >= 0.95
    assert figs["planner"]["spearman_per_frame"] > 0.95 and figs["planner"]["mae"] < 0.02  # 8 key frames, interpolated
    dial = [figs[f"biased:{e}"] for e in ("0", "0.25", "0.5", "1")]
    taus = [f["tau"] for f in dial]
    assert all(b < a for a, b in zip(taus, taus[1:])), taus
    wrong = [f["failure_as_success"]["wrong_object"] + f["failure_as_success"]["wrong_receptacle"] for f in dial]
    assert all(b >= a for a, b in zip(wrong, wrong[1:])) and wrong[-1] > wrong[0] == 0.0, wrong
    drop = lambda f: {k: v for k, v in f.items() if k != "per_trajectory"}  # noqa: E731
    assert drop(figs["biased:0"]) == drop(figs["planner"])


def test_score_breaks_a_tie_on_the_final_reward_by_time_to_reach_it():
    assert score([0.0, 0.5, 1.0]) > score([0.0, 0.5, 0.5, 1.0]) > score([0.0, 0.9, 0.95, 0.9])
    assert score([0.0, 1.0, 1.0]) == score([0.0, 1.0])


def test_lookalike_credit_sees_the_held_lookalike():
    _, eps = _preset()
    records, _ = _bench()
    r = next(r for r in records if r["kind"] == "wrong_object" and r["lookalike"])
    t = replay(next(e for e in eps if e["episode_id"] == r["task"]), r["actions"])
    credit = [lookalike_credit(s) for s in t.states]
    held = r["actions"].index(f"pick up the {r['substitute']}") + 1
    assert credit[held] and credit[-1]  # holding the look-alike, and where the plan leaves it


def test_stages_write_the_bench_and_its_scores_and_reject_bad_input(tmp_path):
    dcfg, eps = _preset()
    src = tmp_path / "valid_unseen.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in eps[:60]))
    bench_cfg = build(DnaConfig, {"bench": {"paraphrases": 2, "kinds": ["optimal", "suboptimal", "incomplete"]}}, "dna")
    rec = run_rm_bench(bench_cfg.bench, src, tmp_path / "bench", tmp_path / "m" / "rm_bench.json")
    head = json.loads((tmp_path / "m" / "rm_bench.json").read_text())
    assert head["records"] == rec["records"] == 2 * 3 * rec["tasks"] > 0
    out = run_rm_eval(
        dcfg.frames,
        build(DnaConfig, {"eval": {"rms": ["planner", "biased:0.5"]}}, "dna").eval,
        tmp_path / "bench",
        tmp_path / "m" / "rm_eval.json",
        tmp_path / "r" / "rm_eval.md",
        tmp_path / "r" / "scores.jsonl",
    )
    assert out["rms"]["planner"]["tau"] == 1.0 and out["bias_dial"] is None
    scores = [json.loads(line) for line in (tmp_path / "r" / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 2 * head["records"] and {s["rm"] for s in scores} == {"planner", "biased:0.5"}
    assert f"| planner | {head['records']} | 0 | 1.0 |" in (tmp_path / "r" / "rm_eval.md").read_text()
    # a bad record: file, line and field
    lines = (tmp_path / "bench" / "bench.jsonl").read_text().splitlines()
    bad = json.loads(lines[2])
    bad["level"] = 2 if bad["kind"] != "optimal" else 1
    lines[2] = json.dumps(bad)
    (tmp_path / "bench" / "bench.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"bench\.jsonl:3: field 'level' must be"):
        read_bench(tmp_path / "bench")
    with pytest.raises(ConfigError, match=r"dna.eval.rms: 'oracle' is not one of"):
        make_rm("oracle")
    with pytest.raises(ConfigError, match=r"dna.eval.rms: 'biased:2': biased: eps must be in \[0, 1\]"):
        make_rm("biased:2")
