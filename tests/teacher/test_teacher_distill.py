"""run_distill with the scripted teacher: the SFT records, determinism, re-asking, budget; the config files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from embodied_rft.config import ConfigError, build
from embodied_rft.data.jsonl import DataError
from embodied_rft.teacher import TeacherConfig, run_distill
from tests.helpers.teacher_fixtures import make_samples, write_samples

REPO = Path(__file__).resolve().parents[2]
SAMPLES = make_samples(16)


def _cfg(**m) -> TeacherConfig:
    return build(TeacherConfig, m, "teacher")


def _run(tmp: Path, cfg: TeacherConfig, samples=SAMPLES, tag="run"):
    sp = write_samples(tmp / "decomposed" / "train.jsonl", samples)
    out = tmp / tag / "sft.jsonl"
    return out, run_distill(cfg, sp, out, tmp / "cache", tmp / tag / "distill.json")


def test_records_are_chat_messages_in_sample_order(tmp_path):
    out, m = _run(tmp_path, _cfg())
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(recs) == len(SAMPLES) == m["samples"] == m["accepted"]
    assert m["acceptance_rate"] == 1.0 and m["yield"] == 1.0 and m["complete"]
    assert m["requests"] == len(SAMPLES) and m["cache_hits"] == 0 and "cache_entries" not in m
    for r, s in zip(recs, SAMPLES):
        assert list(r) == ["messages", "sample_id"] and r["sample_id"] == s["sample_id"]
        system, user, assistant = r["messages"]
        assert (system, user) == tuple(s["prompt"]) and assistant["role"] == "assistant"
        resp = json.loads(assistant["content"])
        assert list(resp) == [
            "visual_state_description",
            "reasoning_and_reflection",
            "language_plan",
            "executable_plan",
        ]
        assert [[p["action_id"], p["action_name"]] for p in resp["executable_plan"]] == json.loads(s["label"])["gold"]
    assert json.loads((tmp_path / "run" / "distill.json").read_text())["accepted"] == len(SAMPLES)
    # the scripted oracle is free and deterministic: no cache file is made
    assert not (tmp_path / "cache").exists()


def test_same_config_same_bytes_other_seed_other_words(tmp_path):
    a, _ = _run(tmp_path, _cfg(), tag="a")
    b, _ = _run(tmp_path, _cfg(), tag="b")
    c, _ = _run(tmp_path, _cfg(scripted={"seed": 1}), tag="c")
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()


def test_noisy_teacher_is_asked_again_and_rejections_are_counted(tmp_path):
    out, m = _run(tmp_path, _cfg(scripted={"noise_rate": 0.4, "seed": 2}, max_attempts=3))
    n = len(SAMPLES)
    att = m["accepted_at_attempt"]
    assert att["1"] < n and att.get("2", 0) > 0 and sum(att.values()) == m["accepted"]
    rejected_answers = m["failures"]["wrong_plan"] + m["failures"]["invalid_plan"]
    assert m["answers"] == m["accepted"] + rejected_answers
    assert abs(m["acceptance_rate"] - 0.6) < 0.1
    # with three tries at 40% noise, ~6% of samples stay rejected
    assert m["rejected_samples"] == n - m["accepted"] and m["rejected_samples"] < 0.15 * n
    assert len(out.read_text().splitlines()) == m["accepted"]
    one, m1 = _run(tmp_path, _cfg(scripted={"noise_rate": 0.4, "seed": 2}, max_attempts=1), tag="one")
    assert m1["accepted"] == att["1"]


def test_min_prefix_and_validate_none_accept_more(tmp_path):
    noisy = {"noise_rate": 1.0, "seed": 4}
    _, strict = _run(tmp_path, _cfg(scripted=noisy, max_attempts=1), tag="strict")
    _, none = _run(tmp_path, _cfg(scripted=noisy, max_attempts=1, validate="none"), tag="none")
    assert strict["accepted"] == 0
    assert none["accepted"] == len(SAMPLES) - none["failures"]["invalid_plan"] > 0
    # every kept plan was corrupted: none of them is the gold plan, and the metrics say so
    assert none["kept_gold_plans"] == 0 and none["kept_gold_rate"] == 0.0


def test_kept_gold_rate_measures_the_teachers_habit_when_plans_are_not_checked(tmp_path):
    from embodied_rft.teacher.scripted import parse_label

    samples = make_samples(40)
    opening = sum(any(n.startswith("open the") for _, n in parse_label(s)[0]) for s in samples)
    _, gold = _run(tmp_path, _cfg(), samples=samples, tag="gold")
    out, m = _run(tmp_path, _cfg(scripted={"forget_open_rate": 1.0}, validate="none"), samples=samples, tag="habit")
    assert gold["kept_gold_plans"] == gold["accepted"] == len(samples) and gold["kept_gold_rate"] == 1.0
    # at rate 1 exactly the samples whose plan opens a container are kept with a wrong plan
    assert opening > 0 and m["accepted"] == len(samples)
    assert m["kept_gold_plans"] == len(samples) - opening
    for line in out.read_text().splitlines():
        plan = json.loads(json.loads(line)["messages"][2]["content"])["executable_plan"]
        assert not any(st["action_name"].startswith("open the") for st in plan)


def test_budget_stops_with_what_it_has(tmp_path):
    out, m = _run(tmp_path, _cfg(budget={"max_requests": 25}))
    assert m["requests"] == 25 == m["accepted"] and m["stopped_by_budget"] and not m["complete"]
    assert m["failures"]["budget"] == len(SAMPLES) - 25
    recs = [json.loads(x)["sample_id"] for x in out.read_text().splitlines()]
    assert recs == [s["sample_id"] for s in SAMPLES[:25]]


def test_max_samples_and_bad_input(tmp_path):
    _, m = _run(tmp_path, _cfg(max_samples=5))
    assert m["samples"] == 5
    bad = [dict(SAMPLES[0])]
    del bad[0]["label"]
    with pytest.raises(DataError, match=r"train.jsonl:1: missing field 'label'"):
        _run(tmp_path, _cfg(), bad)
    with pytest.raises(DataError, match="needs episodes_by_id"):
        _run(tmp_path, _cfg(validate="simulate"))


@pytest.mark.parametrize("name", ["scripted", "openai"])
def test_conf_files_build_and_comment_every_key(name):
    path = REPO / "conf" / "teacher" / f"{name}.yaml"
    cfg = build(TeacherConfig, yaml.safe_load(path.read_text()), "teacher")
    assert cfg.backend == name
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*\w+:", line):
            prev = next(x for x in reversed(lines[:i]) if x.strip())
            assert prev.strip().startswith("#"), f"{path.name}:{i + 1}: key without a comment: {line.strip()}"
    if name == "openai":
        assert (cfg.openai.model, cfg.openai.api_key_env) == ("gemini-2.0-flash", "GEMINI_API_KEY")
        assert cfg.openai.base_url == "https://generativelanguage.googleapis.com/v1beta/openai/"


@pytest.mark.parametrize(
    "mapping,msg",
    [
        ({"backend": "gemini"}, "teacher.backend: 'gemini' is not one of"),
        ({"scripted": {"noise": 0.1}}, "teacher.scripted.noise: unknown key; did you mean 'noise_rate'"),
        ({"scripted": {"noise_rate": 1.5}}, "teacher.scripted.noise_rate: must be in"),
        ({"openai": {"api_key_env": "sk-abc123-def"}}, "must be an environment variable NAME"),
        ({"max_attempts": 0}, "teacher.max_attempts: must be >= 1"),
        ({"min_prefix": 0}, "teacher.min_prefix: must be >= 1 or null"),
        ({"retry": {"backoff_base_s": 5, "backoff_max_s": 1}}, "teacher.retry.backoff_max_s"),
    ],
)
def test_config_errors_name_the_key(mapping, msg):
    with pytest.raises(ConfigError, match=re.escape(msg)):
        _cfg(**mapping)


def test_a_key_pasted_into_api_key_env_is_not_echoed():
    with pytest.raises(ConfigError) as ei:
        _cfg(openai={"api_key_env": "sk-abc123-def"})
    assert "sk-abc123-def" not in str(ei.value)
