"""The ``teacher:`` config section (Hydra group ``conf/teacher/``): which teacher answers, how it is asked,
what it may cost and which answers are kept.

Inputs: the composed ``teacher`` mapping (``conf/teacher/scripted.yaml`` or ``conf/teacher/openai.yaml``),
turned into a frozen :class:`TeacherConfig` by ``config.build(TeacherConfig, cfg["teacher"], "teacher")``.
Departures from the paper: the paper asked Gemini-2.0-flash once per prompt and does not say whether or how
answers were filtered; here answers are validated (rejection sampling, ``validate``) and may be asked again
(``max_attempts``), and an offline scripted oracle is the default so the pipeline runs without network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..config import check
from ..core import plugins


def rewrites(section: Any) -> bool:
    """Whether a section an extension contributes to ``teacher`` rewrites the accepted answers (``teacher/distill.py``
    REWRITES): its ``reflection`` is not ``none`` or it sets a clean share (``clean_ratio``)."""
    return plugins.switched_on(section, "reflection", "clean_ratio")


@dataclass(frozen=True)
class ScriptedConfig:
    # seed of the phrasing/noise RNG; each answer's RNG is keyed on (seed, sample_id, sample index)
    seed: int = 0
    # probability that an answer's executable plan is corrupted (so validation has something to reject);
    # 0 = always correct. The paper's teacher is a real model whose errors this imitates.
    noise_rate: float = 0.0
    # full: a teacher-like answer (observation restated, progress and task notes, numbered NL plan);
    # brief: the same four fields in a few words each, so a tiny CPU model's responses stay short
    verbosity: Literal["full", "brief"] = "full"
    # probability that an answer whose gold plan opens a container leaves the opening out (and the closing
    # after it): a systematic planning mistake, not random noise, that a teacher which does not track container
    # state makes. Validation by prefix rejects such answers; with validate=none (the paper keeps every answer)
    # SFT inherits the habit and a reward against the expert plan can train it away. 0 = never.
    forget_open_rate: float = 0.0
    # probability that an answer makes one planning mistake of the kinds a strong VLM makes on EB-ALFRED
    # (docs/teacher.md): a look-alike object (Cup for Mug), a look-alike receptacle (DiningTable for
    # CounterTop), a skipped step, an extra detour step, two steps in the wrong order. The mistake is in the NL
    # plan and the executable plan alike, so with validate=none SFT copies it. 0 = exact.
    error_rate: float = 0.0
    # relative weights of those kinds; a kind the answer's plan does not allow (nothing with a look-alike, a
    # one-step plan) gives way to the others in proportion
    error_mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ERROR_MIX))

    def __post_init__(self) -> None:
        for name in ("noise_rate", "forget_open_rate", "error_rate"):
            value = getattr(self, name)
            check(0.0 <= value <= 1.0, f"teacher.scripted.{name}", f"must be in [0, 1], got {value}")
        unknown = sorted(set(self.error_mix) - set(ERROR_KINDS))
        check(not unknown, "teacher.scripted.error_mix", f"unknown kinds {unknown}; choose from {list(ERROR_KINDS)}")
        check(
            all(w >= 0 for w in self.error_mix.values()) and sum(self.error_mix.values()) > 0,
            "teacher.scripted.error_mix",
            f"weights must be >= 0 and not all 0, got {dict(self.error_mix)}",
        )


# the planning mistakes of the scripted teacher's error model (embodied_rft.teacher.errors.make_error)
ERROR_KINDS = ("wrong_object", "wrong_receptacle", "skip_step", "extra_step", "swap_steps")
DEFAULT_ERROR_MIX = {
    "wrong_object": 0.3,
    "wrong_receptacle": 0.3,
    "skip_step": 0.15,
    "extra_step": 0.15,
    "swap_steps": 0.1,
}


@dataclass(frozen=True)
class OpenAIConfig:
    # model name sent to the endpoint; the paper's teacher is gemini-2.0-flash
    model: str = "gemini-2.0-flash"
    # OpenAI-compatible base URL (Gemini, OpenAI, vLLM, or this project's own server)
    base_url: str = "https://generativelanguage.googleapis.com/v1beta/openai/"
    # NAME of the environment variable holding the API key; the key itself is never put in config
    api_key_env: str = "GEMINI_API_KEY"
    # sampling temperature (the paper does not report the teacher's)
    temperature: float = 0.7
    # nucleus sampling; null = the endpoint's default (not sent)
    top_p: float | None = None
    # answer length limit in tokens
    max_tokens: int = 1024
    # seed sent with each request as seed + sample index; null = not sent (some endpoints reject it)
    seed: int | None = None
    # ask for a JSON object (response_format json_object); off by default as not every endpoint supports it
    json_mode: bool = False
    # attach the sample's image as a data URL (vision teacher); text-only prompts otherwise
    send_images: bool = True
    # parallel requests (thread pool size)
    concurrency: int = 4
    # client-side pacing, requests per minute across all threads; 0 = unpaced
    requests_per_minute: float = 60.0
    # per-request timeout, seconds (connect + read)
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        check(bool(self.model), "teacher.openai.model", "must be a model name")
        check(
            self.base_url.startswith(("http://", "https://")),
            "teacher.openai.base_url",
            f"must be an http(s) URL, got {self.base_url!r}",
        )
        check(
            self.api_key_env.isidentifier(),
            "teacher.openai.api_key_env",
            f"must be an environment variable NAME (not the key), got a {len(self.api_key_env)}-character value",
        )
        check(
            0.0 <= self.temperature <= 2.0,
            "teacher.openai.temperature",
            f"must be in [0, 2], got {self.temperature}",
        )
        check(
            self.top_p is None or 0.0 < self.top_p <= 1.0,
            "teacher.openai.top_p",
            f"must be in (0, 1] or null, got {self.top_p}",
        )
        check(self.max_tokens >= 1, "teacher.openai.max_tokens", f"must be >= 1, got {self.max_tokens}")
        check(
            1 <= self.concurrency <= 256,
            "teacher.openai.concurrency",
            f"must be in [1, 256], got {self.concurrency}",
        )
        check(
            self.requests_per_minute >= 0,
            "teacher.openai.requests_per_minute",
            f"must be >= 0 (0 = unpaced), got {self.requests_per_minute}",
        )
        check(self.timeout_s > 0, "teacher.openai.timeout_s", f"must be > 0 seconds, got {self.timeout_s}")


@dataclass(frozen=True)
class RetryConfig:
    # retries per request after the first try (timeouts, 429, 5xx, broken bodies, connection errors)
    max_retries: int = 6
    # first backoff, seconds; doubled each retry, with jitter (half fixed, half uniform random)
    backoff_base_s: float = 1.0
    # longest single backoff, seconds
    backoff_max_s: float = 60.0
    # longest Retry-After honoured, seconds; a server asking for more makes the request give up
    max_retry_after_s: float = 120.0
    # bound on one request's total time including all retries and waits, seconds
    max_total_s: float = 600.0
    # requests in a row that give up (no answer in between) before the run stops asking: the endpoint is
    # down, and going on would cost up to max_total_s per remaining sample; the rerun resumes from the cache
    # (0 = never stop)
    max_consecutive_give_ups: int = 32

    def __post_init__(self) -> None:
        check(self.max_retries >= 0, "teacher.retry.max_retries", f"must be >= 0, got {self.max_retries}")
        check(self.backoff_base_s >= 0, "teacher.retry.backoff_base_s", f"must be >= 0, got {self.backoff_base_s}")
        check(self.backoff_max_s >= self.backoff_base_s, "teacher.retry.backoff_max_s", "must be >= backoff_base_s")
        check(
            self.max_retry_after_s >= 0,
            "teacher.retry.max_retry_after_s",
            f"must be >= 0, got {self.max_retry_after_s}",
        )
        check(self.max_total_s > 0, "teacher.retry.max_total_s", f"must be > 0, got {self.max_total_s}")
        check(
            self.max_consecutive_give_ups >= 0,
            "teacher.retry.max_consecutive_give_ups",
            f"must be >= 0 (0 = never stop), got {self.max_consecutive_give_ups}",
        )


@dataclass(frozen=True)
class BudgetConfig:
    # most teacher requests this run may send (retries count, cache hits do not); null = no limit
    max_requests: int | None = None
    # most tokens (prompt + completion, as reported by the endpoint) this run may spend; null = no limit
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        check(
            self.max_requests is None or self.max_requests >= 0,
            "teacher.budget.max_requests",
            "must be >= 0 or null",
        )
        check(self.max_tokens is None or self.max_tokens >= 0, "teacher.budget.max_tokens", "must be >= 0 or null")


@dataclass(frozen=True)
class TeacherConfig:
    # which teacher answers: scripted (offline oracle) | openai (any OpenAI-compatible chat endpoint)
    backend: Literal["scripted", "openai"] = "scripted"
    # settings of the scripted oracle
    scripted: ScriptedConfig = field(default_factory=ScriptedConfig)
    # settings of the OpenAI-compatible backend
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    # retry/backoff policy for failed requests
    retry: RetryConfig = field(default_factory=RetryConfig)
    # per-run spending limit; the run stops cleanly and reports when it is reached
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    # which answers are kept: none (well-formed only) | prefix (plan matches the gold remaining plan) |
    # simulate (plan reaches the goal in the simulator from the sample's state; needs the episodes)
    validate: Literal["none", "prefix", "simulate"] = "prefix"
    # for validate=prefix: null = the plan must equal the whole gold remaining plan; m = the plan must be a
    # prefix of the gold plan at least min(m, len(gold)) steps long
    min_prefix: int | None = None
    # answers asked per sample until one passes validation (each try is a new sample index and cache key)
    max_attempts: int = 2
    # distil only the first N samples (in file order); null = all
    max_samples: int | None = None
    # the sections extensions contribute (core/plugins.py), used when they rewrite the answers (rewrites): teacher.rot,
    # ReGRPO's cold-start data (docs/regrpo.md): the reasoning of RoT samples (decompose.rot), the clean:RoT mix
    extensions: dict[str, Any] = plugins.extensions()

    def __post_init__(self) -> None:
        check(
            self.min_prefix is None or self.min_prefix >= 1,
            "teacher.min_prefix",
            f"must be >= 1 or null (whole plan), got {self.min_prefix}",
        )
        check(self.max_attempts >= 1, "teacher.max_attempts", f"must be >= 1, got {self.max_attempts}")
        check(self.max_samples is None or self.max_samples >= 0, "teacher.max_samples", "must be >= 0 or null")
        object.__setattr__(self, "extensions", plugins.sections(self, "teacher", lambda _, section: rewrites(section)))
