"""Teacher API faults the per-fault tests in tests/teacher leave out: rate limiting that never ends, a server
that asks the client to wait an hour, a long storm that does end. The distillation ends within a bounded time
(a dead endpoint stops the run after ``teacher.retry.max_consecutive_give_ups`` give-ups in a row instead of
spending the per-request deadline on every remaining sample), says in its metrics what happened (failures by
kind, ``endpoint_down``, which samples were left out and why), writes what it has, and logs a bounded number
of warnings however many samples give up.

Already covered in tests/teacher/test_teacher_openai.py, not repeated: a 4-request storm that pauses every
thread for its Retry-After, a hanging server (bounded time, counted timeouts, resumed rerun), every transient
fault kind ridden out and counted, budgets, a SIGKILL/Ctrl-C mid-run.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

pytest.importorskip("openai")

from embodied_rft.config import build  # noqa: E402
from embodied_rft.teacher import ScriptedConfig, TeacherConfig, run_distill  # noqa: E402
from embodied_rft.teacher.scripted import ScriptedTeacher  # noqa: E402
from tests.helpers.fault_server import FaultPlan, FaultServer  # noqa: E402
from tests.helpers.teacher_fixtures import make_samples, write_samples  # noqa: E402

KEY_ENV = "ERFT_STORM_TEST_KEY"
SAMPLES = make_samples(8)[:30]


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-storm-test")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _answers(samples):
    good = ScriptedTeacher(ScriptedConfig(seed=7))
    by_user = {s["prompt"][-1]["content"]: good.ask(s, 0).text for s in samples}
    return lambda body: by_user[body["messages"][-1]["content"]]


def _distill(tmp: Path, url: str, samples, **retry):
    cfg = build(
        TeacherConfig,
        {
            "backend": "openai",
            "openai": {
                "base_url": url,
                "model": "teacher-test",
                "api_key_env": KEY_ENV,
                "timeout_s": 2,
                "concurrency": 4,
                "requests_per_minute": 0,
            },
            "retry": {
                "max_retries": 50,
                "backoff_base_s": 0.05,
                "backoff_max_s": 0.2,
                "max_retry_after_s": 5,
                "max_total_s": 1.5,
                **retry,
            },
        },
        "teacher",
    )
    sp = write_samples(tmp / "decomposed" / "train.jsonl", samples)
    out = tmp / "distilled" / "sft.jsonl"
    t0 = time.monotonic()
    m = run_distill(cfg, sp, out, tmp / "cache", tmp / "distill.json")
    return out, m, time.monotonic() - t0


def _gave_up_warnings(caplog) -> int:
    return sum(1 for r in caplog.records if r.levelno == logging.WARNING and "request gave up" in r.getMessage())


def test_an_endless_rate_limit_storm_stops_the_run_early_and_is_reported(tmp_path, caplog):
    """Every request, forever, gets 429 "retry after 1 s". Each request gives up at its deadline (1.5 s), so
    without a stop the run would take ~n/concurrency seconds: days for 40k samples at the default deadline.
    After max_consecutive_give_ups give-ups in a row it stops asking and says why."""
    plan = FaultPlan(storm_start=0, storm_len=10**9, storm_retry_after="1")
    with FaultServer(_answers(SAMPLES), plan) as srv, caplog.at_level(logging.WARNING):
        out, m, elapsed = _distill(tmp_path, srv.url, SAMPLES, max_consecutive_give_ups=8)
        requests = srv.stats.requests
    # bounded by the give-up limit, not by the number of samples (30 samples / 4 threads ~ 8 s otherwise)
    assert elapsed < 4.5, elapsed
    assert m["endpoint_down"] == "8 requests in a row gave up (last: http_429)"
    assert "the teacher endpoint looks down" in caplog.text
    # reported: every request was a 429; which samples gave up and which were never asked, and why
    assert m["failures"]["http_429"] == m["requests"] == requests < 3 * len(SAMPLES)
    left = m["left_out_samples"]
    assert set(left) == {"gave_up", "stopped"} and len(left["gave_up"]) == m["failures"]["gave_up"] >= 8
    assert sorted(left["gave_up"] + left["stopped"]) == sorted(s["sample_id"] for s in SAMPLES)
    assert m["accepted"] == 0 and not m["complete"]
    assert json.loads((tmp_path / "distill.json").read_text())["endpoint_down"] == m["endpoint_down"]
    assert out.read_text() == ""  # written (empty), never half-written
    # a dead endpoint is said a bounded number of times, not once per sample
    assert 0 < _gave_up_warnings(caplog) <= 20


def test_without_the_stop_a_storm_costs_the_deadline_per_sample_but_every_give_up_is_listed(tmp_path, caplog):
    samples = SAMPLES[:8]
    plan = FaultPlan(storm_start=0, storm_len=10**9, storm_retry_after="1")
    with FaultServer(_answers(samples), plan) as srv, caplog.at_level(logging.WARNING):
        out, m, elapsed = _distill(tmp_path, srv.url, samples, max_consecutive_give_ups=0, max_total_s=1.2)
    # 8 samples, 4 at a time, each giving up after its one-second wait: two rounds
    assert 1.6 < elapsed < 6, elapsed
    assert m["endpoint_down"] is None and m["failures"]["gave_up"] == len(samples)
    assert m["left_out_samples"] == {"gave_up": [s["sample_id"] for s in samples]}
    assert _gave_up_warnings(caplog) == len(samples)  # fewer than 20: each one is said


def test_a_retry_after_of_an_hour_is_not_waited_out(tmp_path):
    samples = SAMPLES[:8]
    plan = FaultPlan(storm_start=0, storm_len=10**9, storm_retry_after="3600")
    with FaultServer(_answers(samples), plan) as srv:
        out, m, elapsed = _distill(tmp_path, srv.url, samples, max_total_s=600, max_consecutive_give_ups=0)
        requests = srv.stats.requests
    # max_retry_after_s=5 < 3600: each sample gives up on its first answer instead of sleeping an hour
    assert elapsed < 3.0, elapsed
    assert requests == len(samples) == m["failures"]["http_429"] == m["failures"]["gave_up"]
    assert m["left_out_samples"]["gave_up"] == [s["sample_id"] for s in samples] and not m["complete"]


def test_a_storm_that_ends_is_ridden_out_with_every_sample_answered(tmp_path):
    # 32 consecutive 429s (more than the 30 samples: every sample is hit at least once), then a healthy server
    plan = FaultPlan(storm_start=0, storm_len=32, storm_retry_after="0.2")
    with FaultServer(_answers(SAMPLES), plan) as srv:
        out, m, elapsed = _distill(tmp_path, srv.url, SAMPLES, max_total_s=30)
    assert m["complete"] and m["accepted"] == len(SAMPLES) and m["left_out_samples"] == {}
    assert m["failures"]["http_429"] == 32 and m["failures"]["gave_up"] == 0 and m["endpoint_down"] is None
    assert m["requests"] == len(SAMPLES) + 32 and elapsed < 15
    assert len(out.read_text().splitlines()) == len(SAMPLES)
