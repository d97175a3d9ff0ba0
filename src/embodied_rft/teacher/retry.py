"""Asking a teacher robustly: retries with backoff, shared pacing, a spending budget, failure counters.

Inputs: a zero-argument call that raises :class:`TeacherError` on failure, the retry policy, a shared
:class:`RateLimiter` and :class:`Budget`. Output: the call's result, or :class:`GaveUp` /
:class:`BudgetExhausted`. Retries follow exponential backoff with jitter; a server's Retry-After is honoured
(up to a cap) and pauses *every* thread, so a rate-limit storm is not answered by a retry storm. Every wait
is bounded by the request's deadline and interrupted by the run's stop event (Ctrl-C).
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from .base import TeacherError
from .config import BudgetConfig, RetryConfig

log = logging.getLogger(__name__)
T = TypeVar("T")


class GaveUp(Exception):
    """A request failed past its retries or deadline; ``kind`` is the last failure's kind."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class BudgetExhausted(Exception):
    """The run's request or token budget is spent; no new request is sent."""


class Stopped(Exception):
    """The run is stopping (Ctrl-C or a fatal error elsewhere)."""


class Counters:
    """Thread-safe counters for the metrics (failures by kind, requests, tokens)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.c: collections.Counter[str] = collections.Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.c[key] += n

    def __getitem__(self, key: str) -> int:
        with self._lock:
            return self.c[key]


class Budget:
    """Per-run limits on requests sent and tokens spent. ``acquire`` reserves one request or refuses."""

    def __init__(self, cfg: BudgetConfig):
        self.cfg = cfg
        self._lock = threading.Lock()
        self.requests = 0
        self.tokens = 0

    def acquire(self) -> bool:
        with self._lock:
            if self._spent():
                return False
            self.requests += 1
            return True

    def add_tokens(self, n: int) -> None:
        with self._lock:
            self.tokens += n

    def _spent(self) -> bool:
        return (self.cfg.max_requests is not None and self.requests >= self.cfg.max_requests) or (
            self.cfg.max_tokens is not None and self.tokens >= self.cfg.max_tokens
        )

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return self._spent()


class RateLimiter:
    """Spaces request starts 60/rpm seconds apart across threads; ``pause_until`` holds everyone back
    (a server's Retry-After applies to the whole client, not just the request that got it)."""

    def __init__(self, requests_per_minute: float, stop: threading.Event, clock: Callable[[], float] = time.monotonic):
        self.interval = 60.0 / requests_per_minute if requests_per_minute > 0 else 0.0
        self.stop = stop
        self.clock = clock
        self._lock = threading.Lock()
        self._next = 0.0
        self._paused_until = 0.0

    def pause_until(self, t: float) -> None:
        with self._lock:
            self._paused_until = max(self._paused_until, t)

    def acquire(self, deadline: float) -> None:
        """Wait for this thread's slot; raises Stopped on stop, GaveUp('timeout') if past the deadline."""
        while True:
            with self._lock:
                now = self.clock()
                start = max(now, self._next, self._paused_until)
                if start <= now:
                    self._next = now + self.interval
                    return
            if start > deadline:
                raise GaveUp("timeout", "request deadline passed while waiting for the rate limit")
            if self.stop.wait(min(start - now, 1.0)):
                raise Stopped()


def backoff_delay(attempt: int, cfg: RetryConfig, rng: random.Random) -> float:
    """Exponential backoff with 'equal jitter': half of base*2^attempt (capped) fixed, half uniform, so
    waits grow but threads that failed together do not retry together."""
    d = min(cfg.backoff_max_s, cfg.backoff_base_s * (2.0**attempt))
    return d / 2 + rng.uniform(0, d / 2)


def call_with_retry(
    fn: Callable[[], T],
    *,
    cfg: RetryConfig,
    limiter: RateLimiter,
    budget: Budget,
    counters: Counters,
    stop: threading.Event,
    rng: random.Random,
    label: str = "",
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run ``fn`` until it succeeds, a non-retryable error, ``cfg.max_retries`` retries, or the deadline."""
    deadline = clock() + cfg.max_total_s
    attempt = 0
    while True:
        if stop.is_set():
            raise Stopped()
        limiter.acquire(deadline)
        if not budget.acquire():
            raise BudgetExhausted()
        counters.add("requests")
        try:
            return fn()
        except TeacherError as err:
            counters.add(f"failures.{err.kind}")
            if not err.retryable:
                raise GaveUp(err.kind, str(err)) from None
            if attempt >= cfg.max_retries:
                raise GaveUp(err.kind, f"{err} (after {attempt + 1} tries)") from None
            if err.retry_after is not None:
                if err.retry_after > cfg.max_retry_after_s:
                    raise GaveUp(
                        err.kind, f"server asked to wait {err.retry_after:.0f} s > max_retry_after_s"
                    ) from None
                delay = err.retry_after
                limiter.pause_until(clock() + delay)
            else:
                delay = backoff_delay(attempt, cfg, rng)
            if clock() + delay > deadline:
                raise GaveUp(err.kind, f"{err} (deadline of {cfg.max_total_s:g} s reached)") from None
            log.debug("%s: %s; retry %d in %.2f s", label, err.kind, attempt + 1, delay)
            attempt += 1
            if stop.wait(delay):
                raise Stopped() from None
