"""Planners for interactive evaluation: the :class:`Policy` protocol and its implementations.

Input to :meth:`Policy.plan`: a batch of chat prompts (``data.prompt.build_messages``, the training format),
their images (vision prompts) and, for the scripted policies, one :class:`PlanContext` per prompt (the
episode, its action space, what has been executed). Output: one response text per prompt, in the EB JSON
format (docs/facts.md §1.4), which the episode runner parses and executes.

- :class:`ModelPolicy` asks a generation backend (``hf`` or ``vllm``); it reads only the prompt, as a deployed
  planner would.
- :class:`ExpertPolicy` answers the episode's expert plan minus the expert actions already executed
  successfully: it is the harness's upper bound (100% success when the simulator and harness agree with
  the episode data), and it is what the tests use.
- :class:`RandomPolicy` answers 1-5 uniformly random action ids of the scene: the lower bound.

Policies are built inside each worker from a picklable :class:`PolicySpec`, so a model is loaded once per
worker process and never pickled.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ..core import plugins
from ..data.response import format_response
from ..generation.config import GenerationConfig
from ..world.actions import ActionSpace
from .config import WRAPPERS


@dataclass
class PlanContext:
    """What the scripted policies may look at (a model policy sees only the prompt)."""

    episode: dict
    space: ActionSpace
    # every executed action so far: (action_id, action_name, success)
    executed: list[tuple[int, str, bool]]
    # 0-based index of this planner call within the episode
    call_index: int


@runtime_checkable
class Policy(Protocol):
    def plan(
        self,
        messages_batch: Sequence[list[dict]],
        images: Sequence[Any] | None = None,
        contexts: Sequence[PlanContext] | None = None,
    ) -> list[str]:
        """One response text per prompt of ``messages_batch``."""
        ...


class ModelPolicy:
    """A trained checkpoint behind a generation backend. ``last_completion_tokens`` holds the response
    lengths in tokens of the latest :meth:`plan` call (the runner records them)."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator
        self.last_completion_tokens: list[int] | None = None

    def plan(
        self,
        messages_batch: Sequence[list[dict]],
        images: Sequence[Any] | None = None,
        contexts: Sequence[PlanContext] | None = None,
    ) -> list[str]:
        outs = self.generator.complete(list(messages_batch), images, n=1)
        self.last_completion_tokens = [cs[0].completion_tokens for cs in outs]
        return [cs[0].text for cs in outs]

    def close(self) -> None:
        self.generator.close()


WRAPPERS.register("none", lambda generator, mode: ModelPolicy(generator))  # evaluate.reflection: none (config.py)


def _need_contexts(contexts: Sequence[PlanContext] | None, n: int, who: str) -> Sequence[PlanContext]:
    if contexts is None or len(contexts) != n:
        raise ValueError(
            f"{who} needs one PlanContext per prompt (got {None if contexts is None else len(contexts)} for {n})"
        )
    return contexts


class ExpertPolicy:
    """Answers the rest of the episode's expert plan.

    The rest is the expert plan after its longest prefix that the successful executed actions reproduce,
    so after a failed action (which the expert never makes, but a test may inject) it replans from where
    the expert left off.
    """

    def plan(
        self,
        messages_batch: Sequence[list[dict]],
        images: Sequence[Any] | None = None,
        contexts: Sequence[PlanContext] | None = None,
    ) -> list[str]:
        out = []
        for ctx in _need_contexts(contexts, len(messages_batch), "ExpertPolicy"):
            plan = list(ctx.episode["expert_plan"])
            done = [name for _, name, ok in ctx.executed if ok]
            k = 0
            while k < len(done) and k < len(plan) and done[k] == plan[k]:
                k += 1
            rest = plan[k:]
            pairs = [(ctx.space.id(name), name) for name in rest]
            out.append(
                format_response(
                    pairs,
                    visual_state_description="(expert policy: no observation used)",
                    reasoning_and_reflection=f"Replaying the expert plan from step {k + 1} of {len(plan)}.",
                )
            )
        return out


class RandomPolicy:
    """1-5 uniformly random action ids of the scene per call; the RNG is keyed on (seed, episode, call) so a
    result does not depend on how episodes are spread over workers."""

    def __init__(self, seed: int = 0, max_len: int = 5) -> None:
        self.seed = seed
        self.max_len = max_len

    def plan(
        self,
        messages_batch: Sequence[list[dict]],
        images: Sequence[Any] | None = None,
        contexts: Sequence[PlanContext] | None = None,
    ) -> list[str]:
        out = []
        for ctx in _need_contexts(contexts, len(messages_batch), "RandomPolicy"):
            key = f"{self.seed}:{ctx.episode['episode_id']}:{ctx.call_index}".encode()
            rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
            ids = [rng.randrange(len(ctx.space)) for _ in range(rng.randint(1, self.max_len))]
            out.append(format_response([(i, ctx.space.name(i)) for i in ids], reasoning_and_reflection="random"))
        return out


@dataclass(frozen=True)
class PolicySpec:
    """A picklable recipe for a policy; ``build()`` runs inside each worker."""

    kind: Literal["model", "expert", "random"]
    model_dir: str | None = None
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    seed: int = 0
    # evaluate.reflection: the name of the wrapper (config.WRAPPERS) the model's policy is built under; none = as is
    reflection: str = "none"
    # the module that registers that wrapper (core/plugins.py), imported by the worker that builds the policy
    plugin: str | None = None

    def __post_init__(self) -> None:
        if self.kind == "model" and not self.model_dir:
            raise ValueError("PolicySpec(kind='model') needs model_dir")

    def build(self) -> Policy:
        if self.kind == "expert":
            return ExpertPolicy()
        if self.kind == "random":
            return RandomPolicy(self.seed)
        from ..generation import make_generator

        gen = make_generator(Path(str(self.model_dir)), self.generation)
        plugins.import_module(self.plugin)
        return WRAPPERS.lookup(self.reflection, "evaluate.reflection")(gen, self.reflection)
