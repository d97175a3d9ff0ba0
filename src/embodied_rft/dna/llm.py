"""LLM reward models with D&A's prompts and rules: ``naive_llm``, ``dna_llm`` and ``dna_feedback_llm``.

The seed's pipeline (memmelma/dna, ``dna/classes/main.py``), with the frames as the simulator's text observations:

1. **E**, the entity extractor, sees the instruction and every key frame and lists ``all_objects`` (and
   ``task_objects``, asked for and dropped, as the seed does): the describer gets all scene objects, not the task's.
   Once read, a sample's objects are reused by its retries.
2. **D**, the describer, sees the key frames and E's objects — never the instruction — and writes one description
   per frame.
3. **A**, the assessor, sees the instruction and the descriptions (``{"0": ..., "1": ...}``) and writes a
   ``completion state`` (an explicit success criterion) first, then an integer ``progress`` 0–100 per frame;
   ``dna_feedback_llm`` adds ``failure`` and ``feedback``.

``naive_llm`` is the seed's naive baseline: one call on the instruction and the frames, ``progress`` only.

Rules (the seed's): code fences are stripped and a bare object is wrapped in a list, then ``json.loads(text)[0]``;
a progress list whose length differs from the number of key frames is a failed attempt, as is unreadable JSON or
a missing key; a failed attempt reruns the whole pipeline (E from its cache) up to ``dna.llm.retries`` attempts,
then :class:`RewardModelFailed` is raised naming the trajectory; values are divided by 100 (and clipped to [0, 1],
a departure: the seed does not clip; values outside are counted); the result is the mean over ``n_samples``
independent samples. Every call is answered through a :class:`Chat` whose answers are cached by request (the
messages hold the frames, so the key is the trajectory's), sample and attempt: a rerun asks nothing twice.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from embodied_rft.dna.frames import Trajectory
from embodied_rft.dna.rms import Assessment, RewardModel
from embodied_rft.teacher.base import Answer

METHODS = ("naive", "dna", "dna_feedback")


class RewardModelFailed(RuntimeError):
    """No valid answer after every attempt: the trajectory, the model and the last error."""


class ParseError(ValueError):
    """An answer that breaks the seed's format rules (unreadable JSON, a missing key, a wrong length)."""


@dataclass
class Chat:
    """Answers chat requests through ``ask(messages, index) -> Answer``, cached by (request, index): in this process
    (a bench asks the same request for each kind of a task's trajectories, e.g. a criterion from the instruction
    alone) and in ``cache`` (a :class:`~embodied_rft.teacher.cache.ResponseCache`, across runs, or None); ``model``
    names what answers."""

    ask_fn: Callable[[list[dict], int], Answer]
    model: str
    cache: Any = None
    sampling: dict = field(default_factory=dict)
    closer: Callable[[], None] | None = None
    hits: int = 0
    asked: int = 0
    memo: dict[str, Answer] = field(default_factory=dict, repr=False)

    def close(self) -> None:
        if self.closer is not None:
            self.closer()
        if self.cache is not None:
            self.cache.close()

    def ask(self, messages: list[dict], index: int) -> Answer:
        from embodied_rft.teacher.cache import cache_key

        key = cache_key({"model": self.model, "messages": messages, **self.sampling}, index)
        hit = self.memo.get(key)
        if hit is None and self.cache is not None:
            hit = self.cache.get(key)
        if hit is not None:
            self.hits += 1
            self.memo[key] = hit
            return hit
        answer = self.ask_fn(messages, index)
        self.asked += 1
        self.memo[key] = answer
        if self.cache is not None:
            self.cache.put(key, answer, model=self.model, sample_id="rm", sample_index=index)
        return answer


def _frames_block(frames: Sequence[str]) -> str:
    return "\n".join(f"Frame {i}:\n{text}" for i, text in enumerate(frames))


def entity_prompt(instruction: str, frames: Sequence[str]) -> str:
    return (
        "You are an expert in object recognition.\n"
        "The frames below are observations of a household robot's episode, one per frame.\n"
        "1. all_objects: list the objects that appear in the frames.\n"
        f'2. task_objects: are some of them relevant to the task "{instruction}"? List those (an empty list if '
        "none).\nGive every object one unique name. Answer with JSON only, in this form:\n"
        '[{"all_objects": ["..."], "task_objects": ["..."]}]\n\n' + _frames_block(frames)
    )


def describe_prompt(objects: Sequence[str], frames: Sequence[str]) -> str:
    return (
        "You are an expert in scene understanding. For every frame, describe in detail the robot and the state of "
        f"these objects: {json.dumps(list(objects))} — what the robot holds, where it is, what is open, switched "
        "on, inside or on top of what.\nDo not judge what the robot is trying to accomplish: it is imperfect. "
        "Describe the scene objectively.\n"
        f"Respond with exactly {len(frames)} descriptions, one string per frame, as JSON only:\n"
        '[{"descriptions": ["..."]}]\n\n' + _frames_block(frames)
    )


_RULES = (
    "1. The task's wording fixes which objects count (their kind, look and name); the descriptions are the only "
    "evidence. Do not rename scene objects to match the task.\n"
    "2. Tie each required object only to mentions of the same object; no substitutes. A conflicting or missing "
    "mention means the requirement is not met.\n"
    "3. Different wordings may be matched across frames only when they name the same physical object.\n"
)


def assess_prompt(instruction: str, descriptions: Sequence[str], feedback: bool) -> str:
    n = len(descriptions)
    extra = (
        "7. If the task is not fully completed, describe the failure.\n"
        "8. Say what the robot should have done differently.\n"
        if feedback
        else ""
    )
    schema = (
        '[{"failure": "...", "feedback": "...", "completion state": "...", "progress": [0, ...]}]'
        if feedback
        else '[{"completion state": "...", "progress": [0, ...]}]'
    )
    descs = json.dumps({str(i): d for i, d in enumerate(descriptions)}, ensure_ascii=False)
    return (
        f'Task: "{instruction}"\nScene descriptions: {descs}\n\n' + _RULES + "4. If none of the required objects "
        'is present, give 0% progress for every frame and say so in "completion state". Otherwise first state '
        "precisely what the scene looks like when the task is fully and completely finished; reward partial "
        "progress when only some requirements are met.\n"
        "5. For each frame, reason about the % progress (0-100) toward that fully finished state.\n"
        "6. Progress need not increase: the robot can undo it.\n" + extra + f"Answer with JSON only, {n} progress "
        f"values:\n{schema}\nBefore you answer, check whether the task is really fully completed; if not, adjust "
        "the progress values."
    )


def naive_prompt(instruction: str, frames: Sequence[str]) -> str:
    return (
        f'Task: "{instruction}"\nThe frames below are observations of a household robot, one per frame.\n\n'
        + _RULES
        + "4. For each frame, reason about the % progress (0-100) toward the task being fully finished.\n"
        f'Answer with JSON only, {len(frames)} progress values:\n[{{"progress": [0, ...]}}]\n\n' + _frames_block(frames)
    )


_FENCE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$", re.IGNORECASE)


def parse_answer(text: str) -> dict:
    """The seed's reading: fences stripped, a bare object wrapped in a list, the first element (ParseError)."""
    body = _FENCE.sub("", text.strip())
    if body.startswith("{"):
        body = f"[{body}]"
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ParseError(f"not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(obj, list) or not obj or not isinstance(obj[0], dict):
        raise ParseError("not a list holding an object")
    return obj[0]


def _strings(obj: dict, key: str) -> list[str]:
    v = obj.get(key)
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ParseError(f"field {key!r} must be a list of strings")
    return v


def progress_values(obj: dict, n: int) -> tuple[list[float], int]:
    """``progress`` / 100, clipped to [0, 1], and how many were outside; ParseError unless ``n`` numbers."""
    v = obj.get("progress")
    if not isinstance(v, list) or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in v):
        raise ParseError("field 'progress' must be a list of numbers")
    if len(v) != n:
        raise ParseError(f"field 'progress' has {len(v)} values for {n} frames")
    out = [x / 100.0 for x in v]
    return [min(1.0, max(0.0, x)) for x in out], sum(not 0.0 <= x <= 1.0 for x in out)


class LLMRewardModel(RewardModel):
    """``naive_llm`` / ``dna_llm`` / ``dna_feedback_llm`` on a :class:`Chat` (module docstring)."""

    def __init__(self, method: str, chat: Chat, *, retries: int = 3, n_samples: int = 1) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
        if retries < 1 or n_samples < 1:
            raise ValueError(f"retries and n_samples must be >= 1, got {retries}, {n_samples}")
        self.method, self.chat, self.retries, self.n_samples = method, chat, retries, n_samples
        self.name = f"{method}_llm"
        self.out_of_range = 0

    def _call(self, prompt: str, index: int, tally: dict) -> dict:
        a = self.chat.ask([{"role": "user", "content": prompt}], index)
        tally["calls"] += 1
        tally["tokens"] += a.tokens_in + a.tokens_out
        return parse_answer(a.text)

    def _attempt(
        self, frames: list[str], instruction: str, sample: int, attempt: int, tally: dict, memo: dict
    ) -> tuple:
        n = len(frames)
        index = 100 * sample + attempt
        if self.method == "naive":
            vals, bad = progress_values(self._call(naive_prompt(instruction, frames), index, tally), n)
            return vals, bad, None
        # E: once read, the sample's objects are reused by its later attempts (the seed's in-memory cache)
        if "objects" not in memo:
            memo["objects"] = _strings(self._call(entity_prompt(instruction, frames), index, tally), "all_objects")
        objects = memo["objects"]
        descriptions = _strings(self._call(describe_prompt(objects, frames), index, tally), "descriptions")
        obj = self._call(assess_prompt(instruction, descriptions, self.method == "dna_feedback"), index, tally)
        criterion = obj.get("completion state")
        if not isinstance(criterion, str):
            raise ParseError("field 'completion state' must be a string")
        vals, bad = progress_values(obj, n)
        return vals, bad, criterion

    def key_progress(self, traj: Trajectory, keys: Sequence[int], instruction: str) -> Assessment:
        frames = traj.frames(keys)
        tally = {"calls": 0, "tokens": 0}
        t0, failures, samples, criterion = time.perf_counter(), 0, [], None
        for s in range(self.n_samples):
            last: Exception | None = None
            memo: dict = {}
            for attempt in range(self.retries):
                try:
                    vals, bad, crit = self._attempt(frames, instruction, s, attempt, tally, memo)
                except ParseError as exc:
                    failures += 1
                    last = exc
                    continue
                self.out_of_range += bad
                samples.append(vals)
                criterion = criterion or crit
                break
            else:
                raise RewardModelFailed(
                    f"{self.name} ({self.chat.model}): episode {traj.episode.get('episode_id')}, "
                    f"{traj.n} actions: no valid answer after {self.retries} attempt(s): {last}"
                )
        mean = tuple(sum(v[i] for v in samples) / len(samples) for i in range(len(frames)))
        return Assessment(
            mean,
            calls=tally["calls"],
            tokens=tally["tokens"],
            seconds=time.perf_counter() - t0,
            parse_failures=failures,
            criterion=criterion,
        )


def local_chat(cfg: Any, cache: Any = None) -> Chat:
    """A :class:`Chat` answered by a local model (``dna.llm.model`` on ``dna.llm.generation``), sampled at
    ``dna.llm.temperature`` with the seed ``dna.llm.seed`` + the request's index."""
    from embodied_rft.generation.base import backend_class
    from embodied_rft.generation.config import GenerationConfig
    from embodied_rft.models import load_model

    model, tok = load_model(cfg.model, for_training=False)
    gen = backend_class(cfg.generation)(
        model, tok, GenerationConfig(backend=cfg.generation, max_new_tokens=cfg.max_new_tokens, batch_size=1)
    )

    def ask(messages: list[dict], index: int) -> Answer:
        c = gen.complete([messages], n=1, temperature=cfg.temperature, seed=cfg.seed + index)[0][0]
        return Answer(c.text, c.prompt_tokens, c.completion_tokens, c.finish_reason)

    sampling = {"temperature": cfg.temperature, "max_tokens": cfg.max_new_tokens, "seed": cfg.seed}
    return Chat(ask, f"local:{cfg.model.name}", cache, sampling, gen.close)


def openai_chat(teacher_cfg: Any, cache: Any = None, *, environ: dict[str, str] | None = None) -> Chat:
    """A :class:`Chat` answered by the teacher's OpenAI-compatible endpoint (``teacher.openai``), with the
    teacher's retries, pacing and budget (``teacher.retry``, ``teacher.budget``); the key never leaves the client."""
    from embodied_rft.teacher.distill import _Run
    from embodied_rft.teacher.openai_backend import OpenAITeacher

    t = OpenAITeacher(teacher_cfg.openai, environ=environ)
    run = _Run(teacher_cfg, t, None)

    def ask(messages: list[dict], index: int) -> Answer:
        from embodied_rft.teacher.cache import cache_key

        sample = {"sample_id": "rm", "prompt": messages, "image": None}
        return run.fetch(cache_key(t.request(sample, index), index), sample, index)

    o = teacher_cfg.openai
    sampling = {"temperature": o.temperature, "max_tokens": o.max_tokens, "seed": o.seed}
    return Chat(ask, f"openai:{o.model}", cache, sampling, t.close)
