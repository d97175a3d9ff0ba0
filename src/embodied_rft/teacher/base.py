"""The contract every teacher backend implements, and the errors it raises.

A teacher takes one decomposed sample (see the shared sample contract) and a sample index (0 for the first
answer, 1, 2, ... for asking again) and returns an :class:`Answer` (the raw text plus token usage). Failures
are :class:`TeacherError` with a ``kind`` (the metrics key) and whether retrying may help; the retry loop,
cache, budget and validation live outside the backend, so a backend is only "how to ask".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# Failure kinds of one HTTP attempt (retryable unless noted) and of one answer (never retried: a new sample
# index is asked instead). These are the keys of metrics["failures"].
REQUEST_KINDS = ("timeout", "connection", "http_429", "http_5xx", "bad_body", "http_4xx")
ANSWER_KINDS = ("bad_json", "invalid_plan", "wrong_plan")
RUN_KINDS = ("gave_up", "budget")


@dataclass(frozen=True)
class Answer:
    """One teacher answer. ``tokens_*`` are what the endpoint reported (0 when it reports nothing)."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    finish_reason: str | None = None


class TeacherError(Exception):
    """A request failed. ``kind`` is one of REQUEST_KINDS; ``retry_after`` (seconds) is the server's ask.

    Messages must never contain the API key: backends build them from status codes and scrubbed text.
    """

    def __init__(self, kind: str, message: str, *, retryable: bool = True, retry_after: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.retry_after = retry_after


class FatalTeacherError(RuntimeError):
    """The run cannot go on (bad credentials, unknown model, missing key variable): stop, keep the cache."""


class Teacher(Protocol):
    #: a short name for metrics and cache keys (the model name for API backends)
    model: str
    #: True when answers cost money/time and go through the persistent cache
    cached: bool
    #: how many requests may run at once (1 = sequential)
    concurrency: int
    #: client-side pacing across threads (0 = unpaced)
    requests_per_minute: float

    def request(self, sample: dict, sample_index: int) -> dict:
        """The exact request this teacher would send (messages and sampling params): the cache key's input."""
        ...

    def ask(self, sample: dict, sample_index: int, request: dict) -> Answer:
        """Ask for one answer; raises TeacherError (transient or not) or FatalTeacherError."""
        ...

    def close(self) -> None: ...
