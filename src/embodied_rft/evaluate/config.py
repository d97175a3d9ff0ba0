"""The ``evaluate:`` config section (``conf/evaluate/default.yaml``) as a frozen, self-checking dataclass.

Input: the composed ``evaluate`` mapping, via ``config.build(EvalConfig, cfg["evaluate"], "evaluate")``.
Output: :class:`EvalConfig`, read by :func:`embodied_rft.evaluate.stage.run_evaluate`.

The episode limits are EmbodiedBench's (docs/facts.md §4.3: 30 environment steps, 10 invalid actions). The planner-call
cap is ours: EB has none, but each of its planner calls either executes an action or counts an invalid one,
so 40 calls (30 + 10) can never cut an EB episode short; it only guards against a policy bug.

Plug-in points (core/plugins.py): ``evaluate.reflection`` names a policy wrapper (:data:`WRAPPERS`; ``none``, the
model's own answer, is the core's: ``policy.py``), and a field a wrapper's policy adds to each episode result is summed over the
results by the summary registered under the field's name (:data:`SUMMARIES`); ReGRPO's inference trigger registers
``free`` and ``regrpo`` and the summary of ``reflection``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import check
from ..core import plugins
from ..generation.config import GenerationConfig

# the checkpoints the pipeline builds: evaluate.models names them, paths.<name>_model holds each
MODEL_NAMES = ("base", "sft", "grpo")
# evaluate.reflection's policy wrappers: ``wrap(generator, mode) -> Policy`` (the model's policy under the mode)
WRAPPERS = plugins.Registry("policy wrapper")
# summaries of the fields policies add to episode results: ``summarize([field of each result that has it]) -> dict``
SUMMARIES = plugins.Registry("result summary")


@dataclass(frozen=True)
class EvalConfig:
    # episode splits to evaluate interactively (data/episodes/<split>.jsonl); EB's subsets come from valid_seen
    splits: tuple[str, ...] = ("valid_seen",)
    # at most this many episodes per split, a seeded subsample balanced across subsets (0 = all; EB: 50 per subset)
    max_episodes: int = 60
    # models to evaluate, by paths key (one of MODEL_NAMES): base -> paths.base_model, sft -> paths.sft_model, grpo -> paths.grpo_model
    models: tuple[str, ...] = ("base", "sft", "grpo")
    # reference policies added to the report: expert (replays the expert plan: the harness's upper bound) and
    # random (random actions: its lower bound); cheap, no model involved
    reference_policies: tuple[str, ...] = ("expert", "random")
    # parallel episode workers (1 = in the calling process; with vLLM keep 1 and raise episodes_per_task)
    workers: int = 1
    # how workers run: process (local multiprocessing, spawn) | ray (one Ray actor per worker)
    parallel: Literal["process", "ray"] = "process"
    # GPUs each Ray actor reserves (parallel=ray; 1 on a GPU cluster, 0 on CPU)
    ray_gpus_per_worker: float = 0.0
    # episodes a worker steps in lockstep, so one generation batch serves all of them
    episodes_per_task: int = 8
    # EmbodiedBench's episode limits (docs/facts.md §4.3)
    max_env_steps: int = 30
    # invalid actions (failed steps, unreadable or out-of-range plans) before the episode ends (EB: 10)
    max_invalid_actions: int = 10
    # planner calls before the episode ends (ours; 40 = 30 + 10 never binds under EB's rules)
    max_planner_calls: int = 40
    # held-out decomposed samples scored offline (data/decomposed/val.jsonl): 0 = none, -1 = all
    max_offline_samples: int = 64
    # seed for episode subsampling, the random reference policy and generation
    seed: int = 0
    # resume: skip episodes already in the work dir's results for the same model and settings
    resume: bool = True
    # the generation backend and sampling (greedy by default, as EmbodiedBench evaluates)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    # the policy's wrapper (WRAPPERS): none (the policy's answer, as EB) or an extension's, e.g. ReGRPO's inference
    # trigger (regrpo/trigger.py, docs/regrpo.md §6): free (the same answers, with per-call reflection counts) |
    # regrpo (a reflection only when the last action failed, the observation is empty or the answer's confidence is
    # below the episode's running mean; one per call)
    reflection: str = "none"
    # per-model new-token caps overriding generation.max_new_tokens, e.g. {base: 48}: a randomly initialised
    # tiny model never emits its end token (docs/calibration.md §3.5), so on a CPU its 10 doomed planner calls
    # are capped
    max_new_tokens_by_model: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(len(self.splits) >= 1, "splits", "name at least one episode split, e.g. [valid_seen]")
        check(self.max_episodes >= 0, "max_episodes", f"must be >= 0 (0 = all), got {self.max_episodes}")
        # an empty list would evaluate only the reference rows and replace metrics/eval.json, reports/eval.md and the
        # details with tables of no model (outputs `dvc checkout` cannot bring back once the stage has run)
        check(
            len(self.models) >= 1,
            "models",
            f"name at least one model to evaluate, e.g. [sft] (one or more of {list(MODEL_NAMES)}); "
            "an empty list would replace the evaluation's outputs with empty tables",
        )
        check(len(set(self.models)) == len(self.models), "models", f"names must be unique, got {list(self.models)}")
        unknown = [m for m in self.models if m not in MODEL_NAMES]
        check(
            not unknown,
            "models",
            f"unknown model name(s) {unknown}; each names a paths.<name>_model checkpoint, one of {list(MODEL_NAMES)}",
        )
        for p in self.reference_policies:
            check(p in ("expert", "random"), "reference_policies", f"{p!r} is not one of ['expert', 'random']")
        check(self.workers >= 1, "workers", f"must be >= 1, got {self.workers}")
        check(self.ray_gpus_per_worker >= 0, "ray_gpus_per_worker", f"must be >= 0, got {self.ray_gpus_per_worker}")
        check(self.episodes_per_task >= 1, "episodes_per_task", f"must be >= 1, got {self.episodes_per_task}")
        check(self.max_env_steps >= 1, "max_env_steps", f"must be >= 1 (EB: 30), got {self.max_env_steps}")
        check(
            self.max_invalid_actions >= 1,
            "max_invalid_actions",
            f"must be >= 1 (EB: 10), got {self.max_invalid_actions}",
        )
        check(self.max_planner_calls >= 1, "max_planner_calls", f"must be >= 1, got {self.max_planner_calls}")
        for m, n in self.max_new_tokens_by_model.items():
            check(n >= 1, f"max_new_tokens_by_model.{m}", f"must be >= 1, got {n}")
        check(
            self.max_offline_samples >= -1,
            "max_offline_samples",
            f"must be -1 (all), 0 (none) or a count, got {self.max_offline_samples}",
        )
        WRAPPERS.lookup(self.reflection, "reflection")

    @property
    def limits(self) -> EpisodeLimits:
        return EpisodeLimits(self.max_env_steps, self.max_invalid_actions, self.max_planner_calls)


@dataclass(frozen=True)
class EpisodeLimits:
    """When an interactive episode ends (besides success)."""

    # environment steps, valid or not (EB: 30)
    max_env_steps: int = 30
    # invalid actions: failed steps plus unusable planner outputs (EB: 10)
    max_invalid_actions: int = 10
    # planner calls (ours; see the module docstring)
    max_planner_calls: int = 40

    def __post_init__(self) -> None:
        check(self.max_env_steps >= 1, "max_env_steps", f"must be >= 1, got {self.max_env_steps}")
        check(self.max_invalid_actions >= 1, "max_invalid_actions", f"must be >= 1, got {self.max_invalid_actions}")
        check(self.max_planner_calls >= 1, "max_planner_calls", f"must be >= 1, got {self.max_planner_calls}")
