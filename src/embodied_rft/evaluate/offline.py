"""Offline metrics: one greedy response per held-out decomposed sample, scored with the training reward.

Input: decomposed samples (``data/decomposed/val.jsonl``: ``prompt`` messages, ``label``, optional ``image``
relative to the samples' folder) and a generation backend, or already generated responses
(:func:`score_responses`). Output: the shared held-out metrics (:mod:`embodied_rft.scoring`: ``json_valid_rate``,
``format_rate``, ``reward_mean`` and its terms, ``prefix_accuracy``, ``exact_plan_rate``, token counts), overall
and per subset — the same names SFT's and GRPO's held-out checks report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..reward import RewardConfig
from ..scoring import score_response, summarize


def score_responses(
    samples: Sequence[dict],
    responses: Sequence[str],
    reward_cfg: RewardConfig,
    tokens: Sequence[int] | None = None,
    truncated: Sequence[bool] | None = None,
) -> dict:
    """The offline metrics of ``responses`` (aligned with ``samples``), overall and per subset."""
    if len(samples) != len(responses):
        raise ValueError(f"score_responses: {len(samples)} samples but {len(responses)} responses")
    by_subset: dict[str, list[dict]] = defaultdict(list)
    rows = []
    for i, (s, resp) in enumerate(zip(samples, responses, strict=True)):
        row = score_response(
            resp,
            s["label"],
            reward_cfg,
            tokens=None if tokens is None else tokens[i],
            truncated=None if truncated is None else truncated[i],
        )
        rows.append(row)
        by_subset[s.get("subset", "base")].append(row)
    return {**summarize(rows), "per_subset": {k: summarize(v) for k, v in sorted(by_subset.items())}}


def _load_image(root: Path, rel: str | None) -> Any:
    if not rel:
        return None
    from PIL import Image

    path = root / rel
    if not path.is_file():
        raise FileNotFoundError(f"decomposed sample image {path} not found (field 'image')")
    with Image.open(path) as im:
        return im.convert("RGB")


def offline_metrics(
    samples: Sequence[dict], generator: Any, reward_cfg: RewardConfig, image_root: str | Path | None = None
) -> dict:
    """Generate one response per sample with ``generator`` (its config decides greedy/sampling) and score."""
    if not samples:
        return {"samples": 0}
    images = None
    # images go only to a model that can see them; a text model reads the prompt's text observation
    if image_root is not None and getattr(generator, "supports_images", False) and any(s.get("image") for s in samples):
        root = Path(image_root)
        images = [_load_image(root, s.get("image")) for s in samples]
    outs = generator.complete([s["prompt"] for s in samples], images, n=1)
    responses = [cs[0].text for cs in outs]
    tokens = [cs[0].completion_tokens for cs in outs]
    truncated = [cs[0].finish_reason == "length" for cs in outs]
    return score_responses(samples, responses, reward_cfg, tokens, truncated)
