"""ReGRPO's reward terms (variant ``regrpo`` of ``embodied_rft.reward``; docs/regrpo.md §5) and the reward bound to a
policy for the local GRPO engine.

R(τ) = λ_exec·1{success} − η·C(τ) + λ_val·V, with C = reflection tokens / ``cost_tokens`` (the reflection block of
``regrpo/text.py``: from its first ErrorType/Evidence/FixPlan marker to the end of ``reasoning_and_reflection``; 0
for a response without one, so a one-shot success costs nothing), success = the paper reward's ``accuracy_full``
offline, or the plan executed from the sample's state (:mod:`.execute`), and V = the paper's prefix accuracy
offline, or the oracle's progress executed. Defaults are the released code's: λ_exec = 1, η = 0.1, 100 tokens per
unit of cost, λ_val = 0.

Input: the paper's breakdown of a response (``reward.score_paper``) and the response. Output: (success, reflection
tokens, total). Tokens are the policy tokenizer's when the caller passes ``count_tokens`` (the local engine does),
else words (the OpenRLHF reward file, unless ``EMBODIED_RFT_TOKENIZER`` names the policy). Pure; imports nothing of
``reward.py``, which imports this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config import ConfigError, as_dict
from .text import reflection_tokens


def regrpo_terms(
    paper: Any,
    response: object,
    *,
    lambda_exec: float = 1.0,
    eta: float = 0.1,
    cost_tokens: int = 100,
    lambda_val: float = 0.0,
    count_tokens: Callable[[str], int] | None = None,
    executed: tuple[float, float] | None = None,
) -> tuple[float, int, float]:
    """(success, reflection tokens, total) of a response whose paper breakdown is ``paper`` (module docstring)."""
    success, value = (paper.accuracy_full, paper.accuracy) if executed is None else executed
    tokens = reflection_tokens(response, count_tokens)
    return float(success), tokens, lambda_exec * float(success) - eta * tokens / cost_tokens + lambda_val * float(value)


def options(cfg: Any, **context: Any) -> dict[str, Any]:
    """A reward config's keyword options for its variant: regrpo's coefficients and the given ``context``
    (``count_tokens``, ``executed``); {} for the other variants."""
    if cfg.variant != "regrpo":
        return {}
    opts = {k: v for k, v in as_dict(cfg.regrpo).items() if k != "success"}
    return {**opts, **{k: v for k, v in context.items() if v is not None}}


def identity(cfg: Any) -> dict[str, Any]:
    """What decides a reward config's scores, for checkpoint fingerprints: its fields, ``regrpo`` only when it is
    the variant (so the other variants' fingerprints are what they were before it existed)."""
    d = as_dict(cfg)
    if cfg.variant != "regrpo":
        d.pop("regrpo", None)
    return d


def openrlhf_options(cfg: Any) -> dict[str, Any] | None:
    """The regrpo coefficients OpenRLHF's reward file reads (``EMBODIED_RFT_REWARD_OPTIONS``; None for the other
    variants). The executed success needs the episodes and each sample's history, which the reward file never sees."""
    if cfg.variant != "regrpo":
        return None
    if cfg.regrpo.success == "executed":
        raise ConfigError("reward.regrpo.success: executed runs on the local engine only; use offline with openrlhf")
    return {k: v for k, v in as_dict(cfg.regrpo).items() if k != "success"}


class BoundReward:
    """A reward config bound to the policy's token counter and, for ``reward.regrpo.success: executed``, an
    executor ``(response, sample) -> (success, progress)``; ``score`` takes the sample. Duck-types the config for
    the engine and its held-out check."""

    def __init__(self, cfg: Any, count_tokens: Callable[[str], int] | None = None, executor: Any = None) -> None:
        self.cfg, self.count_tokens, self.executor = cfg, count_tokens, executor
        self.variant, self.max_response_chars = cfg.variant, cfg.max_response_chars

    def score(self, response: object, label: object, sample: dict | None = None) -> Any:
        done = None
        if self.executor is not None and sample is not None and self.cfg.regrpo.success == "executed":
            done = self.executor(response, sample)
        return self.cfg.score(response, label, count_tokens=self.count_tokens, executed=done)

    def score_batch(self, responses: list, labels: list) -> list:
        return [self.score(r, lab) for r, lab in zip(responses, labels, strict=True)]


__all__ = ["BoundReward", "identity", "openrlhf_options", "options", "regrpo_terms"]
