"""Verification chains of thought from an OpenAI-compatible teacher (vegas/cot.py, ``synth.cot: teacher``) through
the real ``openai`` client against a loopback server that injects faults: every record gets the teacher's text
with the oracle's verdict, each request is answered and cached once, a rerun is free, the key is never written."""

from __future__ import annotations

import json
import uuid

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.teacher.config import TeacherConfig
from embodied_rft.vegas.config import SynthConfig
from embodied_rft.vegas.cot import cot_request, teacher_rewriter
from embodied_rft.vegas.synth import run_synth
from embodied_rft.vegas.text import parse_verdict
from embodied_rft.world import GeneratorConfig, generate_episodes
from tests.helpers.fault_server import FaultPlan, FaultServer, openai_teacher

pytest.importorskip("openai")

KEY_ENV = "ERFT_TEST_VEGAS_KEY"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-sentinel-" + uuid.uuid4().hex)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _teacher(url: str) -> TeacherConfig:
    return build(TeacherConfig, openai_teacher(url, "cot-teacher", KEY_ENV), "teacher")


def _answer(body: dict) -> str:
    """The fake teacher: a reasoning that quotes the action, and (to be overruled) a verdict of its own."""
    user = body["messages"][-1]["content"]
    action = user.split("Candidate action: ", 1)[1].split("\n", 1)[0]
    return f"The teacher checked {action} against the facts.\naction_is_correct: yes"


def test_teacher_writes_the_reasoning_the_oracle_keeps_the_verdict(tmp_path):
    cfg = GeneratorConfig(seed=4, task_types=("pick_and_place_simple", "pick_clean_then_place_in_recep"))
    write_jsonl_atomic(tmp_path / "train.jsonl", generate_episodes(cfg, "train", 6))
    scfg = SynthConfig(cot="teacher", val_fraction=0.0)
    with FaultServer(_answer, FaultPlan(seed=2, rate=0.5, max_per_key=2), hang_s=2) as srv:
        rewrite = teacher_rewriter(_teacher(srv.url), tmp_path / "cache", scfg.cot_max_chars)
        m = run_synth(
            scfg, tmp_path / "train.jsonl", tmp_path / "verify", tmp_path / "synth.json", rewrite_cots=rewrite
        )
        first = srv.stats.requests
        assert sum(srv.stats.faults.values()) > 0  # faults were injected and ridden out
        recs = [json.loads(x) for x in (tmp_path / "verify" / "train.jsonl").read_text().splitlines()]
        assert recs and m["cot"]["source"] == "teacher" and m["cot"]["fallback"] == 0
        assert m["cot"]["cache_entries"] == m["cot"]["answers_new"] == len(recs) == len(srv.stats.ok)
        for r in recs:
            cot = r["messages"][-1]["content"]
            assert cot.startswith(f"The teacher checked {r['candidate']['action_id']} {r['candidate']['action_name']}")
            assert parse_verdict(cot) == r["verdict"] and cot.count("action_is_correct") == 1
            assert r["cot_source"] == "teacher"
        # a rerun answers everything from the cache: no request reaches the server, the same bytes are written
        before = (tmp_path / "verify" / "train.jsonl").read_bytes()
        rewrite = teacher_rewriter(_teacher(srv.url), tmp_path / "cache", scfg.cot_max_chars)
        m2 = run_synth(
            scfg, tmp_path / "train.jsonl", tmp_path / "verify", tmp_path / "synth.json", rewrite_cots=rewrite
        )
        assert srv.stats.requests == first and m2["cot"]["cache_hits"] == len(recs)
        assert (tmp_path / "verify" / "train.jsonl").read_bytes() == before
    import os

    key = os.environ[KEY_ENV]
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f


def test_a_dead_endpoint_keeps_the_templates_and_says_so(tmp_path):
    cfg = GeneratorConfig(seed=4, task_types=("pick_and_place_simple", "pick_clean_then_place_in_recep"))
    write_jsonl_atomic(tmp_path / "train.jsonl", generate_episodes(cfg, "train", 2))
    tcfg = _teacher("http://127.0.0.1:9")  # nothing listens on the discard port
    tcfg = build(
        TeacherConfig,
        {**_dump(tcfg), "retry": {"max_retries": 0, "max_total_s": 1, "max_consecutive_give_ups": 2}},
        "teacher",
    )
    rewrite = teacher_rewriter(tcfg, tmp_path / "cache", 600)
    m = run_synth(
        SynthConfig(cot="teacher", val_fraction=0.0),
        tmp_path / "train.jsonl",
        tmp_path / "v",
        tmp_path / "s.json",
        rewrite_cots=rewrite,
    )
    recs = [json.loads(x) for x in (tmp_path / "v" / "train.jsonl").read_text().splitlines()]
    assert m["cot"]["fallback"] == len(recs) > 0 and m["cot"]["endpoint_down"]
    assert all(
        r["cot_source"] == "template" and parse_verdict(r["messages"][-1]["content"]) == r["verdict"] for r in recs
    )


def test_teacher_cots_need_an_openai_teacher():
    with pytest.raises(ConfigError, match="synth.cot: teacher needs teacher.backend=openai"):
        teacher_rewriter(TeacherConfig(), "cache", 600)


def _dump(cfg: TeacherConfig) -> dict:
    from embodied_rft.config import as_dict

    return as_dict(cfg)


def test_the_teacher_is_told_the_actions_object_and_its_role():
    facts = {
        "action": "find a Vase",
        "task_type": "look_at_obj_in_light",
        "object_target": "Bowl",
        "parent_target": None,
        "toggle_target": "DeskLamp",
        "held": None,
        "place": None,
        "executes": False,
        "feedback": "Last action is invalid. Cannot find Vase.",
        "label": "wrong",
        "reason": "invalid",
        "arg": "Vase",
        "arg_role": "other",
    }
    rec = {"record_id": "e:0:x", "task_type": "look_at_obj_in_light", "facts": facts, "verdict": "no"}
    rec["messages"] = [{"role": "user", "content": "Task: hold a dish under the lamp"}]
    user = cot_request(rec)["prompt"][1]["content"]
    assert "- the action's object Vase: not part of the task\n" in user and "under DeskLamp" in user
    # facts written before the role existed ask without that line
    old = {**rec, "facts": {k: v for k, v in facts.items() if k not in ("arg", "arg_role")}}
    assert "the action's object" not in cot_request(old)["prompt"][1]["content"]
