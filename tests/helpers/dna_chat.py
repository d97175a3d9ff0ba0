"""A stand-in for an LLM answering D&A's reward-model prompts (no capable LLM runs here): it reads which stage a
prompt is (entity extractor, describer, assessor, naive) and the number of frames from the prompt itself, and
answers in the seed's JSON format with progress rising linearly to ``final``. ``faults`` maps a call number (0-based,
over all calls) to a broken answer, so a test can make an attempt fail on purpose. It exercises our side of the
contract for real: the prompts the pipeline builds, the parsing, retries, caching and the openai transport."""

from __future__ import annotations

import json
import re

from embodied_rft.teacher.base import Answer


def stage_of(prompt: str) -> str:
    if "expert in object recognition" in prompt:
        return "E"
    if "expert in scene understanding" in prompt:
        return "D"
    if "Scene descriptions:" in prompt:
        return "A"
    return "naive"


def frames_in(prompt: str) -> int:
    if stage_of(prompt) == "A":
        descs = re.search(r"Scene descriptions: (\{.*?\})\n", prompt, re.S)
        return len(json.loads(descs.group(1)))
    return len(re.findall(r"^Frame \d+:$", prompt, re.M))


def answer_text(prompt: str, final: float = 100.0, fence: bool = False) -> str:
    stage, n = stage_of(prompt), frames_in(prompt)
    if stage == "E":
        body = {"all_objects": ["Apple", "CounterTop"], "task_objects": ["Apple"]}
    elif stage == "D":
        body = {"descriptions": [f"the robot at step {i}" for i in range(n)]}
    else:
        values = [round(final * i / max(1, n - 1)) for i in range(n)]
        body = (
            {"progress": values}
            if stage == "naive"
            else {"completion state": "the apple on the counter", "progress": values}
        )
        if "failure" in prompt and '"feedback"' in prompt:
            body = {"failure": "none", "feedback": "none", **body}
    text = json.dumps(body)  # a bare object: the parser wraps it in a list, as the seed's does
    return f"```json\n{text}\n```" if fence else text


class ScriptedChat:
    """``ask(messages, index) -> Answer`` for :class:`embodied_rft.dna.llm.Chat`; every prompt is kept."""

    def __init__(self, final: float = 100.0, faults: dict[int, str] | None = None, fence: bool = False) -> None:
        self.final, self.faults, self.fence = final, dict(faults or {}), fence
        self.prompts: list[str] = []

    def __call__(self, messages: list[dict], index: int) -> Answer:
        prompt = messages[-1]["content"]
        n = len(self.prompts)
        self.prompts.append(prompt)
        text = self.faults.get(n, answer_text(prompt, self.final, self.fence))
        return Answer(text, tokens_in=len(prompt) // 4, tokens_out=len(text) // 4, finish_reason="stop")
