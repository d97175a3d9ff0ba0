"""The EB-ALFRED planning prompt: one builder for decomposition, distillation, GRPO and evaluation.

Inputs: the instruction, the action history (id, name, env feedback), the observation (text, or an image
for vision models) and the scene's :class:`~embodied_rft.world.actions.ActionSpace`.
Output: chat messages ``[system, user]`` (OpenAI / ChatML shape; ``[user]`` with ``system=false``).

Shape follows EmbodiedBench's EB-ALFRED prompt (docs/facts.md §4.2): a system part with the role, the action rules,
the action list and the output format; a user part with the instruction, the history as
``Step i, action id X, name, env feedback: ...`` and the current observation. Departures, all config:
- ``style=compact`` states the same rules and format in fewer words, so a CPU model's prompt stays short;
  ``style=eb`` is the long form for real models.
- ``action_list``: ``full`` = every scene action (EB's list: 162 global + extras); ``scene`` = only the
  actions whose object is in this scene; ``extras`` = only the scene's extra actions (ids >= 162) — the
  162 global ids are fixed, so a model trained on them needs only the per-scene additions; ``none`` = no
  list at all (a tiny CPU model learns the fixed global ids; scene extras are then unreachable — fine for
  the generated world, whose expert plans use only global actions, not for ALFRED scenes).
- ``style=compact`` also shortens the history: a successful step's feedback is written ``ok``.
- the observation is text (``observation=text``) — the symbolic world's rendering stands in for EB's
  egocentric frame — or an image placeholder the vision model fills (``observation=image``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..config import check
from ..world.actions import N_GLOBAL, ActionSpace, split_action

RESPONSE_KEYS = ("reasoning_and_reflection", "visual_state_description", "language_plan", "executable_plan")
IMAGE_PLACEHOLDER = "<image>"


@dataclass(frozen=True)
class PromptConfig:
    # wording of the rules/format: compact (short, for tiny CPU models) | eb (EmbodiedBench's long form)
    style: Literal["compact", "eb"] = "compact"
    # which actions are listed: full (EB: all 162 + scene extras) | scene (objects in this scene) |
    # extras (ids >= 162 only) | none (no list; the model knows the fixed global ids)
    action_list: Literal["full", "scene", "extras", "none"] = "full"
    # observation modality: text (symbolic rendering) | image (rendered frame, for vision models; EB/paper use images)
    observation: Literal["text", "image"] = "text"
    # keep at most this many most recent history steps in the prompt (EB keeps all; 0 = all)
    max_history: int = 0
    # include the system part (role, rules, action list, output format; EB: yes). false drops it: a model
    # trained from scratch learns all of it from the data, at a cheaper CPU step (docs/experiments.md)
    system: bool = True
    # where the user part states the instruction: start (before the history) | end (after the observation,
    # right before the answer) | both (EB: "## Now the human instruction is: ..." first, then "to achieve the
    # human instruction: '...'" at the end)
    instruction_at: Literal["start", "end", "both"] = "both"

    def __post_init__(self) -> None:
        check(self.max_history >= 0, "prompt.max_history", f"must be >= 0 (0 = keep all), got {self.max_history}")
        check(
            self.instruction_at in ("start", "end", "both"),
            "prompt.instruction_at",
            f"must be one of start, end, both; got {self.instruction_at!r}",
        )


_RULES_EB = """## Action Descriptions and Validity Rules
- Find: navigate to the named object or receptacle. Valid whenever it is in the scene.
- Pick up: pick the named object. Valid only if the robot is next to it, holds nothing, and it is not inside a closed receptacle.
- Put down: put the held object into the receptacle found last. Valid only if holding an object and the receptacle can take it (open it first if it opens).
- Drop: drop the held object without placing it anywhere in particular.
- Open / Close: open or close the named receptacle. Valid only if next to it and it is closed / open.
- Turn on / Turn off: switch the named appliance. Valid only if next to it and it is off / on.
- Slice: slice the named object. Valid only if next to it and holding a knife or butter knife.
An object is cleaned when a faucet is turned on while it lies in a sink, heated when a microwave is turned on with it inside, and cooled when it is inside a closed fridge."""

_RULES_COMPACT = """Rules: find X before acting on X; pick up needs an empty hand and an open container; put down places the held object in the last found receptacle; slice needs a knife in hand; clean = in sink then turn on faucet; heat = in microwave then turn on; cool = in fridge then close."""

_FORMAT_EB = """## Guidelines
1. Output a plan of at most 20 actions; never an empty plan.
2. Always find an object before interacting with it.
3. Each step's action id must match its action name in the list.
4. If an action failed, reflect on the env feedback and replan from the current state.
Answer with one JSON object with the keys "reasoning_and_reflection", "visual_state_description", "language_plan" and "executable_plan" (a list of {"action_id": int, "action_name": str})."""

_FORMAT_COMPACT = """Answer with JSON: reasoning_and_reflection, visual_state_description, language_plan, executable_plan [{"action_id", "action_name"}]."""


def listed_actions(space: ActionSpace, mode: str, scene_types: Iterable[str] = ()) -> list[tuple[int, str]]:
    """The (id, name) pairs the prompt lists for ``mode`` (see :class:`PromptConfig`)."""
    if mode == "full":
        return list(enumerate(space.names))
    if mode == "none":
        return []
    if mode == "extras":
        return [(i, n) for i, n in enumerate(space.names) if i >= N_GLOBAL]
    types = set(scene_types)
    out = []
    for i, n in enumerate(space.names):
        _, target = split_action(n)
        if target is None or target.split("_")[0] in types:
            out.append((i, n))
    return out


def system_prompt(cfg: PromptConfig, space: ActionSpace, scene_types: Iterable[str] = ()) -> str:
    acts = listed_actions(space, cfg.action_list, scene_types)
    if cfg.style == "eb":
        head = (
            "## You are a robot operating in a home. Given a task, you must accomplish it using the defined "
            "set of actions below.\n\n" + _RULES_EB
        )
        listing = f"## The available action ids (0 ~ {len(space) - 1}) and action names are: " + ", ".join(
            f"action id {i}: {n}" for i, n in acts
        )
        return f"{head}\n\n{listing}.\n\n{_FORMAT_EB}"
    head = "You are a home robot. Plan EB-ALFRED actions by id." + "\n" + _RULES_COMPACT
    if cfg.action_list == "none":
        listing = "Use EB-ALFRED's global action ids 0-161."
    elif cfg.action_list == "extras":
        listing = "Global action ids 0-161 as trained." + (
            " Scene actions: " + "; ".join(f"{i} {n}" for i, n in acts) if acts else ""
        )
    else:
        listing = "Actions: " + "; ".join(f"{i} {n}" for i, n in acts)
    return f"{head}\n{listing}\n{_FORMAT_COMPACT}"


SUCCESS_FEEDBACK = "Last action executed successfully."


def format_history(history: Sequence[dict], max_history: int = 0, compact: bool = False) -> str:
    if not history:
        return "none"
    start = max(0, len(history) - max_history) if max_history else 0
    lines = []
    for i in range(start, len(history)):
        h = history[i]
        if compact:
            fb = "ok" if h["feedback"] == SUCCESS_FEEDBACK else h["feedback"]
            lines.append(f"{i + 1}. {h['action_id']} {h['action_name']}: {fb}")
        else:
            lines.append(f"Step {i + 1}, action id {h['action_id']}, {h['action_name']}, env feedback: {h['feedback']}")
    return "\n".join(lines)


def user_prompt(cfg: PromptConfig, instruction: str, history: Sequence[dict], observation: str | None) -> str:
    obs = IMAGE_PLACEHOLDER if cfg.observation == "image" else (observation or "")
    first = cfg.instruction_at in ("start", "both")
    last = cfg.instruction_at in ("end", "both")
    if cfg.style == "eb":
        head = f"## Now the human instruction is: {instruction}\n" if first else ""
        goal = f", to achieve the human instruction: '{instruction}'," if last else ","
        return (
            f"{head}## The action history:\n{format_history(history, cfg.max_history)}\n"
            f"## Current observation: {obs}\n"
            f"Considering the history and the observation{goal} plan the remaining actions."
        )
    head = f"Task: {instruction}\n" if first else ""
    tail = f"Task: {instruction}\n" if last else ""
    return (
        f"{head}History:\n{format_history(history, cfg.max_history, compact=True)}\n"
        f"Observation: {obs}\n{tail}Plan the remaining actions."
    )


def build_messages(
    cfg: PromptConfig,
    instruction: str,
    history: Sequence[dict],
    observation: str | None,
    space: ActionSpace,
    scene_types: Iterable[str] = (),
) -> list[dict]:
    user = {"role": "user", "content": user_prompt(cfg, instruction, history, observation)}
    if not cfg.system:
        return [user]
    return [{"role": "system", "content": system_prompt(cfg, space, scene_types)}, user]
