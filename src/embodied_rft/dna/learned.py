"""Learned tiny reward models: ``direct_tiny`` (frames -> progress) against ``criterion_tiny`` (instruction ->
an explicit criterion, then a rule on instruction-blind frames), and ``criterion_tiny_ungrounded`` (the same with a
describer that names look-alike classes instead of types). D&A's mechanism claim, on the tiny world.

- **direct_tiny**: a tiny model fine-tuned on optimal trajectories only (each train episode's expert plan and
  seeded prefixes of it): the instruction and the key frames' texts in, the planner's progress (0–100 per key
  frame) out, as ``{"progress": [...]}``. Nothing in its data tells a look-alike from the goal's object: on optimal
  trajectories the held object is always the right one.
- **criterion_tiny**: a tiny model fine-tuned to write the instruction's success criterion in the world's names
  (:func:`criterion_text`: the task type, the object, the receptacle, the lamp); a rule
  (:func:`criterion_progress`) then reads the key frames — which never hold the instruction — tracking what the
  agent holds, what was seen inside what, whether the held object is clean and which lamp is on where it stands,
  and scores the criterion's stages (holding the object; clean; in the receptacle / under the lamp).
- **criterion_tiny_ungrounded**: the describer writes a category for each thing instead of its type; the category
  is the thing's look-alike class (the connected parts of the scripted teacher's look-alike tables: Apple and
  Tomato are one, so are CounterTop and DiningTable), so the rule cannot tell a look-alike from the goal's.

A model's answer is read with D&A's rules (``dna/llm.py``): fences stripped, JSON, the right length; a failed
attempt is retried sampled, then the trajectory fails.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from embodied_rft.dna.frames import Trajectory, key_indices, replay
from embodied_rft.dna.llm import Chat, ParseError, parse_answer, progress_values
from embodied_rft.dna.rms import Assessment, RewardModel
from embodied_rft.teacher.errors import LOOKALIKE_OBJECTS, LOOKALIKE_RECEPTACLES
from embodied_rft.world.objects import SLICED_TYPE, TYPES
from embodied_rft.world.oracle import WorldOracle

_STAGES = {
    "pick_and_place_simple": ("held", "placed"),
    "pick_clean_then_place_in_recep": ("held", "clean", "placed"),
    "pick_heat_then_place_in_recep": ("held", "hot", "placed"),
    "pick_cool_then_place_in_recep": ("held", "cold", "placed"),
    "look_at_obj_in_light": ("held", "lit"),
}


# ---------------------------------------------------------------------- prompts and answers
def direct_prompt(instruction: str, frames: Sequence[str]) -> str:
    body = "\n".join(f"Frame {i}:\n{f}" for i, f in enumerate(frames))
    return f"Task: {instruction}\n{body}\nProgress of each frame toward the task, 0-100, as JSON."


def direct_answer(progress: Sequence[float]) -> str:
    return json.dumps({"progress": [round(100 * p) for p in progress]})


def criterion_prompt(instruction: str) -> str:
    return f"Task: {instruction}\nWrite the success criterion in the world's names, as JSON."


def criterion_text(episode: dict) -> str:
    """The success criterion of an episode's goal, in the world's type names (what criterion_tiny learns)."""
    g = episode["goal"]
    return json.dumps(
        {
            "task": episode["task_type"],
            "object": g["object_target"],
            "receptacle": g.get("parent_target"),
            "lamp": g.get("toggle_target"),
        }
    )


def parse_criterion(text: str) -> dict:
    """A criterion answer (ParseError unless a known task type and a known object type, with what it needs)."""
    obj = parse_answer(text)
    task, target = obj.get("task"), obj.get("object")
    if task not in _STAGES:
        raise ParseError(f"field 'task' must be one of {sorted(_STAGES)}, got {task!r}")
    if target not in TYPES:
        raise ParseError(f"field 'object' must be a type of the world, got {target!r}")
    need = "lamp" if task == "look_at_obj_in_light" else "receptacle"
    if obj.get(need) not in TYPES:
        raise ParseError(f"field {need!r} must be a type of the world for {task}, got {obj.get(need)!r}")
    return {"task": task, "object": target, "receptacle": obj.get("receptacle"), "lamp": obj.get("lamp")}


# ---------------------------------------------------------------------- the rule
@lru_cache(maxsize=1)
def lookalike_classes() -> dict[str, str]:
    """type -> its look-alike class's name (the members joined by '/'); a type without look-alikes is its own."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for table in (LOOKALIKE_OBJECTS, LOOKALIKE_RECEPTACLES):
        for a, b in table.items():
            parent[find(a)] = find(b)
    members: dict[str, list[str]] = {}
    for t in parent:
        members.setdefault(find(t), []).append(t)
    return {t: "/".join(sorted(ms)) for ms in members.values() for t in ms}


_TOKEN = re.compile(r"([A-Za-z]+)(?:_\d+)?(?: \(([^)]*)\))?")


def _things(text: str) -> list[tuple[str, set[str], str | None]]:
    """(type, states, container type) of the things a 'You see' / 'Around you' line names, nested brackets read."""
    out, stack = [], []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "[":
            stack.append(out[-1][0] if out else None)
            i += 1
        elif c == "]":
            stack and stack.pop()
            i += 1
        else:
            m = _TOKEN.match(text, i)
            if m and m.group(1) in TYPES:
                states = {s.strip() for s in (m.group(2) or "").split(",") if s.strip()}
                out.append((m.group(1), states, stack[-1] if stack else None))
                i = m.end()
            else:
                i += 1
    return out


def read_frame(text: str) -> dict:
    """What one frame text shows: the held thing (type, states), the things seen with their containers."""
    seen_line = next((ln for ln in text.splitlines() if ln.startswith(("You see:", "Around you:"))), "")
    hand_line = next((ln for ln in text.splitlines() if ln.startswith("In hand:")), "In hand: nothing.")
    held = _things(hand_line.removeprefix("In hand:"))
    return {"held": held[0][:2] if held else None, "seen": _things(seen_line.split(":", 1)[-1])}


def criterion_progress(frames: Sequence[str], crit: dict, grounded: bool = True) -> list[float]:
    """The criterion's progress at each frame (module docstring): the share of its stages reached, tracked over
    the frames (a thing seen inside a container stays there until it is seen elsewhere or held)."""
    cls = (lambda t: t) if grounded else (lambda t: lookalike_classes().get(t, t))
    target = crit["object"]
    names = {cls(target), cls(SLICED_TYPE.get(target, target))}
    recep = cls(crit["receptacle"]) if crit.get("receptacle") else None
    lamp = cls(crit["lamp"]) if crit.get("lamp") else None
    stages = _STAGES[crit["task"]]
    placed_in: str | None = None
    processed = False
    out = []
    for text in frames:
        f = read_frame(text)
        held = f["held"]
        holding = held is not None and cls(held[0]) in names
        if holding:
            placed_in = None
            processed = processed or bool({"clean", "hot", "cold"} & held[1])
        for t, states, container in f["seen"]:
            if cls(t) in names:
                placed_in = cls(container) if container else None
                processed = processed or bool({"clean", "hot", "cold"} & states)
        lit = lamp is not None and any(cls(t) == lamp and "on" in st for t, st, _ in f["seen"])
        reached = {
            "held": holding or placed_in is not None,
            "clean": processed,
            "hot": processed,
            "cold": processed,
            "placed": recep is not None and placed_in == recep and (processed or len(stages) == 2),
            "lit": holding and lit,
        }
        done = 0
        for s in stages:  # stages count in order: a later one without the earlier ones is not progress
            if not reached[s]:
                break
            done += 1
        out.append(done / len(stages))
    return out


# ---------------------------------------------------------------------- training data
def training_records(episodes: Sequence[dict], h: int, prefixes: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(direct records, criterion records) from ``episodes`` (SFT chat records): each episode's optimal trajectory
    and ``prefixes`` seeded prefixes of it, with the planner's progress at their key frames; one criterion each."""
    direct, criterion = [], []
    for ep in episodes:
        plan = list(ep["expert_plan"])
        rng = random.Random(f"{seed}:{ep['episode_id']}:prefixes")
        cuts = sorted({len(plan), *(rng.randint(1, len(plan) - 1) for _ in range(prefixes) if len(plan) > 1)})
        oracle = WorldOracle(ep)
        full = replay(ep, plan)
        for cut in cuts:
            keys = key_indices(cut, h)
            frames = [full.states[k].observe_text() for k in keys]
            progress = [oracle.progress(full.states[k]) for k in keys]
            direct.append(_chat(direct_prompt(ep["instruction"], frames), direct_answer(progress), ep, cut))
        criterion.append(_chat(criterion_prompt(ep["instruction"]), criterion_text(ep), ep, 0))
    return direct, criterion


def _chat(prompt: str, answer: str, ep: dict, cut: int) -> dict:
    return {
        "sample_id": f"{ep['episode_id']}:{cut}",
        "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}],
    }


# ---------------------------------------------------------------------- the reward models
class _Tiny(RewardModel):
    def __init__(self, chat: Chat, retries: int = 3) -> None:
        if retries < 1:
            raise ValueError(f"retries must be >= 1, got {retries}")
        self.chat, self.retries = chat, retries
        self.out_of_range = 0

    def _read(self, prompt: str, parse: Any, traj: Trajectory) -> tuple[Any, int, int, int]:
        calls = tokens = failures = 0
        last: Exception | None = None
        for attempt in range(self.retries):
            a = self.chat.ask([{"role": "user", "content": prompt}], attempt)
            calls, tokens = calls + 1, tokens + a.tokens_in + a.tokens_out
            try:
                return parse(a.text), calls, tokens, failures
            except ParseError as exc:
                failures, last = failures + 1, exc
        from embodied_rft.dna.llm import RewardModelFailed

        raise RewardModelFailed(
            f"{self.name} ({self.chat.model}): episode {traj.episode.get('episode_id')}, {traj.n} actions: "
            f"no valid answer after {self.retries} attempt(s): {last}"
        )


class DirectTiny(_Tiny):
    name = "direct_tiny"

    def key_progress(self, traj: Trajectory, keys: Sequence[int], instruction: str) -> Assessment:
        t0 = time.perf_counter()
        n = len(keys)
        (vals, bad), calls, tokens, failures = self._read(
            direct_prompt(instruction, traj.frames(keys)), lambda text: progress_values(parse_answer(text), n), traj
        )
        self.out_of_range += bad
        return Assessment(tuple(vals), calls, tokens, time.perf_counter() - t0, failures)


class CriterionTiny(_Tiny):
    def __init__(self, chat: Chat, retries: int = 3, grounded: bool = True) -> None:
        super().__init__(chat, retries)
        self.grounded = grounded
        self.name = "criterion_tiny" if grounded else "criterion_tiny_ungrounded"

    def key_progress(self, traj: Trajectory, keys: Sequence[int], instruction: str) -> Assessment:
        t0 = time.perf_counter()
        crit, calls, tokens, failures = self._read(criterion_prompt(instruction), parse_criterion, traj)
        vals = criterion_progress(traj.frames(keys), crit, self.grounded)
        return Assessment(tuple(vals), calls, tokens, time.perf_counter() - t0, failures, json.dumps(crit))


class CriterionGold(RewardModel):
    """The rule on the episode's own goal (privileged: no parser): what ``criterion_tiny`` reaches with a perfect
    criterion, grounded or not."""

    def __init__(self, grounded: bool = True) -> None:
        self.grounded = grounded
        self.name = "criterion_gold" if grounded else "criterion_gold_ungrounded"

    def key_progress(self, traj: Trajectory, keys: Sequence[int], instruction: str) -> Assessment:
        crit = parse_criterion(criterion_text(traj.episode))
        return Assessment(tuple(criterion_progress(traj.frames(keys), crit, self.grounded)))


def tiny_chat(model_dir: str, generation: str = "fast", max_new_tokens: int = 96, seed: int = 0) -> Chat:
    """A :class:`Chat` on a learned tiny model: greedy for a trajectory's first answer, sampled at T = 0.7 for its
    retries (``index`` = the attempt)."""
    from embodied_rft.generation.base import backend_class
    from embodied_rft.generation.config import GenerationConfig
    from embodied_rft.models import load_model
    from embodied_rft.teacher.base import Answer

    model, tok = load_model(model_dir, for_training=False)
    gen = backend_class(generation)(
        model, tok, GenerationConfig(backend=generation, max_new_tokens=max_new_tokens, batch_size=1)
    )

    def ask(messages: list[dict], index: int) -> Answer:
        t = 0.0 if index == 0 else 0.7
        c = gen.complete([messages], n=1, temperature=t, seed=seed + index)[0][0]
        return Answer(c.text, c.prompt_tokens, c.completion_tokens, c.finish_reason)

    return Chat(ask, f"tiny:{model_dir}", None, {"max_tokens": max_new_tokens}, gen.close)
