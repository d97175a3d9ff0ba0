"""Reward models: a trajectory's key frames -> progress in [0, 1] per key frame (docs/dna.md §2).

Every reward model gets the same view: the instruction, the trajectory (its replayed states) and the key frames'
indices (:func:`.frames.key_indices`); it returns one progress value per key frame and what it cost
(:class:`Assessment`). :func:`assess` interpolates them back to every state. The privileged ones read the
simulator's states; the learned and LLM ones (later) read only the instruction and the frames' texts.

- ``gt``: the goal conditions met, as EB's ``goal_conditions_met`` (``Simulator.progress``);
- ``planner``: the world oracle's dense progress 1 − L(s)/L(s0) (``WorldOracle.progress``);
- ``biased:<eps>``: ``planner`` plus ``eps`` credit, clamped to 1, in a state where the held object, or an object
  in the goal's receptacle, is a look-alike of the goal's object, or the goal's object sits in a look-alike of its
  receptacle, or a look-alike of the goal's lamp is on where the agent stands — whoever put it there: a model
  judging the frame cannot tell (the look-alikes of the
  scripted teacher's error model, ``teacher/errors.py``): a controlled stand-in for a reward model that takes the
  look-alike for the real thing (TOPReward's failure in D&A's π0 story).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from embodied_rft.config import ConfigError
from embodied_rft.dna.frames import Trajectory, interpolate
from embodied_rft.teacher.errors import LOOKALIKE_OBJECTS, LOOKALIKE_RECEPTACLES
from embodied_rft.world.objects import SLICED_TYPE
from embodied_rft.world.oracle import WorldOracle
from embodied_rft.world.simulator import Simulator


@dataclass(frozen=True)
class Assessment:
    """One reward model's verdict on one trajectory: progress per key frame and the cost of getting it."""

    progress: tuple[float, ...]
    calls: int = 0
    tokens: int = 0
    seconds: float = 0.0
    parse_failures: int = 0
    criterion: str | None = None


class RewardModel(abc.ABC):
    """A reward model: progress at a trajectory's key frames (:meth:`key_progress`)."""

    name: str = ""

    @abc.abstractmethod
    def key_progress(self, traj: Trajectory, keys: Sequence[int], instruction: str) -> Assessment:
        """One progress value in [0, 1] per key frame of ``traj``, and what getting them cost."""


def assess(rm: RewardModel, traj: Trajectory, keys: Sequence[int], instruction: str) -> tuple[list[float], Assessment]:
    """The reward at every state of ``traj`` (key frames interpolated) and the model's assessment."""
    a = rm.key_progress(traj, keys, instruction)
    if len(a.progress) != len(keys):
        raise ValueError(f"reward model {rm.name}: {len(a.progress)} values for {len(keys)} key frames")
    return interpolate(keys, a.progress, traj.n), a


class GoalConditions(RewardModel):
    name = "gt"

    def key_progress(self, traj: Trajectory, keys: Sequence[int], instruction: str) -> Assessment:
        return Assessment(tuple(traj.states[k].progress() for k in keys))


class PlannerProgress(RewardModel):
    name = "planner"

    def key_progress(self, traj: Trajectory, keys: Sequence[int], instruction: str) -> Assessment:
        oracle = WorldOracle(traj.episode)
        return Assessment(tuple(oracle.progress(traj.states[k]) for k in keys))


def lookalike_credit(sim: Simulator) -> bool:
    """Whether ``sim`` shows a look-alike standing in for the goal's object, receptacle or lamp (module doc)."""
    g, objs = sim.goal, sim.objs
    targets = {g.object_target, SLICED_TYPE.get(g.object_target)} - {None}
    fake_obj = LOOKALIKE_OBJECTS.get(g.object_target)
    if sim.held is not None and objs[sim.held].type == fake_obj:
        return True
    fake_parent = LOOKALIKE_RECEPTACLES.get(g.parent_target) if g.parent_target else None
    for o in objs.values():
        parent = objs[o.parent].type if o.parent is not None and o.parent in objs else None
        if parent is None:
            continue
        if o.type == fake_obj and parent == g.parent_target:
            return True
        if o.type in targets and fake_parent is not None and parent == fake_parent:
            return True
    fake_lamp = LOOKALIKE_RECEPTACLES.get(g.toggle_target) if g.toggle_target else None
    return fake_lamp is not None and any(
        lamp.on and sim.anchor(lamp) == sim.loc for lamp in sim.by_type.get(fake_lamp, ())
    )


class Biased(RewardModel):
    def __init__(self, eps: float) -> None:
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"biased: eps must be in [0, 1], got {eps}")
        self.eps = eps
        self.name = f"biased:{eps:g}"

    def key_progress(self, traj: Trajectory, keys: Sequence[int], instruction: str) -> Assessment:
        oracle = WorldOracle(traj.episode)
        out = []
        for k in keys:
            s = traj.states[k]
            out.append(min(1.0, oracle.progress(s) + (self.eps if lookalike_credit(s) else 0.0)))
        return Assessment(tuple(out))


# name -> factory taking the text after ':' (None without one)
RMS: dict[str, Callable[[str | None], RewardModel]] = {
    "gt": lambda arg: GoalConditions(),
    "planner": lambda arg: PlannerProgress(),
    "biased": lambda arg: Biased(float(arg if arg is not None else "0.5")),
    "criterion_gold": lambda arg: _gold(True),
    "criterion_gold_ungrounded": lambda arg: _gold(False),
}


def _gold(grounded: bool) -> RewardModel:
    from embodied_rft.dna.learned import CriterionGold

    return CriterionGold(grounded)


LLM_RMS = ("naive_llm", "dna_llm", "dna_feedback_llm")
# learned tiny models (dna/learned.py), scored by stage rm_eval_tiny
TINY_RMS = ("direct_tiny", "criterion_tiny", "criterion_tiny_ungrounded")


def make_rm(spec: str, key: str = "dna.eval.rms", llm: Callable[[str], RewardModel] | None = None) -> RewardModel:
    """``gt``, ``planner``, ``biased:0.5``, ``dna_llm`` ... -> the reward model (ConfigError naming ``key``
    otherwise); ``llm(method)`` builds an LLM reward model (``dna/llm.py``)."""
    name, _, arg = spec.partition(":")
    if name in LLM_RMS:
        if llm is None:
            raise ConfigError(f"{key}: {spec!r} needs an LLM backend (dna.llm)")
        return llm(name.removesuffix("_llm"))
    if name not in RMS:
        known = sorted([*RMS, *LLM_RMS, *TINY_RMS])
        raise ConfigError(f"{key}: {spec!r} is not one of {known} (with :<arg> where it takes one)")
    try:
        return RMS[name](arg or None)
    except ValueError as exc:
        raise ConfigError(f"{key}: {spec!r}: {exc}") from None
