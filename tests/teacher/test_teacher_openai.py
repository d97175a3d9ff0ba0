"""The ``openai`` teacher through the real ``openai`` client against a loopback server that injects faults."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.helpers.fault_server import FaultPlan, FaultServer, openai_teacher
from tests.helpers.teacher_fixtures import make_samples, write_samples

pytest.importorskip("openai")

from embodied_rft.config import build  # noqa: E402
from embodied_rft.teacher import FatalTeacherError, ScriptedConfig, TeacherConfig, run_distill  # noqa: E402
from embodied_rft.teacher.scripted import ScriptedTeacher  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = make_samples(3)[:24]
KEY_ENV = "ERFT_TEST_TEACHER_KEY"
SEED = 100  # requests carry seed = SEED + sample index, which the server reads to tell tries apart


def _wrong_first(user_text: str) -> bool:
    """A quarter of the prompts get a wrong plan on their first try (sample index 0)."""
    return hashlib.sha256(user_text.encode()).digest()[0] % 4 == 0


class Answers:
    """The server's 'model': the scripted oracle's answer to the sample whose prompt arrived."""

    def __init__(self, samples):
        good = ScriptedTeacher(ScriptedConfig(seed=7))
        bad = ScriptedTeacher(ScriptedConfig(seed=7, noise_rate=1.0))
        self.by_user = {}
        for s in samples:
            u = s["prompt"][-1]["content"]
            self.by_user[u] = (good.ask(s, 0).text, bad.ask(s, 0).text)

    def __call__(self, body: dict) -> str:
        content = body["messages"][-1]["content"]
        if isinstance(content, list):  # vision request: [image_url, text]
            content = next(p["text"] for p in content if p["type"] == "text")
        good, bad = self.by_user[content]
        return bad if body.get("seed") == SEED and _wrong_first(content) else good


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-sentinel-" + uuid.uuid4().hex)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _cfg(url: str, **over) -> TeacherConfig:
    m = {**openai_teacher(url, "teacher-test", KEY_ENV, seed=SEED, temperature=0.7), "max_attempts": 2}
    for k, v in over.items():
        if isinstance(v, dict):
            m[k] = {**m.get(k, {}), **v}
        else:
            m[k] = v
    return build(TeacherConfig, m, "teacher")


def _run(tmp: Path, cfg: TeacherConfig, samples=SAMPLES, tag: str = "run", cache: Path | None = None):
    sp = write_samples(tmp / "decomposed" / "train.jsonl", samples)
    out = tmp / tag / "sft.jsonl"
    metrics = run_distill(cfg, sp, out, cache or tmp / "cache", tmp / tag / "distill.json")
    return out, metrics


def _cache_rows(path: Path) -> int:
    db = path / "answers.sqlite"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as c:
        try:
            return c.execute("SELECT COUNT(*) FROM answers").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def test_faults_are_ridden_out_and_every_answer_is_cached_exactly_once(tmp_path):
    answers = Answers(SAMPLES)
    plan = FaultPlan(seed=1, rate=0.6, max_per_key=3)
    with FaultServer(answers, plan, hang_s=3) as srv:
        t0 = time.monotonic()
        out, m = _run(tmp_path, _cfg(srv.url))
        elapsed = time.monotonic() - t0
        st = srv.stats
        n_req = st.requests

        # every kind of fault was exercised and counted under its kind
        f = st.faults
        assert set(f) == {"hang", "429", "429ms", "500", "503", "truncated", "nonjson", "html"}, f
        mf = m["failures"]
        assert mf["timeout"] == f["hang"]
        assert mf["http_429"] == f["429"] + f["429ms"]
        assert mf["http_5xx"] == f["500"] + f["503"]
        assert mf["bad_body"] == f["nonjson"] + f["html"]
        assert mf["connection"] == f["truncated"]  # a body cut mid-transfer surfaces as a broken connection
        assert m["requests"] == n_req and mf["gave_up"] == 0 and m["complete"]

        # each distinct request was answered in full once, and stored once
        assert set(st.ok.values()) == {1}
        assert m["cache_entries"] == len(st.ok) == m["answers_new"]
        assert m["tokens_in"] > 0 and m["tokens_out"] > 0

        # re-asking: the wrong first answers were rejected, asked again at index 1, accepted
        n_wrong = sum(_wrong_first(s["prompt"][-1]["content"]) for s in SAMPLES)
        assert 0 < n_wrong < len(SAMPLES)
        assert m["accepted_at_attempt"] == {"1": len(SAMPLES) - n_wrong, "2": n_wrong}
        assert m["accepted"] == len(SAMPLES) and m["failures"]["wrong_plan"] + m["failures"]["invalid_plan"] == n_wrong

        # Retry-After was honoured: the next try of a key came no sooner than the server asked
        by_key: dict[str, list] = {}
        for t, key, outcome in st.log:
            by_key.setdefault(key, []).append((t, outcome))
        waits = {"429": 1.0, "429ms": 0.15}
        checked = 0
        for tries in by_key.values():
            for (t, outcome), (t_next, _) in zip(tries, tries[1:]):
                if outcome in waits:
                    assert t_next - t >= waits[outcome] - 0.02, (outcome, t_next - t)
                    checked += 1
        assert checked == f["429"] + f["429ms"]
        assert elapsed < 30

        # a rerun asks nothing: all answers come from the cache, the file is byte-identical
        first = out.read_bytes()
        out2, m2 = _run(tmp_path, _cfg(srv.url), tag="rerun")
        assert srv.stats.requests == n_req
        assert m2["requests"] == 0 and m2["cache_hits"] == m["answers"] and out2.read_bytes() == first

    recs = [json.loads(line) for line in first.decode().splitlines()]
    assert [r["sample_id"] for r in recs] == [s["sample_id"] for s in SAMPLES]
    for r, s in zip(recs, SAMPLES):
        assert [x["role"] for x in r["messages"]] == ["system", "user", "assistant"]
        assert r["messages"][:2] == s["prompt"] and "images" not in r
        assert json.loads(r["messages"][2]["content"])["executable_plan"] == [
            {"action_id": a, "action_name": n} for a, n in json.loads(s["label"])["gold"]
        ]


def test_a_rate_limit_storm_pauses_all_threads(tmp_path):
    samples = SAMPLES[:8]
    plan = FaultPlan(storm_start=0, storm_len=4, storm_retry_after="1")
    with FaultServer(Answers(samples), plan) as srv:
        out, m = _run(tmp_path, _cfg(srv.url), samples)
        times = sorted(t for t, _, _ in srv.stats.log)
    assert m["accepted"] == len(samples) and m["failures"]["http_429"] == 4
    # the four concurrent first tries all got 429 "wait 1 s". Each thread's next try waits for the pause the
    # first 429 it saw set, so nothing after the storm is sent sooner than 1 s after the storm began.
    first = times[0]
    assert all(t - first >= 0.98 for t in times[4:]), [round(t - first, 2) for t in times]


def test_a_hanging_server_costs_bounded_time_and_a_rerun_resumes(tmp_path):
    samples = SAMPLES[:6]
    plan = FaultPlan(rate=1.0, kinds=("hang",), max_per_key=1000)
    with FaultServer(Answers(samples), plan, hang_s=10) as srv:
        cfg = _cfg(
            srv.url,
            openai={"timeout_s": 0.3, "concurrency": 6},
            retry={"max_retries": 50, "max_total_s": 1.0, "backoff_base_s": 0.05},
        )
        t0 = time.monotonic()
        out, m = _run(tmp_path, cfg, samples)
        assert time.monotonic() - t0 < 3.0
    assert out.read_text() == "" and m["accepted"] == 0 and not m["complete"]
    assert m["failures"]["gave_up"] == len(samples) and m["failures"]["timeout"] == m["requests"] >= len(samples)
    assert m["cache_entries"] == 0
    # the same run against a healthy endpoint picks up where it gave up
    with FaultServer(Answers(samples)) as srv:
        out, m2 = _run(tmp_path, _cfg(srv.url), samples, tag="again")
    assert m2["accepted"] == len(samples) and m2["complete"]


def test_budget_stops_cleanly_and_a_rerun_completes_identically(tmp_path):
    answers = Answers(SAMPLES)
    with FaultServer(answers) as srv:
        ref, mref = _run(tmp_path / "ref", _cfg(srv.url))
        out, m = _run(tmp_path, _cfg(srv.url, budget={"max_requests": 10}, openai={"concurrency": 1}), tag="b1")
        assert m["requests"] == 10 and m["stopped_by_budget"] and not m["complete"]
        assert m["failures"]["budget"] == len(SAMPLES) - m["accepted"] - m["rejected_samples"] > 0
        assert m["accepted"] == len(out.read_text().splitlines()) > 0
        out, m2 = _run(tmp_path, _cfg(srv.url), tag="b2")
        assert m2["cache_hits"] == 10 and m2["complete"]
        assert out.read_bytes() == ref.read_bytes()
        # token budget: stops after the first answers' tokens pass the limit
        _, m3 = _run(tmp_path / "tok", _cfg(srv.url, budget={"max_tokens": 2000}, openai={"concurrency": 1}))
        assert m3["stopped_by_budget"] and 2000 <= m3["tokens_in"] + m3["tokens_out"] < 2000 + 3000


def test_an_answer_edited_in_the_cache_never_reaches_the_sft_data(tmp_path):
    """A cached answer changed by hand, still valid JSON (another plan): found by its digest, asked again."""
    samples = SAMPLES[:6]
    with FaultServer(Answers(samples)) as srv:
        ref, m = _run(tmp_path, _cfg(srv.url, openai={"concurrency": 1}), samples)
        db = tmp_path / "cache" / "answers.sqlite"
        with sqlite3.connect(db) as c:
            key, text = c.execute("SELECT key, text FROM answers ORDER BY created LIMIT 1").fetchone()
            plan = json.loads(text)
            plan["executable_plan"] = plan["executable_plan"][::-1] + plan["executable_plan"]
            c.execute("UPDATE answers SET text = ? WHERE key = ?", (json.dumps(plan), key))
        served = srv.stats.requests
        out, m2 = _run(tmp_path, _cfg(srv.url, openai={"concurrency": 1}), samples, tag="rerun")
        assert m2["cache_rejected"] == 1 and m2["requests"] == 1 == srv.stats.requests - served
        assert m2["cache_hits"] == m["answers"] - 1
    assert out.read_bytes() == ref.read_bytes()  # the SFT data is the teacher's, not the edit
    assert json.dumps(plan) not in out.read_text()


def test_the_api_key_never_reaches_any_file(tmp_path):
    import logging

    secret = os.environ[KEY_ENV]
    log_file = tmp_path / "logs" / "distill.log"
    log_file.parent.mkdir()
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)  # openai and httpx log requests and responses at DEBUG
    try:
        plan = FaultPlan(seed=3, rate=0.7, kinds=("500", "503", "429ms"), max_per_key=2)
        with FaultServer(Answers(SAMPLES[:10]), plan) as srv:
            # the run logs the (echoed) error bodies it gives up on: max_retries=1 makes some give up
            _run(tmp_path, _cfg(srv.url, retry={"max_retries": 1}), SAMPLES[:10])
            assert f"Bearer {secret}" in srv.stats.auth  # the key did travel, in the header only
        with FaultServer(Answers(SAMPLES[:2]), FaultPlan(rate=1.0, kinds=("401",), max_per_key=99)) as srv:
            with pytest.raises(FatalTeacherError) as ei:
                _run(tmp_path, _cfg(srv.url), SAMPLES[:2], tag="fatal")
            logging.getLogger("test").error("fatal: %s", ei.value)
            assert secret not in str(ei.value) and "HTTP 401" in str(ei.value) and KEY_ENV in str(ei.value)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()
    text = log_file.read_text()
    assert "[REDACTED]" in text  # the echoed key was seen and scrubbed, not merely absent
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"answers.sqlite", "sft.jsonl", "distill.json", "distill.log"}
    for p in written:
        assert secret.encode() not in p.read_bytes(), p


def test_missing_key_variable_is_a_clear_fatal_error(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(FatalTeacherError, match=f"{KEY_ENV} is not set"):
        _run(tmp_path, _cfg("http://127.0.0.1:9/v1"), SAMPLES[:1])


def test_images_are_sent_as_data_urls_and_recorded(tmp_path):
    from PIL import Image

    samples = [dict(s) for s in SAMPLES[:3]]
    img_dir = tmp_path / "decomposed" / "images"
    img_dir.mkdir(parents=True)
    for i, s in enumerate(samples):
        Image.new("RGB", (8, 8), (i * 60, 0, 0)).save(img_dir / f"s{i}.png")
        s["image"] = f"images/s{i}.png"
    seen = {}
    base = Answers(samples)

    def answer(body):
        parts = body["messages"][-1]["content"]
        url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
        text = next(p["text"] for p in parts if p["type"] == "text")
        seen[text] = url
        return base(body)

    with FaultServer(answer) as srv:
        out, m = _run(tmp_path, _cfg(srv.url), samples)
    assert m["accepted"] == 3
    for i, s in enumerate(samples):
        url = seen[s["prompt"][-1]["content"]]
        assert url.startswith("data:image/png;base64,")
        assert base64.b64decode(url.split(",", 1)[1]) == (img_dir / f"s{i}.png").read_bytes()
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["images"] for r in recs] == [[f"../decomposed/images/s{i}.png"] for i in range(3)]
    assert all((out.parent / r["images"][0]).resolve().is_file() for r in recs)


# a stage process: the plug-in table first (the parent's config may hold an extension's section, e.g. teacher.rot
# once a test loaded ReGRPO's plug-in), then the config (pipeline.stage_context does the same)
CHILD = r"""
import json, logging, sys
from embodied_rft.config import build
from embodied_rft.core import plugins
from embodied_rft.teacher import TeacherConfig, run_distill
logging.basicConfig(level=logging.INFO)
plugins.use(json.loads(sys.argv[6]))
cfg = build(TeacherConfig, json.loads(sys.argv[1]), "teacher")
run_distill(cfg, sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "Ctrl-C"])
def test_a_killed_run_resumed_equals_an_uninterrupted_one(tmp_path, sig):
    import threading

    from embodied_rft.config import as_dict

    samples = SAMPLES[:18]
    plan = FaultPlan(seed=5, rate=0.3, kinds=("429ms", "500", "truncated", "nonjson"), max_per_key=2)
    with FaultServer(Answers(samples), plan, ok_delay_s=0.04) as srv, FaultServer(Answers(samples), plan) as ref_srv:
        cfg = _cfg(srv.url, openai={"concurrency": 2})
        sp = write_samples(tmp_path / "decomposed" / "train.jsonl", samples)
        cache, out = tmp_path / "cache", tmp_path / "run" / "sft.jsonl"
        args = [json.dumps(as_dict(cfg)), str(sp), str(out), str(cache), str(tmp_path / "run" / "distill.json")]
        args.append(json.dumps(yaml.safe_load((ROOT / "conf" / "config.yaml").read_text("utf-8"))["plugins"]))
        with open(tmp_path / "child.log", "wb") as log:
            # SIGINT back to its default in the child: a test run started in the background (`make test &`,
            # nohup, some CI runners) inherits SIGINT as ignored, and Python then never raises KeyboardInterrupt
            child = subprocess.Popen(
                [sys.executable, "-c", CHILD, *args],
                stdout=log,
                stderr=log,
                env=os.environ.copy(),
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
            # the uninterrupted reference run (its own server and cache, other concurrency: the output depends
            # on the answers only) runs while the child starts up
            ref: list[Path] = []
            ref_thread = threading.Thread(
                target=lambda: ref.append(
                    _run(tmp_path / "ref", _cfg(ref_srv.url, openai={"concurrency": 6}), samples)[0]
                )
            )
            ref_thread.start()
            deadline = time.monotonic() + 60
            while _cache_rows(cache) < 8 and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert child.poll() is None, "the child finished before it could be stopped"
            os.kill(child.pid, sig)
            child.wait(timeout=20)
            ref_thread.join(timeout=60)
        assert child.returncode != 0
        assert not out.exists()  # nothing half-written where the next stage reads
        stored = _cache_rows(cache)
        assert 8 <= stored < len(samples)
        paid = sum(srv.stats.ok.values())
        if sig == signal.SIGINT:
            # Ctrl-C lets the requests in flight land: every answer the server sent is in the cache
            assert paid == stored
            assert "in-flight request(s) to land in the cache" in (tmp_path / "child.log").read_text()
        else:
            # SIGKILL loses at most the answers in flight
            assert stored <= paid <= stored + cfg.openai.concurrency

        _, m = _run(tmp_path, cfg, samples, tag="run", cache=cache)
        assert out.read_bytes() == ref[0].read_bytes()
        assert m["cache_hits"] >= stored and m["complete"]
        # the resumed run asked only for what the cache lacked
        assert sum(srv.stats.ok.values()) - paid == m["answers_new"] == m["cache_entries"] - stored


def test_an_unexpected_error_quoting_the_key_is_scrubbed(tmp_path, monkeypatch):
    secret = os.environ[KEY_ENV]
    from embodied_rft.teacher.openai_backend import OpenAITeacher

    def boom(self, sample, index, request):
        raise RuntimeError(f"cannot send header 'Authorization: Bearer {secret}'")

    monkeypatch.setattr(OpenAITeacher, "ask", boom)
    with FaultServer(Answers(SAMPLES[:2])) as srv:
        with pytest.raises(FatalTeacherError) as ei:
            _run(tmp_path, _cfg(srv.url), SAMPLES[:2])
    assert "RuntimeError: cannot send header" in str(ei.value) and secret not in str(ei.value)
    assert ei.value.__cause__ is None and ei.value.__suppress_context__
