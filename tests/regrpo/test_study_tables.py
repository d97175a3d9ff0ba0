"""The six ReGRPO studies (conf/study/regrpo*.yaml) and their published tables (results/<study>/table.json).

Each table was converted once from the table ``tools/regrpo_seeds.py`` published before the studies
(``metrics/regrpo*.json``, read from git history by tests/helpers/legacy_tables.py). Here, per study: (a) every pooled
figure of the table follows from the counts it stores (``rebuild``); (b) every published number is unchanged: success
per seed and mean, the pooled behaviour and reflection rates, each comparison's per-seed gaps and p's, its discordant
and total episodes, pooled gap and p (the old p's were rounded to 6 decimals), behaviour gaps, the held-out steps,
near-misses and η pairs, and every check's verdict; (c) the study file loads and its DVC pipeline generates, each arm
reading what it starts from. The on-policy table pooled two sessions' seeds: its study merges the seeds 0-2 table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied_rft.regrpo.study import COLLECT_CODE, STEPS_CODE, count_pts
from embodied_rft.study.clauses import index, study_texts
from embodied_rft.study.dvcgen import Generator
from embodied_rft.study.spec import load
from embodied_rft.study.table import merge, rebuild, render
from tests.helpers.legacy_tables import (
    FILES,
    LEGACY_COMMIT,
    ONPOLICY_SEEDS_0_2,
    RATES,
    convert,
    git_json,
    old_arm,
    old_comparison,
    old_eta,
)
from tests.helpers.study_stages import arg as _arg
from tests.helpers.study_stages import do as _do

ROOT = Path(__file__).resolve().parents[2]
STUDIES = list(FILES)
P_ROUNDING = 5e-7 + 1e-12  # the old tables kept p to 6 decimals


def _json(x):
    return json.loads(json.dumps(x))


def _old(path: str, commit: str = LEGACY_COMMIT) -> dict:
    old = git_json(path, commit, ROOT)
    if old is None:
        pytest.skip(f"git or commit {commit} (the last with the pre-study {path}) is not available here")
    return old


def _table(name: str) -> dict:
    return json.loads((ROOT / "results" / name / "table.json").read_text("utf-8"))


def assert_same_numbers(old: dict, new: dict, study) -> None:
    """Every number of an old table equals the new table's (module docstring, (b))."""
    assert new["seeds"] == old["seeds"]
    mapped = {}
    for key in new["outcomes"]:
        arm, mode = key.split("/")
        mapped[f"{old_arm(study, arm)}/{mode}"] = key
    assert set(mapped) == set(old["arms"]), "the same outcomes"
    for ok, nk in mapped.items():
        o, n = old["arms"][ok], new["outcomes"][nk]
        assert [r["seed"] for r in n["per_seed"]] == [r["seed"] for r in o["per_seed"]]
        for ro, rn in zip(o["per_seed"], n["per_seed"], strict=True):
            assert rn["success"] == ro["success"] and rn["episodes"] == ro["episodes"], (nk, ro["seed"])
            for col in RATES:
                assert rn["counts"][col] == ro[f"{col}_counts"], (nk, col)
            for k, v in rn["reflection"].items():
                assert v == ro[k], (nk, k)
        assert round(n["success"]["mean"], 2) == pytest.approx(o["success_mean"], abs=1e-9), nk
        for col in RATES:
            assert n["counts_pooled"][col] == o[f"{col}_pooled"], (nk, col)
        tok = o["reflection_tokens_per_call_after_success_pooled"]
        assert n["counts_pooled"].get("reflection_tokens_after_success") == tok, nk
    names = {old_comparison(study, c.a, c.b): c.id for c in study.comparisons if c.id in new["comparisons"]}
    assert set(names) == set(old["comparisons"]), "the same comparisons"
    for on, cid in names.items():
        o, n = old["comparisons"][on], new["comparisons"][cid]
        for k in ("seeds", "success_gap_per_seed", "p_mcnemar_per_seed", "only_a", "only_b", "episodes"):
            assert n[k] == o[k], (cid, k)
        assert n["success_gap_pooled"] == o["success_gap_pooled"], cid
        assert n["p_mcnemar_pooled"] == pytest.approx(o["p_mcnemar_pooled"], abs=P_ROUNDING), cid
        for col, gap in o["behaviour_gap_pts"].items():
            assert (count_pts(n, col) if gap is not None else None) == gap, (cid, col)
        assert n["counts"].get("reflection_tokens_after_success", [None, None]) == o["reflection_tokens_after_success"]
    back = {old_arm(study, a): a for a in study.run}
    sections = new["sections"]
    old_steps = {split: {back[a]: d for a, d in arms.items()} for split, arms in (old.get("steps") or {}).items()}
    assert sections.get("steps", {}) == old_steps
    assert sections.get("heldout_rot", {}) == {back[a]: d for a, d in (old.get("heldout_rot") or {}).items()}
    eta = {
        old_eta(study, d["eta0"], d["eta"], split): g
        for d in sections.get("eta", {}).values()
        for split, g in d["splits"].items()
    }
    assert set(eta) == set(old.get("eta") or {}), "the same η pairs"
    for k, g in eta.items():
        assert {f: g[f] for f in ("seeds", "tokens_per_call", "reflection_rate")} == old["eta"][k], k
    assert {k: c["holds"] for k, c in new["checks"].items() if c["holds"] is not None or k in old["checks"]} == old[
        "checks"
    ]


@pytest.mark.parametrize("name", STUDIES)
def test_every_published_number_is_unchanged_and_follows_from_the_stored_counts(name):
    study = load(name)
    table = _table(name)
    assert _json(rebuild(table, study)) == table  # (a)
    old = _old(FILES[name])
    assert_same_numbers(old, table, study)  # (b)
    assert table == convert(old, study)  # the file is the conversion of the published table
    assert (ROOT / "results" / name / "table.md").read_text("utf-8") == render(table)


def test_the_on_policy_table_pools_the_seeds_0_2_session_with_seeds_3_4():
    study = load("regrpo_onpolicy")
    assert study.seeds == (3, 4) and study.merge == ("results/regrpo_onpolicy/seeds-0-2.json",)
    early = json.loads((ROOT / study.merge[0]).read_text("utf-8"))
    assert early == convert(_old(FILES["regrpo_onpolicy"], ONPOLICY_SEEDS_0_2), study)
    assert _json(rebuild(early, study)) == early and early["seeds"] == [0, 1, 2]
    assert_same_numbers(_old(FILES["regrpo_onpolicy"], ONPOLICY_SEEDS_0_2), early, study)
    # the seeds 3-4 session's own table is the five-seed one less the early counts; pooled, the two are the table
    whole = _table("regrpo_onpolicy")
    late = json.loads(json.dumps(early))
    late["seeds"] = [3, 4]
    for k, o in late["outcomes"].items():
        o["per_seed"] = [r for r in whole["outcomes"][k]["per_seed"] if r["seed"] in (3, 4)]
        assert [r for r in whole["outcomes"][k]["per_seed"] if r["seed"] < 3] == early["outcomes"][k]["per_seed"]
    for cid, c in late["comparisons"].items():
        w = whole["comparisons"][cid]
        assert w["seeds"][:3] == c["seeds"] and w["success_gap_per_seed"][:3] == c["success_gap_per_seed"]
        c["seeds"], c["success_gap_per_seed"], c["p_mcnemar_per_seed"] = (
            w["seeds"][3:],
            w["success_gap_per_seed"][3:],
            w["p_mcnemar_per_seed"][3:],
        )
        for k in ("only_a", "only_b", "episodes"):
            c[k] = w[k] - c[k]
            assert c[k] >= 0
    for split, arms in late["sections"]["steps"].items():
        for arm, d in arms.items():
            d["per_seed"] = {s: k for s, k in whole["sections"]["steps"][split][arm]["per_seed"].items() if int(s) > 2}
    for arm, d in late["sections"]["heldout_rot"].items():
        w = whole["sections"]["heldout_rot"][arm]["pooled"]
        d["seeds"] = [3, 4]
        d["pooled"] = {
            kind: {k: w[kind][k] - v for k, v in c.items() if not k.endswith("_rate")}
            for kind, c in d["pooled"].items()
        }
    assert _json(merge([late, early], study)) == whole


def test_the_clause_index_is_the_published_one():
    old = _old(FILES["regrpo"])["clauses"]
    tables = {name: _table(name) for name in STUDIES}
    idx = index(tables, study_texts(tables, ROOT / "conf" / "study"))
    assert json.loads((ROOT / "results" / "regrpo" / "clauses.json").read_text("utf-8")) == _json(idx)
    assert list(idx) == list(old)
    for clause, d in old.items():
        assert idx[clause]["clause"] == d["clause"]
        assert idx[clause]["holds_in"] == [f.removesuffix(".json") for f in d["holds_in"]], clause
        rows = {(r["table"] + ".json", r["check"]): r for r in idx[clause]["rows"]}
        assert set(rows) == {(r["table"], r["check"]) for r in d["rows"]}, clause
        for r in d["rows"]:
            assert (rows[r["table"], r["check"]]["holds"], rows[r["table"], r["check"]]["seeds"]) == (
                r["holds"],
                r["seeds"],
            )


def test_each_study_generates_and_each_arm_reads_what_it_starts_from():
    r = "runs/regrpo/seed-${item}"
    st = Generator(load("regrpo")).stages()
    for arm in (
        "paper",
        "regrpo",
        "regrpo_eta0",
        "paper_steps",
        "regrpo_steps",
        "regrpo_steps_eta0",
        "regrpo_steps_kept",
    ):
        grpo = _do(st, f"{arm}-grpo")
        assert _arg(grpo["cmd"], "paths.sft_model") == f"{r}/rot/models/sft" and f"{r}/rot/models/sft" in grpo["deps"]
        assert _arg(grpo["cmd"], "paths.grpo_model") == f"{r}/{arm}/models/grpo"
        assert _arg(grpo["cmd"], "paths.decomposed_dir") == f"{r}/regrpo_data/data/decomposed"
        for split, samples in (("valid_unseen", "data/decomposed"), ("valid_seen", "valid_seen/decomposed")):
            steps = _do(st, f"{arm}-steps-{split}")
            assert _arg(steps["cmd"], "--model") == f"{r}/{arm}/models/grpo"
            assert f"{r}/regrpo_data/{samples}/val.jsonl" in steps["deps"]
        for mode in ("free", "regrpo"):
            ev = _do(st, f"{arm}-evaluate-{mode}")["cmd"]
            assert "'evaluate.models=[grpo]'" in ev and f"evaluate.reflection={mode}" in ev
            assert _arg(ev, "paths.metrics_dir") == f"{r}/{arm}/evaluate-{mode}/metrics"
    x2 = _do(st, "rot_x2-sft")
    assert _arg(x2["cmd"], "paths.base_model") == f"{r}/rot/models/sft"  # the first cycle's model
    assert _arg(x2["cmd"], "paths.distilled") == f"{r}/rot/data/distilled/sft.jsonl"  # on its own samples
    assert _arg(x2["cmd"], "paths.sft_model") == f"{r}/rot_x2/models/sft"
    assert {f"{r}/rot/models/sft", f"{r}/rot/data/distilled/sft.jsonl"} <= set(x2["deps"])
    assert "rot_x2-distill" not in st and "rot_x2-base" not in st
    for arm in ("regrpo_steps_kept_x2", "regrpo_steps_eta0_x2"):
        assert _arg(_do(st, f"{arm}-grpo")["cmd"], "paths.sft_model") == f"{r}/rot_x2/models/sft"
    # the held-out steps of both RoT starts and every RL arm; the near-misses of every SFT arm
    assert {n for n in st if "-steps-" in n} == {
        f"{a}-steps-{s}"
        for a in ("rot", "rot_x2", "paper", "regrpo", "regrpo_eta0", "paper_steps", "regrpo_steps")
        + ("regrpo_steps_eta0", "regrpo_steps_kept", "regrpo_steps_kept_x2", "regrpo_steps_eta0_x2")
        for s in ("valid_unseen", "valid_seen")
    }
    assert {n for n in st if n.endswith("-heldout-rot")} == {
        f"{a}-heldout-rot" for a in ("plain", "rot", "shuffled", "plain_x2", "rot_x2", "shuffled_x2")
    }
    table = st["table"]
    assert "runs/regrpo/seed-0/regrpo_steps_kept_x2/metrics/steps-valid_unseen.json" in table["deps"]
    assert "runs/regrpo/seed-2/rot/evaluate-free/metrics/eval.details.json" in table["deps"]
    assert "src/embodied_rft/regrpo/study.py" in table["deps"]

    st = Generator(load("regrpo_onpolicy")).stages()
    r = "runs/regrpo_onpolicy/seed-${item}"
    states = f"{r}/regrpo_data_onpolicy/onpolicy/states.jsonl"
    collect = _do(st, "regrpo_data_onpolicy-onpolicy-states")
    assert _arg(collect["cmd"], "--model") == f"{r}/plain/models/sft" and _arg(collect["cmd"], "--n") == "200"
    assert _arg(collect["cmd"], "--episodes") == f"{r}/regrpo_data/data/episodes/train.jsonl"
    assert states in collect["outs"]
    dec = _do(st, "regrpo_data_onpolicy-decompose")
    assert _arg(dec["cmd"], "decompose.rot.onpolicy_states") == states and states in dec["deps"]
    assert _arg(dec["cmd"], "paths.decomposed_dir") == f"{r}/regrpo_data_onpolicy/data/decomposed"
    assert "decompose.rot.onpolicy_states" not in _do(st, "regrpo_data-decompose")["cmd"]
    for arm in ("plain_onpolicy", "rot_onpolicy", "shuffled_onpolicy"):
        assert f"{r}/regrpo_data_onpolicy/data/decomposed/train.jsonl" in _do(st, f"{arm}-distill")["deps"]
    assert "results/regrpo_onpolicy/seeds-0-2.json" in st["table"]["deps"]
    assert st["table"]["cmd"].endswith("--seeds 3 4")

    st = Generator(load("regrpo_nokl")).stages()
    for arm in ("paper_steps_x2_nokl", "regrpo_steps_kept_x2_nokl", "regrpo_steps_eta0_x2_nokl"):
        grpo = _do(st, f"{arm}-grpo")["cmd"]
        assert _arg(grpo, "paths.sft_model") == "runs/regrpo_nokl/seed-${item}/rot_x2/models/sft"
        assert f"{arm}-evaluate" in st and f"{arm}-steps-valid_unseen" in st
    assert "rot-sft" in st and "rot-evaluate" not in st  # rot_x2's first cycle runs, is not evaluated

    twins = load("regrpo_twins")
    assert twins.overrides == ("decompose.rot.silent_twins=true",) and twins.seeds == (1, 2)
    gen = Generator(twins)
    st = gen.stages()
    assert {"rot-evaluate-free", "rot_x2-evaluate-regrpo", "regrpo_steps_kept_x2-evaluate-regrpo"} <= set(st)
    composed = gen.files()[Path("studies/regrpo_twins/params/regrpo_data.yaml")]
    assert "silent_twins: true" in composed
    assert {n for n in Generator(load("regrpo_bare")).stages() if n.endswith("-evaluate")} == {
        f"{a}-evaluate" for a in ("plain", "rot", "shuffled", "bare")
    }
    st = Generator(load("regrpo_trigger")).stages()
    assert {n for n in st if "-evaluate" in n} == {
        f"{a}-evaluate-{m}" for a in ("plain", "rot") for m in ("free", "regrpo")
    }


def test_the_tasks_code_deps_are_what_they_run():
    from tests.test_dvc_deps import REPO, closure, is_inert

    for module, deps in (("steps", STEPS_CODE), ("collect", COLLECT_CODE)):
        entry = REPO / f"src/embodied_rft/regrpo/{module}.py"
        need = {p.relative_to(REPO).as_posix() for p in closure(entry) if not is_inert(p)}
        assert not [f for f in need if not any(f == d or f.startswith(d + "/") for d in deps)], module  # all run
        assert not [d for d in deps if not any(f == d or f.startswith(d + "/") for f in need)], module  # no other
        assert "src/embodied_rft/regrpo/study.py" not in need  # editing the adapter reruns no measurement
