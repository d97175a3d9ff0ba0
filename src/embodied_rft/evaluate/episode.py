"""One interactive episode, executed EmbodiedBench's way, and a lockstep driver for a batch of them.

Input: an episode record (``data/episodes/<split>.jsonl``), a :class:`~.policy.Policy`, the prompt config
(the same ``build_messages`` format as training) and the :class:`~.config.EpisodeLimits`. Output: one result
record per episode (see :meth:`EpisodeRun.result`).

The loop follows EB-ALFRED's evaluator (docs/facts.md §4.3; ``eb_alfred_evaluator.py``, ``vlm_planner.json_to_action``):

1. The planner gets the instruction, the action history (every executed action with its env feedback, failed
   ones included) and the current observation, and answers a plan.
2. Only the ``action_id`` of each step is executed, in order, until an action fails (then the planner is
   asked again), the task succeeds, or the step budget runs out (a plan is cut to the steps left).
3. The episode ends on success, after ``max_env_steps`` environment steps (valid or not), after
   ``max_invalid_actions`` invalid actions, on an empty plan (EB stops there), or after
   ``max_planner_calls`` planner calls (ours; never binding under EB's rules).

What counts as an invalid action, as in EB: a failed environment step; a response from which no plan can be
read (**a parse failure: one invalid action, no environment step**, counted in ``parse_failures`` too); a plan
whose first action id is outside the action space (one invalid action, no step). An out-of-range id later in
a plan cuts the plan there. Departures: responses are read with the project's tolerant parser
(``data.response.parse_response``: code fences, surrounding prose) where EB calls ``json.loads``, the same
parser the reward uses; a plan step whose ``action_id`` is not an integer makes the whole response a parse
failure, as it raises inside EB's ``json_to_action``.

Two behaviour counts follow every failed action (docs/vegas.md §5): whether the next executed action repeats its
id (``actions``, aggregated as the repeat-after-failure rate), and whether the next planner call recovers:
``recovery_calls`` counts the planner calls that come right after a failed action, ``recovered_valid`` those
whose first action executes, ``recovered_correct`` those whose first action the world oracle
(``world/oracle.py``) labels correct. A call after a failure that yields no executable first action (unreadable,
empty, out of range) is a call that did not recover.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..data.prompt import PromptConfig, build_messages
from ..data.response import parse_response
from .config import EpisodeLimits
from .policy import PlanContext, Policy

log = logging.getLogger(__name__)


def read_plan(response: str, n_actions: int) -> tuple[str, list[int]]:
    """(status, action ids) of a response, EB's ``json_to_action`` rules.

    status: ``ok`` (ids to execute, cut before the first out-of-range id), ``empty`` (an empty plan),
    ``out_of_range`` (the first id is outside ``[0, n_actions)``), ``unparseable`` (no plan can be read).
    """
    obj = parse_response(response)
    if not isinstance(obj, dict):
        return "unparseable", []
    plan = obj.get("executable_plan")
    if not isinstance(plan, list):
        return "unparseable", []
    if not plan:
        return "empty", []
    ids = []
    for step in plan:
        aid = step.get("action_id") if isinstance(step, dict) else None
        if isinstance(aid, bool) or not isinstance(aid, int):
            return "unparseable", []
        ids.append(aid)
    for i, aid in enumerate(ids):
        if not 0 <= aid < n_actions:
            return ("out_of_range", []) if i == 0 else ("ok", ids[:i])
    return "ok", ids


class EpisodeRun:
    """The state of one episode between planner calls: :meth:`context`/:meth:`messages` -> the policy ->
    :meth:`apply`, until :attr:`done`."""

    def __init__(self, episode: dict, prompt_cfg: PromptConfig, limits: EpisodeLimits) -> None:
        from ..world import Simulator

        self.episode = episode
        self.prompt_cfg = prompt_cfg
        self.limits = limits
        self.sim = Simulator.from_episode(episode)
        self.space = self.sim.actions
        self.scene_types = sorted({o["type"] for o in episode["scene"]["objects"]})
        self.history: list[dict] = []  # prompt history: {"action_id", "action_name", "feedback"}
        self.executed: list[tuple[int, str, bool]] = []
        self.env_steps = 0
        self.invalid_actions = 0
        self.parse_failures = 0
        self.out_of_range = 0
        self.planner_calls = 0
        self.response_chars: list[int] = []
        self.response_tokens: list[int] = []
        # the next planner call after a failed action: counted, and whether its first action executes / is correct
        self._after_failure = False
        self.recovery_calls = 0
        self.recovered_valid = 0
        self.recovered_correct = 0
        self._oracle = None
        self.end_reason: str | None = None
        self._t0 = time.perf_counter()

    @property
    def done(self) -> bool:
        return self.end_reason is not None

    def messages(self) -> list[dict]:
        obs = self.sim.observe_text()
        return build_messages(
            self.prompt_cfg, self.episode["instruction"], self.history, obs, self.space, self.scene_types
        )

    def image(self) -> Any:
        return self.sim.render_image() if self.prompt_cfg.observation == "image" else None

    def context(self) -> PlanContext:
        return PlanContext(self.episode, self.space, list(self.executed), self.planner_calls)

    def apply(self, response: str, completion_tokens: int | None = None) -> None:
        """Execute one planner response (see the module docstring for the rules)."""
        if self.done:
            raise RuntimeError(f"episode {self.episode['episode_id']}: apply() after it ended ({self.end_reason})")
        self.planner_calls += 1
        self.response_chars.append(len(response))
        if completion_tokens is not None:
            self.response_tokens.append(int(completion_tokens))
        status, ids = read_plan(response, len(self.space))
        if self._after_failure:
            self._after_failure = False
            self.recovery_calls += 1
            if status == "ok":
                judgement = self.oracle().judge(self.sim, ids[0])
                self.recovered_valid += judgement.executes
                self.recovered_correct += judgement.label == "correct"
        if status == "empty":
            self.end_reason = "empty_plan"
            return
        if status in ("unparseable", "out_of_range"):
            self.invalid_actions += 1
            if status == "unparseable":
                self.parse_failures += 1
            else:
                self.out_of_range += 1
        else:
            for aid in ids[: self.limits.max_env_steps - self.env_steps]:
                res = self.sim.step(aid)
                name = self.space.name(aid)
                self.env_steps += 1
                self.executed.append((aid, name, bool(res.success)))
                self.history.append({"action_id": aid, "action_name": name, "feedback": res.feedback})
                if not res.success:
                    self.invalid_actions += 1
                if self.sim.is_success():
                    self.end_reason = "success"
                    return
                if not res.success:
                    self._after_failure = True
                    break  # replan with the failure in the history
        self._check_limits()

    def oracle(self):
        """The episode's world oracle (built on first use)."""
        if self._oracle is None:
            from ..world.oracle import WorldOracle

            self._oracle = WorldOracle(self.episode)
        return self._oracle

    def _check_limits(self) -> None:
        if self.env_steps >= self.limits.max_env_steps:
            self.end_reason = "max_env_steps"
        elif self.invalid_actions >= self.limits.max_invalid_actions:
            self.end_reason = "max_invalid_actions"
        elif self.planner_calls >= self.limits.max_planner_calls:
            self.end_reason = "max_planner_calls"

    def result(self) -> dict:
        ep = self.episode
        return {
            "episode_id": ep["episode_id"],
            "split": ep.get("split"),
            "subset": ep.get("subset", "base"),
            "task_type": ep["task_type"],
            "success": self.end_reason == "success",
            "progress": round(float(self.sim.progress()), 6),
            "end_reason": self.end_reason,
            "env_steps": self.env_steps,
            "invalid_actions": self.invalid_actions,
            "parse_failures": self.parse_failures,
            "out_of_range_plans": self.out_of_range,
            "planner_calls": self.planner_calls,
            "response_chars": self.response_chars,
            "response_tokens": self.response_tokens or None,
            "expert_plan_len": len(ep["expert_plan"]),
            "actions": [[aid, name, ok] for aid, name, ok in self.executed],
            "recovery_calls": self.recovery_calls,
            "recovered_valid": self.recovered_valid,
            "recovered_correct": self.recovered_correct,
            "elapsed_s": round(time.perf_counter() - self._t0, 4),
        }


def run_lockstep(
    episodes: Sequence[dict], policy: Policy, prompt_cfg: PromptConfig, limits: EpisodeLimits
) -> Iterator[dict]:
    """Run ``episodes`` together: each round asks the policy once for every unfinished episode (one
    generation batch), then executes each answer. Yields each episode's result as soon as it ends."""
    runs = [EpisodeRun(ep, prompt_cfg, limits) for ep in episodes]
    active = list(runs)
    while active:
        messages = [r.messages() for r in active]
        images = [r.image() for r in active] if prompt_cfg.observation == "image" else None
        contexts = [r.context() for r in active]
        responses = policy.plan(messages, images, contexts)
        if len(responses) != len(active):
            raise RuntimeError(f"policy returned {len(responses)} responses for {len(active)} prompts")
        tokens = getattr(policy, "last_completion_tokens", None)
        if tokens is None or len(tokens) != len(active):
            tokens = [None] * len(active)
        still = []
        for r, resp, tok in zip(active, responses, tokens, strict=True):
            r.apply(resp if isinstance(resp, str) else "", tok)
            if r.done:
                rec = r.result()
                if hasattr(policy, "episode_stats"):  # the ReGRPO trigger's counts (regrpo/trigger.py)
                    rec["reflection"] = policy.episode_stats(rec["episode_id"])
                yield rec
            else:
                still.append(r)
        active = still
