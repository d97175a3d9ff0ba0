"""ReGRPO's plug-ins: what this package adds to the core's plug-in points (core/plugins.py), registered on import.

The core never imports this package. The ``plugins:`` table of ``conf/config.yaml`` names this module for the names
below, so a stage imports it only when its config uses one of them (``reward=regrpo``, ``decompose.rot.enabled``,
``teacher.rot.reflection`` / ``clean_ratio``, ``evaluate.reflection=free|regrpo``, ``grpo.anchors``, RoT samples in
GRPO's prompts); ``make params`` imports it to check the sections. Registered here:

- sections (``plugins.SECTIONS``): ``reward.regrpo``, ``decompose.rot``, ``teacher.rot`` (``config.py``);
- the reward variant ``regrpo`` (``reward.REWARDS``: ``reward.py``; its section supplies the options, OpenRLHF's
  options, the executed success and the logged ``reflection_tokens``);
- the source of decomposition's recovery samples ``rot`` (``data.decompose.SOURCES``: the RoT engine, ``rot.py``);
- distillation's rewrite ``rot`` (``teacher.distill.REWRITES``: the RoT reasoning and clean:RoT mix, ``distill.py``);
- the policy wrappers ``free`` and ``regrpo`` (``evaluate.config.WRAPPERS``: the inference trigger, ``trigger.py``)
  and the summary of the episode results' ``reflection`` counts (``evaluate.config.SUMMARIES``);
- GRPO's constructed group members ``anchors`` (``train.grpo.config.GROUP_MEMBERS``: ``anchors.py``) and the
  reflection meter, turned on by the ``regrpo`` variant or by RoT samples (``rot`` field) among the prompts
  (``train.grpo.config.METERS``: ``text.py``, ``steps.py``).

The implementations are imported when first used, so loading this module for a config check stays light.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..config import build
from ..core.plugins import SECTIONS
from ..data.decompose import SOURCES
from ..evaluate.config import SUMMARIES, WRAPPERS
from ..reward import REWARDS
from ..teacher.distill import REWRITES
from ..train.grpo.config import GROUP_MEMBERS, METERS
from .config import RegrpoRewardConfig, RotConfig, RotDistillConfig, check_anchor_kinds
from .reward import score_regrpo

SECTIONS.register("reward.regrpo", RegrpoRewardConfig)
SECTIONS.register("decompose.rot", RotConfig)
SECTIONS.register("teacher.rot", RotDistillConfig)
REWARDS.register("regrpo", score_regrpo)


@SOURCES.register("rot")
def rot_engine(cfg: RotConfig) -> Any:
    from .rot import RotEngine

    return RotEngine(cfg)


@REWRITES.register("rot")
def rot_reasoning(cfg: RotDistillConfig, samples: list[dict], accepted: list, **request: Any) -> dict[str, Any]:
    from .distill import apply_rot

    return apply_rot(cfg, samples, accepted, **request)


def trigger(generator: Any, mode: str) -> Any:
    from .trigger import ReflectionPolicy

    return ReflectionPolicy(generator, mode)


WRAPPERS.register("free", trigger)
WRAPPERS.register("regrpo", trigger)


@SUMMARIES.register("reflection")
def reflection_summary(stats: Sequence[dict]) -> dict[str, Any]:
    from .trigger import summarize

    return summarize(stats)


@GROUP_MEMBERS.register("anchors")
def anchors(kinds: Sequence[str], ctx: Any = None, cfg: Any = None) -> Any:
    """Checks the kinds; with the grpo stage's context, the writer in the SFT data's style: the scripted teacher's
    phrasing settings and ``teacher.rot.seed``."""
    check_anchor_kinds(tuple(kinds))
    if ctx is None:
        return None
    from ..teacher.config import TeacherConfig
    from .anchors import AnchorWriter

    teacher = build(TeacherConfig, ctx.section("teacher"), "teacher")
    return AnchorWriter(kinds, teacher.scripted, teacher.extensions["rot"].seed, cfg.seed)


def reflection_meter(count_tokens: Callable[[str], int]) -> Callable[[dict, str], tuple[int, bool, bool]]:
    """A response's reflection tokens (policy tokens), and whether its prompt is a clean call (where η should make
    reflections rare) or a silent near-miss (a RoT GroundingDrift state, where a reflection is needed)."""
    from .steps import state_kind
    from .text import reflection_tokens

    def meter(sample: dict, text: str) -> tuple[int, bool, bool]:
        kind = state_kind(sample, f"sample {sample.get('sample_id')}")
        return reflection_tokens(text, count_tokens), kind in ("first", "clean"), kind == "silent"

    return meter


METERS.register("regrpo", reflection_meter)
METERS.register("rot", reflection_meter)
