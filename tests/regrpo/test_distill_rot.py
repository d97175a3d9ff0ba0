"""Distillation's RoT options (regrpo/distill.py, ``teacher.rot``): the arms on the same samples (plain
reasoning, the triple, the shuffled control, no reflection at all), the clean:RoT mix, the defaults untouched, and
the paper-scale recipe's teacher-written triples through the real ``openai`` client against a loopback server that
injects faults (gated, cached once, a rerun free, the key never written)."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter

import pytest

from embodied_rft.config import build
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.regrpo.distill import SYSTEM, triple_request
from embodied_rft.regrpo.text import gate, parse_triple
from embodied_rft.teacher.config import TeacherConfig
from embodied_rft.teacher.distill import run_distill
from embodied_rft.teacher.scripted import ScriptedTeacher
from tests.helpers.fault_server import FaultPlan, FaultServer, openai_teacher
from tests.helpers.rot_samples import rot_samples

KEY_ENV = "ERFT_TEST_ROT_KEY"


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return rot_samples(tmp_path_factory.mktemp("rot"), 24)


def _distill(tmp_path, path, tag, teacher=None, **rot):
    cfg = build(TeacherConfig, {"scripted": {"verbosity": "brief"}, **(teacher or {}), "rot": rot}, "teacher")
    out = tmp_path / tag / "sft.jsonl"
    m = run_distill(cfg, path, out, tmp_path / f"cache-{tag}", tmp_path / tag / "distill.json")
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    return {r["sample_id"]: json.loads(r["messages"][-1]["content"]) for r in recs}, m, out


def test_the_three_arms_differ_only_in_the_reasoning_of_rot_samples(tmp_path, samples):
    path, ss = samples
    by_id = {s["sample_id"]: s for s in ss}
    plain, mp, _ = _distill(tmp_path, path, "plain")
    rot, mr, _ = _distill(tmp_path, path, "rot", reflection="rot")
    shuf, ms, _ = _distill(tmp_path, path, "shuffled", reflection="shuffled")
    assert set(plain) == set(rot) == set(shuf) == set(by_id)
    rots = [sid for sid in by_id if "rot" in by_id[sid]]
    assert len(rots) > 15 and mr["rot"]["rot_samples"] == len(rots) and mr["rot"]["source"] == {"scripted": len(rots)}
    for sid, s in by_id.items():
        for arm in (rot, shuf):  # the plan is the corrected plan everywhere; clean samples are untouched
            assert arm[sid]["executable_plan"] == plain[sid]["executable_plan"]
        if "rot" not in s:
            assert rot[sid] == plain[sid] == shuf[sid]
            continue
        assert parse_triple(plain[sid]["reasoning_and_reflection"]) is None  # the plain recovery reasoning
        t = parse_triple(rot[sid]["reasoning_and_reflection"])
        assert t.error_type == s["rot"]["error_type"] and gate(t, s["rot"], s["prompt"][-1]["content"], s["step"]) == []
    # the control: the same reflections, each on another sample, lengths matched
    texts = lambda arm: Counter(arm[sid]["reasoning_and_reflection"] for sid in rots)  # noqa: E731
    assert texts(shuf) == texts(rot)
    assert sum(shuf[sid] != rot[sid] for sid in rots) == len(rots)
    assert ms["rot"]["shuffled_mean_abs_len_diff"] < 15


def test_the_bare_arm_drops_every_word_on_the_failure_and_keeps_the_plan(tmp_path, samples):
    path, ss = samples
    by_id = {s["sample_id"]: s for s in ss}
    plain, _, _ = _distill(tmp_path, path, "plain")
    bare, mb, _ = _distill(tmp_path, path, "bare", reflection="bare")
    assert set(bare) == set(plain) and mb["rot"] == {"reflection": "bare", "rot_samples": sum("rot" in s for s in ss)}
    said = Counter()
    for sid, s in by_id.items():
        if "rot" not in s:
            assert bare[sid] == plain[sid]
            continue
        assert {k: v for k, v in bare[sid].items() if k != "reasoning_and_reflection"} == {
            k: v for k, v in plain[sid].items() if k != "reasoning_and_reflection"
        }
        why, nxt = bare[sid]["reasoning_and_reflection"], plain[sid]["language_plan"].split(", ")[0]
        done, left = len(s["history"]), len(bare[sid]["executable_plan"])
        # the brief wording of a step after a successful action: steps done, steps left, the next one
        assert why in {
            f"{done} done, {left} left; next {nxt}.",
            f"After {done} steps: {nxt}. {left} to go.",
            f"{done} steps done. Now {nxt}; {left} remain.",
        }
        assert "failed" not in why and s["rot"]["failed_action"][1] not in why and parse_triple(why) is None
        said[s["rot"]["executes"]] += "failed" in plain[sid]["reasoning_and_reflection"]
    assert said[False] > 10  # the plain arm names the rejected actions the bare arm leaves unsaid


def test_the_clean_rot_mix_is_the_same_selection_in_every_arm(tmp_path, samples):
    path, ss = samples
    plain, mp, _ = _distill(tmp_path, path, "plain", clean_ratio=0.5)
    rot, mr, _ = _distill(tmp_path, path, "rot", reflection="rot", clean_ratio=0.5)
    mix = mp["rot"]["mix"]
    n_rot = sum("rot" in s for s in ss)
    assert mix["kept_rot"] == n_rot and mix["kept_clean"] == n_rot < mix["clean"]
    assert set(plain) == set(rot) and len(plain) == 2 * n_rot and mr["rot"]["mix"] == mix


def test_defaults_write_what_distillation_wrote_before(tmp_path, samples):
    path, _ = samples
    _, m, out = _distill(tmp_path, path, "default")
    cfg = build(TeacherConfig, {"scripted": {"verbosity": "brief"}}, "teacher")
    m2 = run_distill(cfg, path, tmp_path / "again.jsonl", tmp_path / "c2", tmp_path / "again.json")
    assert out.read_bytes() == (tmp_path / "again.jsonl").read_bytes() and "rot" not in m and "rot" not in m2


# ------------------------------------------------------------------------------- the OpenAI-compatible teacher


@pytest.fixture
def _env(monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.setenv(KEY_ENV, "sk-sentinel-" + uuid.uuid4().hex)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


class Teacher:
    """The fake endpoint: plans from the scripted oracle; triples quoting the feedback, a few ungrounded ones."""

    def __init__(self, ss):
        oracle = ScriptedTeacher(build(TeacherConfig, {}, "teacher").scripted)
        self.plans = {s["prompt"][-1]["content"]: oracle.ask(s, 0).text for s in ss}
        self.rot = {triple_request(s)["prompt"][-1]["content"]: s for s in ss if "rot" in s}
        self.bad = set(sorted(self.rot)[:3])

    def __call__(self, body):
        user = body["messages"][-1]["content"]
        if body["messages"][0]["content"] != SYSTEM:
            return self.plans[user]
        rot = self.rot[user]["rot"]
        why = (
            rot["o_fail"].split("\n")[1] if rot["executes"] else rot["feedback"].replace("Last action is invalid.", "")
        )
        evidence = "it did not work" if user in self.bad else f"the simulator answered: {why}"
        return json.dumps({"error_type": rot["error_type"], "evidence": evidence, "fix_plan": "do the corrected plan"})


def test_the_teacher_writes_gated_cached_triples(tmp_path, samples, _env):
    _, every = samples
    ss = [s for s in every if "rot" in s][:12] + [s for s in every if "rot" not in s][:6]
    path = tmp_path / "train.jsonl"
    write_jsonl_atomic(path, ss)
    teacher = Teacher(ss)
    openai = openai_teacher("", "rot-teacher", KEY_ENV)
    with FaultServer(teacher, FaultPlan(seed=3, rate=0.4, max_per_key=2), hang_s=2) as srv:
        openai["openai"]["base_url"] = srv.url
        got, m, out = _distill(tmp_path, path, "rot", teacher=openai, reflection="rot")
        assert sum(srv.stats.faults.values()) > 0 and m["complete"]
        n_rot = len(teacher.rot)
        assert m["rot"]["source"] == {"teacher": n_rot - 3, "fallback": 3}
        assert m["rot"]["teacher_problems"] == {"evidence": 3}
        for s in ss:
            if "rot" in s:
                t = parse_triple(got[s["sample_id"]]["reasoning_and_reflection"])
                assert gate(t, s["rot"], s["prompt"][-1]["content"], s["step"]) == []
        first = srv.stats.requests
        before = out.read_bytes()
        _, m2, out2 = _distill(tmp_path, path, "rot", teacher=openai, reflection="rot")
        assert srv.stats.requests == first and m2["cache_hits"] >= len(ss) + n_rot and out2.read_bytes() == before
    key = os.environ[KEY_ENV]
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f
