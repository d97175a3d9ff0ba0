"""ReGRPO's reward (variant ``regrpo`` of ``embodied_rft.reward``, registered by ``plugin.py``; docs/regrpo.md §5).

R(τ) = λ_exec·1{success} − η·C(τ) + λ_val·V, with C = reflection tokens / ``cost_tokens`` (the reflection block of
``regrpo/text.py``: from its first ErrorType/Evidence/FixPlan marker to the end of ``reasoning_and_reflection``; 0
for a response without one, so a one-shot success costs nothing), success = the paper reward's ``accuracy_full``
offline, or the plan executed from the sample's state (:mod:`.execute`), and V = the paper's prefix accuracy
offline, or the oracle's progress executed. Defaults are the released code's: λ_exec = 1, η = 0.1, 100 tokens per
unit of cost, λ_val = 0.

Input: a response and its sample's label. Output: the paper's breakdown (``reward.score_paper``) with ``total``,
``accuracy_full`` (success) and ``reflection_tokens`` replaced. Tokens are the policy tokenizer's when the caller
passes ``count_tokens`` (the local engine does), else words (the OpenRLHF reward file, unless
``EMBODIED_RFT_TOKENIZER`` names the policy). Pure. The coefficients and the executed success come from
``reward.regrpo`` (:class:`~.config.RegrpoRewardConfig`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..data.response import DEFAULT_MAX_CHARS
from ..reward import RewardBreakdown, score_paper
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


def score_regrpo(
    response: object, label: object, *, max_chars: int = DEFAULT_MAX_CHARS, **opts: Any
) -> RewardBreakdown:
    """ReGRPO's reward, variant ``regrpo`` of ``reward.REWARDS`` (``opts``: :func:`regrpo_terms`' coefficients,
    count_tokens, executed): the paper's breakdown with ``total``, ``accuracy_full`` and ``reflection_tokens``
    replaced."""
    b = score_paper(response, label, max_chars=max_chars)
    text = response[:max_chars] if isinstance(response, str) else response
    success, tokens, total = regrpo_terms(b, text, **opts)
    return dataclasses.replace(b, total=total, accuracy_full=success, reflection_tokens=tokens)


__all__ = ["regrpo_terms", "score_regrpo"]
