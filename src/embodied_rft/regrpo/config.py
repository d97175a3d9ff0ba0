"""The ReGRPO options of existing sections, as frozen, self-checking dataclasses (docs/regrpo.md §1):

- ``decompose.rot`` (:class:`RotConfig`): recovery samples come from the reflection-of-thought engine
  (``regrpo/rot.py``) instead of decomposition's plain near misses;
- ``teacher.rot`` (:class:`RotDistillConfig`): what ``distill`` writes as a RoT sample's reasoning (none / the
  triple / the shuffled control) and the clean:RoT mix of ``sft.jsonl``;
- ``reward.regrpo`` (:class:`RegrpoRewardConfig`): the coefficients of R = λ_exec·1{success} − η·C(τ) + λ_val·V.

Input: each mapping via ``config.build``. Output: the sections ``plugin.py`` registers in ``core.plugins.SECTIONS``,
which ``data/decompose.py``, ``teacher/config.py`` and ``reward.py`` then build and hand to this package's hooks.
Every option is off by default (the default pipeline never imports this package); the values are the released
code's (showlab/ReGRPO: the error-type mix, ``clean_ratio`` 0.5, η = 0.1 per 100 reflection tokens, λ_val = 0). No
import beyond :mod:`embodied_rft.config` at load, so the reward file stays light.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ..config import ConfigError, as_dict, check
from .text import ERROR_TYPES

# the four error types of the RoT engine, in the released code's order, and its target mix
TARGET_MIX = {"GroundingDrift": 0.294, "ToolMismatch": 0.246, "ArgInvalid": 0.308, "InfoInsufficient": 0.152}
# the constructed group members of ``grpo.anchors`` (regrpo/anchors.py): the released trainer's group per RoT record
ANCHOR_KINDS = ("correct", "reflect", "failed", "corrupted")


def check_anchor_kinds(kinds: tuple[str, ...] | list[str], key: str = "grpo.anchors") -> None:
    """ConfigError naming ``key`` for an unknown or repeated constructed member."""
    bad = [k for k in kinds if k not in ANCHOR_KINDS]
    check(not bad, key, f"unknown member {bad[0]!r}; choose from {list(ANCHOR_KINDS)}" if bad else "")
    check(len(set(kinds)) == len(kinds), key, f"a member is listed twice: {list(kinds)}")


@dataclass(frozen=True)
class RotConfig:
    # recovery samples (decompose.recovery_per_episode) from executed near-misses of the four error types, each
    # with its error type, failed action and simulator feedback (field `rot`) and a corrected plan checked to
    # reach the goal; false = decomposition's plain near misses (the default, byte-identical)
    enabled: bool = False
    # target share of each error type among the RoT samples (renormalised over the types feasible at a step)
    mix: dict[str, float] = field(default_factory=lambda: dict(TARGET_MIX))
    # a step whose chosen type would rise more than this above its target share gets no RoT sample (counted), so a
    # type that is feasible where the others are not cannot crowd them out; 1.0 = never skip
    max_over_target: float = 0.04
    # with decompose.steps_per_episode, a trajectory's drawn clean steps start with the silent twins: the expert's
    # state right after the step of each of its RoT samples whose near-miss executed (GroundingDrift). The twin's
    # history equals the RoT sample's up to the last action, which there found the right object and here a wrong
    # one, both "executed successfully", so the data holds both sides of a silent failure. false = drawn uniformly
    silent_twins: bool = False
    # a file of on-policy states (regrpo/collect.py: the states a trained policy reaches in training episodes)
    # whose states after a failed action join the train file as RoT samples of the policy's own failures, the
    # planner's plan from there as the corrected plan (their rot field has origin: onpolicy); null = none
    onpolicy_states: str | None = None

    def __post_init__(self) -> None:
        check(
            0.0 < self.max_over_target <= 1.0, "rot.max_over_target", f"must be in (0, 1], got {self.max_over_target}"
        )
        unknown = sorted(set(self.mix) - set(ERROR_TYPES))
        check(not unknown, "rot.mix", f"unknown error types {unknown}; choose from {list(ERROR_TYPES)}")
        check(
            all(v >= 0 for v in self.mix.values()) and sum(self.mix.values()) > 0,
            "rot.mix",
            f"weights must be >= 0 and not all 0, got {dict(self.mix)}",
        )

    def check_in(self, decompose: Any) -> None:
        """The checks against the ``decompose`` keys beside it (``core.plugins.sections``)."""
        check(
            not self.enabled or decompose.recovery_per_episode > 0,
            "decompose.rot.enabled",
            "needs decompose.recovery_per_episode > 0 (the steps that get a near-miss)",
        )
        check(
            not self.silent_twins or (self.enabled and decompose.steps_per_episode > 0),
            "decompose.rot.silent_twins",
            "needs decompose.rot.enabled and decompose.steps_per_episode > 0 (the twins replace drawn clean steps)",
        )
        check(
            self.onpolicy_states is None or self.enabled,
            "decompose.rot.onpolicy_states",
            "needs decompose.rot.enabled (the on-policy failures join the RoT samples)",
        )


@dataclass(frozen=True)
class RotDistillConfig:
    # the reasoning_and_reflection of a RoT sample: none (the teacher's plain reasoning, as for any replanning
    # sample: the "plain recovery" arm) | rot (the ErrorType/Evidence/FixPlan triple from the simulator's feedback)
    # | shuffled (control: each triple replaced by a length-matched triple of another RoT sample) | bare (no
    # reflection at all: the reasoning a step after a successful action gets, done / left / next, with no word on
    # the failure; the scripted teacher's brief wording)
    reflection: Literal["none", "rot", "shuffled", "bare"] = "none"
    # share of clean samples among clean + RoT records in sft.jsonl; the larger side is subsampled (fixed seed).
    # null = keep every record; ReGRPO's cold start: 0.5
    clean_ratio: float | None = None
    # seed of the subsample, the triples' wordings and the shuffled pairing
    seed: int = 0
    # teacher-written triples (backend openai): characters kept per field
    max_chars: int = 300

    def __post_init__(self) -> None:
        check(
            self.clean_ratio is None or 0.0 < self.clean_ratio < 1.0,
            "rot.clean_ratio",
            f"must be in (0, 1) or null (keep all), got {self.clean_ratio}",
        )
        check(self.max_chars >= 40, "rot.max_chars", f"must be >= 40, got {self.max_chars}")


@dataclass(frozen=True)
class RegrpoRewardConfig:
    # λ_exec: weight of success (offline: the whole remaining gold plan, accuracy_full; executed: the goal reached)
    lambda_exec: float = 1.0
    # η: weight of the reflection cost C = reflection tokens / cost_tokens (0 for a response without reflection)
    eta: float = 0.1
    # tokens per unit of reflection cost (the released code: 100)
    cost_tokens: int = 100
    # λ_val: weight of V, the dense value term (the paper's prefix accuracy offline, the oracle's progress executed)
    lambda_val: float = 0.0
    # offline (success = accuracy_full against the label) | executed (the plan run from the sample's state in the
    # simulator reaches the goal; needs the episodes: the grpo stage passes them)
    success: Literal["offline", "executed"] = "offline"

    def __post_init__(self) -> None:
        check(self.lambda_exec > 0, "regrpo.lambda_exec", f"must be > 0, got {self.lambda_exec}")
        check(self.eta >= 0, "regrpo.eta", f"must be >= 0, got {self.eta}")
        check(self.cost_tokens >= 1, "regrpo.cost_tokens", f"must be >= 1, got {self.cost_tokens}")
        check(self.lambda_val >= 0, "regrpo.lambda_val", f"must be >= 0, got {self.lambda_val}")

    # the reward's hooks (``reward.RewardConfig``): the breakdown field the variant adds to the logged terms
    terms: ClassVar[tuple[str, ...]] = ("reflection_tokens",)

    def openrlhf_options(self) -> dict[str, Any]:
        """The coefficients OpenRLHF's reward file reads (``EMBODIED_RFT_REWARD_OPTIONS``). The executed success
        needs the episodes and each sample's history, which the reward file never sees."""
        if self.success == "executed":
            raise ConfigError(
                "reward.regrpo.success: executed runs on the local engine only; use offline with openrlhf"
            )
        return {k: v for k, v in as_dict(self).items() if k != "success"}

    def options(self, **context: Any) -> dict[str, Any]:
        """``reward.regrpo.score_regrpo``'s keyword options: the coefficients and the given ``context``
        (``count_tokens``, ``executed``)."""
        opts = {k: v for k, v in as_dict(self).items() if k != "success"}
        return {**opts, **{k: v for k, v in context.items() if v is not None}}

    def executor(self, episodes_path: Any) -> Any:
        """With ``success: executed``, the plan run from each sample's state over the episodes (``execute.py``)."""
        if self.success != "executed":
            return None
        from ..data.jsonl import iter_jsonl
        from .execute import Executor

        return Executor({rec["episode_id"]: rec for _, rec in iter_jsonl(episodes_path)})


__all__ = ["ERROR_TYPES", "TARGET_MIX", "RegrpoRewardConfig", "RotConfig", "RotDistillConfig"]
