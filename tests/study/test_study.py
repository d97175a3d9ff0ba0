"""Studies as data (issue 64): a study file is checked before anything runs, generates a DVC pipeline whose arms
take what they do not make from the arm they start from, and its table pools paired counts over seeds so that tables
of disjoint seeds merge into the table of all of them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from embodied_rft.core.stats import mcnemar_exact, paired_diff_ci
from embodied_rft.study import __main__ as cli
from embodied_rft.study.dvcgen import Generator
from embodied_rft.study.layout import Pipeline, arm_paths, eval_runs
from embodied_rft.study.spec import StudyError, load
from embodied_rft.study.table import build, merge, rebuild, render

REPO = Path(__file__).resolve().parents[2]
EVAL = '{stage: evaluate, read: %s, overrides: ["evaluate.models=[%s]", "evaluate.reference_policies=[]"]}'


def _study(tmp_path: Path, body: str, name: str = "s") -> Path:
    (tmp_path / "arms").mkdir(exist_ok=True)
    (tmp_path / "arms" / "paper.yaml").write_text((REPO / "conf/study/arms/paper.yaml").read_text())
    f = tmp_path / f"{name}.yaml"
    f.write_text(textwrap.dedent(body))
    return f


def _pipe() -> Pipeline:
    return Pipeline.read(REPO / "dvc.yaml", REPO / "conf/config.yaml")


@pytest.mark.parametrize(
    "body,message",
    [
        (
            "seeds: [0]\ninclude: [arms/paper]\nrun: [nope]\n",
            r"s.yaml:3: run\[0\]: no arm 'nope'; known: no_sft, pipeline",
        ),
        ("seeds: [0, 0]\ninclude: [arms/paper]\nrun: [pipeline]\n", r"s.yaml:1: seeds: a seed is given twice"),
        ("seeds: [-1]\ninclude: [arms/paper]\nrun: [pipeline]\n", r"s.yaml:1: seeds: expected a non-empty list"),
        ("seeds: [0]\ninclude: [arms/paper]\nrun: [pipeline]\nsead: 3\n", r"s.yaml:4: sead: unknown key"),
        (
            "seeds: [0]\ninclude: [arms/paper]\nrun: [pipeline]\ncomparisons:\n  - {id: x, a: pipeline/base, b: no_sft/grpo}\n",
            r"s.yaml:5: comparisons\[0\].b: 'no_sft/grpo' is not an outcome of this study",
        ),
        (
            "seeds: [0]\ninclude: [arms/paper]\narms:\n  pipeline: {stages: [prepare]}\nrun: [pipeline]\n",
            r"s.yaml:4: arms.pipeline: already defined in .*paper.yaml",
        ),
        (
            "seeds: [0]\ninclude: [arms/paper]\narms:\n  a: {from: b}\n  b: {from: a}\nrun: [a]\n",
            r"arms start from each other: a -> b -> a",
        ),
    ],
)
def test_a_bad_study_file_is_refused_naming_file_line_and_key(tmp_path, body, message) -> None:
    with pytest.raises(StudyError, match=message):
        load(_study(tmp_path, body))


def test_an_arm_takes_what_it_does_not_make_from_the_arm_it_starts_from() -> None:
    study = load(REPO / "conf/study/seeds.yaml")
    pipe = _pipe()
    own, abl = arm_paths(study, pipe, "pipeline", 1), arm_paths(study, pipe, "no_sft", 1)
    assert own["sft_model"] == "runs/seeds/seed-1/pipeline/models/sft"
    # no_sft runs only grpo: its model and metrics are its own, its data and base model the pipeline's
    assert abl["grpo_model"] == "runs/seeds/seed-1/no_sft/models/grpo"
    assert abl["metrics_dir"] == "runs/seeds/seed-1/no_sft/metrics"
    assert (abl["episodes_dir"], abl["base_model"]) == (own["episodes_dir"], own["base_model"])
    assert list(eval_runs(study, "pipeline")) == ["evaluate-base", "evaluate-sft", "evaluate-grpo"]
    assert list(eval_runs(study, "no_sft")) == ["evaluate"]


def test_inputs_route_a_path_from_another_arm_and_shared_evals_share_one_run(tmp_path) -> None:
    f = _study(
        tmp_path,
        f"""
        seeds: [0, 2]
        include: [arms/paper]
        arms:
          again:
            from: pipeline
            stages: [sft]
            inputs: {{base_model: pipeline.sft_model}}
            overrides: [sft.lr=1e-3]
            evals:
              a: {EVAL % ("sft", "sft")}
              b: {EVAL % ("sft", "sft")}
        run: [again]
        """,
    )
    study = load(f)
    paths = arm_paths(study, _pipe(), "again", 0)
    assert paths["base_model"] == "runs/s/seed-0/pipeline/models/sft"
    assert paths["sft_model"] == "runs/s/seed-0/again/models/sft"
    assert [(k, [e.mode for e in v]) for k, v in eval_runs(study, "again").items()] == [("evaluate", ["a", "b"])]
    stages = Generator(study, _pipe(), REPO / "conf").stages()
    # a needed arm runs all its stages; only the arms the study runs are evaluated
    assert list(stages) == [f"pipeline-{s}" for s in ("prepare", "decompose", "distill", "base", "sft", "grpo")] + [
        "again-sft",
        "again-evaluate",
        "table",
    ]
    sft = stages["again-sft"]
    assert sft["foreach"] == [0, 2] and sft["do"]["wdir"] == "../.."
    assert "runs/s/seed-${item}/pipeline/models/sft" in sft["do"]["deps"]  # its start is the pipeline's SFT model
    assert sft["do"]["params"] == [{"studies/s/params/again.yaml": ["sft"]}]
    assert "'paths.base_model=runs/s/seed-${item}/pipeline/models/sft'" in sft["do"]["cmd"]
    table = stages["table"]
    assert "runs/s/seed-2/again/evaluate/metrics/eval.details.json" in table["deps"]
    assert table["metrics"] == [{"results/s/table.json": {"cache": False}}]


def test_a_bad_override_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch) -> None:
    f = _study(tmp_path, "seeds: [0]\ninclude: [arms/paper]\nrun: [no_sft]\noverrides: [sft.max_step=3]\n")
    monkeypatch.chdir(REPO)
    assert cli.main(["generate", str(f)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "arm 'pipeline'" in err[0] and "max_step" in err[0]
    assert not (REPO / "studies" / "s").exists()


def _runs(seeds: dict[int, tuple[list[bool], list[bool]]]) -> dict[int, dict]:
    out = {}
    for s, (a, b) in seeds.items():
        mk = lambda v: {  # noqa: E731
            "success": 100 * sum(v) / len(v),
            "episodes": len(v),
            "episode_success": {f"e{i}": x for i, x in enumerate(v)},
            "counts": {"recovered_next_call_rate": [sum(v), len(v)]},
            "subsets": {"base": 100 * sum(v) / len(v)},
        }
        out[s] = {"pipeline/sft": mk(a), "pipeline/grpo": mk(b)}
    return out


def test_the_table_pools_paired_counts_and_merges_over_disjoint_seeds(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no runs here: the held-out section finds none
    study = load(REPO / "conf/study/seeds.yaml")
    # seed 0: grpo alone solves 3, sft alone 1 (of 8); seed 1: grpo alone 2, sft alone 0; seed 2: sft alone 2
    runs = _runs(
        {
            0: ([1, 1, 0, 0, 0, 1, 0, 0], [1, 0, 1, 1, 1, 1, 0, 0]),
            1: ([0, 0, 0, 0, 1, 1, 0, 0], [1, 1, 0, 0, 1, 1, 0, 0]),
            2: ([1, 1, 1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]),
        }
    )
    t = build(study, runs)
    c = t["comparisons"]["sft_to_grpo"]
    assert (c["only_a"], c["only_b"], c["episodes"]) == (3, 5, 24)
    assert c["success_gap_per_seed"] == [25.0, 25.0, -25.0] and c["positive_seeds"] == 2
    assert c["p_mcnemar_pooled"] == pytest.approx(mcnemar_exact(3, 5))
    lo, hi = paired_diff_ci(3, 5, 24)
    assert c["ci95_pooled"] == [round(100 * lo, 2), round(100 * hi, 2)]
    assert c["success_gap_pooled"] == round(100 * 2 / 24, 2)
    assert c["counts"]["recovered_next_call_rate"] == [round(8 / 24, 4), round(10 / 24, 4)]
    sft = t["outcomes"]["pipeline/sft"]["success"]
    assert sft["mean"] == pytest.approx(100 * 8 / 24) and sft["min"] == 25.0 and sft["max"] == 37.5
    assert "base_to_sft" not in t["comparisons"]  # its outcome pipeline/base did not run
    assert t["checks"]["grpo_beats_sft"]["holds"] is False  # +8.3 points but p = 0.73
    assert t["checks"]["grpo_beats_sft_every_seed"]["holds"] is False
    assert t["checks"]["sft_beats_base"]["holds"] is None
    # tables of disjoint seeds merge into the table of all their runs
    parts = [build(study, {s: runs[s]}) for s in (2, 0)] + [build(study, {1: runs[1]})]
    merged = json.loads(json.dumps(merge(parts, study)))
    whole = json.loads(json.dumps(t))
    assert merged["comparisons"] == whole["comparisons"] and merged["outcomes"] == whole["outcomes"]
    assert merged["checks"] == whole["checks"]
    assert json.loads(json.dumps(rebuild(whole, study))) == whole
    with pytest.raises(ValueError, match="seed 0 is already in part 0"):
        merge([parts[1], parts[1]], study)
    text = render(t)
    assert (
        "| sft_to_grpo | pipeline/grpo vs pipeline/sft | s0 +25.0 (0.625), s1 +25.0 (0.5), s2 -25.0 (0.5) | 3 | 5 |"
        in text
    )


def test_the_committed_studies_load_and_generate() -> None:
    for f in sorted((REPO / "conf/study").glob("*.yaml")):
        study = load(f)
        stages = Generator(study, _pipe(), REPO / "conf").stages()
        assert "table" in stages and len(stages) > 1, f


@pytest.mark.parametrize(
    "table,message",
    [
        ("not json", r"merge: .*old.json: not readable as a table"),
        (
            '{"schema": 1, "study": "other", "seeds": [3]}',
            r"merge: .*old.json: not a table of study 's' \(its study: 'other'\)",
        ),
        (
            '{"schema": 1, "study": "s", "seeds": [0, 3]}',
            r"merge: .*old.json: seeds \[0\] are already in this run's seeds",
        ),
    ],
)
def test_a_merge_table_that_cannot_be_pooled_is_refused_before_any_seed_runs(tmp_path, table, message) -> None:
    (tmp_path / "old.json").write_text(table)
    f = _study(tmp_path, f"seeds: [0, 1]\ninclude: [arms/paper]\nrun: [no_sft]\nmerge: [{tmp_path / 'old.json'}]\n")
    with pytest.raises(StudyError, match=message):
        Generator(load(f), _pipe(), REPO / "conf").compose()


def test_list_names_every_study_with_its_description(capsys, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines] == sorted(f.stem for f in (REPO / "conf/study").glob("*.yaml"))
    seeds = load(REPO / "conf/study/seeds.yaml").description.splitlines()[0]
    assert f"seeds: {seeds}" in lines
