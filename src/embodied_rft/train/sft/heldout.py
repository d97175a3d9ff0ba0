"""The held-out format check SFT reports: does the model answer held-out prompts with an EB response?

Inputs: a model and its tokenizer/processor, and held-out prompts from a JSONL file in either shape the
pipeline writes: SFT chat records (``{"messages": [..., assistant], "images": [...]}``; the final assistant
turn is dropped) or decomposed samples (``{"prompt": [system, user], "image": "images/x.png" | null}``).
Output: the format part of the shared held-out metrics (:mod:`embodied_rft.scoring`): ``samples``,
``json_valid_rate`` (greedy answers that parse as a JSON object, with the project's one tolerant parser),
``format_rate`` (the object carries all four EB keys), ``avg_response_tokens``, ``truncated_rate``, and an
``example`` answer.

This is a cheap progress signal for SFT, not the paper's metric (success rate in the simulator, measured
by the evaluate stage).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rft.data.jsonl import DataError, iter_jsonl, require
from embodied_rft.scoring import score_response, summarize
from embodied_rft.train.sft.data import open_image

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValPrompt:
    messages: list[dict]
    images: list[Path]


def read_val_prompts(path: str | Path, limit: int) -> list[ValPrompt]:
    """The first ``limit`` held-out prompts of ``path`` (SFT records or decomposed samples)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: held-out data file not found")
    out: list[ValPrompt] = []
    for line_no, rec in iter_jsonl(path):
        if len(out) >= limit:
            break
        where = f"{path}:{line_no}"
        if "messages" in rec:
            msgs = require(rec, "messages", list, where)
            if msgs and isinstance(msgs[-1], dict) and msgs[-1].get("role") == "assistant":
                msgs = msgs[:-1]
            rels = rec.get("images") or []
        elif "prompt" in rec:
            msgs = require(rec, "prompt", list, where)
            rels = [rec["image"]] if rec.get("image") else []
        else:
            raise DataError(f"{where}: expected a 'messages' (SFT record) or 'prompt' (decomposed sample) field")
        if not msgs or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs):
            raise DataError(f"{where}: the prompt must be a non-empty list of {{role, content: str}} messages")
        images = [path.parent / r for r in rels]
        for im in images:
            if not im.is_file():
                raise DataError(f"{where}: image {im} not found")
        out.append(ValPrompt([{"role": m["role"], "content": m["content"]} for m in msgs], images))
    return out


def format_metrics(model: Any, tok: Any, prompts: list[ValPrompt], *, max_new_tokens: int, batch_size: int) -> dict:
    """Greedy answers to ``prompts`` and how many are EB responses (see the module docstring)."""
    from embodied_rft.generation.config import GenerationConfig
    from embodied_rft.generation.hf import HFGenerator

    if not prompts:
        return {"samples": 0}
    vision = hasattr(tok, "image_processor")
    tokenizer = getattr(tok, "tokenizer", tok)
    side = tokenizer.padding_side
    was_training = model.training
    gen = HFGenerator(
        model, tok, GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0, batch_size=batch_size)
    )
    try:
        images = [[open_image(p) for p in vp.images] if vision else None for vp in prompts]
        if not vision and any(vp.images for vp in prompts):
            log.info("held-out prompts carry images but the model is text-only: asking with text alone")
        out = gen.complete([vp.messages for vp in prompts], images if vision else None)
    finally:
        tokenizer.padding_side = side  # the generator left-pads; training collators expect their own side
        model.train(was_training)
    comps = [cs[0] for cs in out]
    rows = [score_response(c.text, tokens=c.completion_tokens, truncated=c.finish_reason == "length") for c in comps]
    return {**summarize(rows), "example": comps[0].text[:500]}
