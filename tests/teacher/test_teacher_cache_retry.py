"""The answer cache (keys, durability, concurrency), retry/backoff/budget/pacing, and log redaction."""

from __future__ import annotations

import logging
import random
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from embodied_rft.teacher import Answer, ResponseCache, TeacherError, cache_key
from embodied_rft.teacher.config import BudgetConfig, RetryConfig
from embodied_rft.teacher.openai_backend import parse_retry_after
from embodied_rft.teacher.redact import MASK, redact, redacting_logs
from embodied_rft.teacher.retry import (
    Budget,
    BudgetExhausted,
    Counters,
    GaveUp,
    RateLimiter,
    Stopped,
    backoff_delay,
    call_with_retry,
)

REQ = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7, "max_tokens": 9}


# -- cache ----------------------------------------------------------------------------------------------
def test_cache_key_is_stable_and_sensitive_to_every_input():
    k = cache_key(REQ, 0)
    assert k == cache_key(dict(reversed(list(REQ.items()))), 0)  # dict order does not matter
    assert len(k) == 64 and int(k, 16) >= 0
    changed = [
        cache_key(REQ, 1),
        cache_key({**REQ, "model": "m2"}, 0),
        cache_key({**REQ, "temperature": 0.0}, 0),
        cache_key({**REQ, "max_tokens": 10}, 0),
        cache_key({**REQ, "messages": [{"role": "user", "content": "hi!"}]}, 0),
        cache_key({**REQ, "seed": 1}, 0),
    ]
    assert len({k, *changed}) == 1 + len(changed)


def test_cache_key_digests_inline_images():
    def with_image(data: bytes):
        url = "data:image/png;base64," + __import__("base64").b64encode(data).decode()
        return {
            **REQ,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "hi"}],
                }
            ],
        }

    a, b = with_image(b"\x89PNG" + b"a" * 1000), with_image(b"\x89PNG" + b"b" * 1000)
    assert cache_key(a, 0) == cache_key(with_image(b"\x89PNG" + b"a" * 1000), 0)
    assert cache_key(a, 0) != cache_key(b, 0)


def test_cache_put_get_first_answer_wins_and_persists(tmp_path):
    with ResponseCache(tmp_path / "c") as c:
        assert c.path == tmp_path / "c" / "answers.sqlite"
        assert c.get("k") is None
        assert c.put("k", Answer("one", 3, 4, "stop"), model="m", sample_id="s", sample_index=0)
        assert not c.put("k", Answer("two", 5, 6, "stop"), model="m", sample_id="s", sample_index=0)
        assert c.get("k") == Answer("one", 3, 4, "stop")
    with ResponseCache(tmp_path / "c") as c:
        assert len(c) == 1 and c.get("k").text == "one"
    # at rest the cache is one file (the WAL was folded back on close)
    assert (
        not (tmp_path / "c" / "answers.sqlite-wal").exists()
        or (tmp_path / "c" / "answers.sqlite-wal").stat().st_size == 0
    )


def test_cache_threads_store_each_key_exactly_once(tmp_path):
    c = ResponseCache(tmp_path / "a.sqlite")
    won = Counters()

    def worker(t):
        for i in range(50):
            if c.put(f"k{i}", Answer(f"t{t}"), model="m", sample_id=str(i), sample_index=0):
                won.add(f"k{i}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(c) == 50 and all(won[f"k{i}"] == 1 for i in range(50))
    c.close()


def test_cache_survives_sigkill_of_the_writer(tmp_path):
    """Each put is committed on its own: a writer killed mid-stream leaves every finished put readable."""
    path = tmp_path / "k.sqlite"
    code = (
        "import sys, time\n"
        "from embodied_rft.teacher import ResponseCache, Answer\n"
        "c = ResponseCache(sys.argv[1])\n"
        "for i in range(100000):\n"
        "    c.put(f'k{i}', Answer('x' * 100), model='m', sample_id=str(i), sample_index=0)\n"
        "    print(i, flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    last = -1
    for line in proc.stdout:
        last = int(line)
        if last >= 30:
            break
    proc.kill()
    proc.wait(timeout=10)
    with ResponseCache(path) as c:
        assert len(c) >= last + 1  # every put that returned is there
        assert all(c.get(f"k{i}").text == "x" * 100 for i in range(last + 1))
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone() == ("ok",)


# -- retry ----------------------------------------------------------------------------------------------
FAST = RetryConfig(max_retries=4, backoff_base_s=0.01, backoff_max_s=0.04, max_retry_after_s=1.0, max_total_s=5.0)


def _call(fn, cfg=FAST, budget=None, stop=None, rpm=0.0):
    stop = stop or threading.Event()
    counters = Counters()
    out = call_with_retry(
        fn,
        cfg=cfg,
        limiter=RateLimiter(rpm, stop),
        budget=budget or Budget(BudgetConfig()),
        counters=counters,
        stop=stop,
        rng=random.Random(0),
    )
    return out, counters


def _flaky(errors):
    calls = []

    def fn():
        calls.append(time.monotonic())
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "ok"

    return fn, calls


def test_backoff_grows_with_jitter_and_is_capped():
    cfg = RetryConfig(backoff_base_s=1.0, backoff_max_s=8.0)
    rng = random.Random(1)
    for attempt, (lo, hi) in enumerate([(0.5, 1), (1, 2), (2, 4), (4, 8), (4, 8), (4, 8)]):
        ds = [backoff_delay(attempt, cfg, rng) for _ in range(200)]
        assert lo <= min(ds) and max(ds) <= hi
        assert max(ds) - min(ds) > 0.3 * (hi - lo)  # jittered, not constant


def test_transient_errors_are_retried_and_counted():
    fn, calls = _flaky([TeacherError("timeout", "t"), TeacherError("http_5xx", "s"), TeacherError("http_429", "r")])
    out, c = _call(fn)
    assert out == "ok" and len(calls) == 4
    assert (c["requests"], c["failures.timeout"], c["failures.http_5xx"], c["failures.http_429"]) == (4, 1, 1, 1)


def test_retry_after_is_honoured_and_pauses_everyone():
    fn, calls = _flaky([TeacherError("http_429", "r", retry_after=0.3)])
    stop = threading.Event()
    limiter = RateLimiter(0, stop)
    out = call_with_retry(
        fn,
        cfg=FAST,
        limiter=limiter,
        budget=Budget(BudgetConfig()),
        counters=Counters(),
        stop=stop,
        rng=random.Random(0),
    )
    assert out == "ok" and calls[1] - calls[0] >= 0.29
    # another thread asking right after the 429 waits for the pause too
    t0 = time.monotonic()
    limiter.pause_until(t0 + 0.2)
    limiter.acquire(deadline=t0 + 5)
    assert time.monotonic() - t0 >= 0.19


def test_gives_up_after_max_retries_and_on_non_retryable_and_on_long_retry_after():
    fn, calls = _flaky([TeacherError("http_5xx", "s")] * 10)
    with pytest.raises(GaveUp) as ei:
        _call(fn)
    assert ei.value.kind == "http_5xx" and len(calls) == FAST.max_retries + 1
    fn, calls = _flaky([TeacherError("http_4xx", "bad request", retryable=False)])
    with pytest.raises(GaveUp):
        _call(fn)
    assert len(calls) == 1
    fn, calls = _flaky([TeacherError("http_429", "r", retry_after=3600)])
    with pytest.raises(GaveUp, match="max_retry_after_s"):
        _call(fn)
    assert len(calls) == 1


def test_total_time_is_bounded_by_the_deadline():
    cfg = RetryConfig(max_retries=1000, backoff_base_s=0.05, backoff_max_s=0.1, max_total_s=0.5)
    fn, calls = _flaky([TeacherError("timeout", "t")] * 10_000)
    t0 = time.monotonic()
    with pytest.raises(GaveUp, match="deadline"):
        _call(fn, cfg)
    assert time.monotonic() - t0 < 1.5 and 3 <= len(calls) < 30  # 0.5 s deadline, slack for a loaded machine


def test_budget_refuses_requests_past_its_limits():
    b = Budget(BudgetConfig(max_requests=3))
    assert [b.acquire() for _ in range(5)] == [True, True, True, False, False]
    b = Budget(BudgetConfig(max_tokens=100))
    assert b.acquire()
    b.add_tokens(120)
    assert b.exhausted and not b.acquire()
    fn, calls = _flaky([TeacherError("timeout", "t")] * 10)
    with pytest.raises(BudgetExhausted):
        _call(fn, budget=Budget(BudgetConfig(max_requests=2)))
    assert len(calls) == 2  # the retry that would exceed the budget is never sent


def test_stop_event_interrupts_waits():
    stop = threading.Event()
    fn, calls = _flaky([TeacherError("http_429", "r", retry_after=0.9)])
    threading.Timer(0.1, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(Stopped):
        _call(fn, stop=stop)
    assert time.monotonic() - t0 < 0.8  # not the full 0.9 s Retry-After


def test_rate_limiter_spaces_requests():
    stop = threading.Event()
    lim = RateLimiter(600, stop)  # one per 0.1 s
    t0 = time.monotonic()
    times = []

    def go():
        lim.acquire(deadline=t0 + 5)
        times.append(time.monotonic() - t0)

    threads = [threading.Thread(target=go) for _ in range(5)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    times.sort()
    assert times[-1] >= 0.38 and all(b - a >= 0.08 for a, b in zip(times, times[1:]))


@pytest.mark.parametrize(
    "headers,expected",
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({}, None),
        ({"retry-after": "soon"}, None),
    ],
)
def test_parse_retry_after(headers, expected):
    assert parse_retry_after(headers) == expected


def test_parse_retry_after_http_date():
    import email.utils

    v = parse_retry_after({"retry-after": email.utils.formatdate(time.time() + 30, usegmt=True)})
    assert 28 <= v <= 31


# -- redaction ------------------------------------------------------------------------------------------
def test_redacting_logs_scrubs_messages_args_and_tracebacks(tmp_path):
    secret = "sk-test-" + "ab12" * 8
    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    lg = logging.getLogger("some.library")
    lg.addHandler(handler)
    lg.setLevel(logging.DEBUG)
    try:
        with redacting_logs((secret,)):
            lg.debug("headers: %s", {"Authorization": f"Bearer {secret}"})
            lg.info(f"key={secret}")
            try:
                raise RuntimeError(f"echo {secret}")
            except RuntimeError:
                lg.exception("failed")
        lg.info(f"after the run the factory is restored: {secret[:4]}")
    finally:
        lg.removeHandler(handler)
        handler.close()
    text = log_file.read_text()
    assert secret not in text and text.count(MASK) == 3
    assert "RuntimeError: echo [REDACTED]" in text
    assert redact(f"a{secret}b{secret}", (secret,)) == f"a{MASK}b{MASK}"
