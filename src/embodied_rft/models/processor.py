"""Qwen2.5-VL processors that work without torchvision.

Input: a checkpoint folder (or an image processor and a tokenizer). Output: a processor that turns chat
messages with images into ``input_ids`` with image pad tokens, ``pixel_values`` and ``image_grid_thw``.

transformers' ``Qwen2_5_VLProcessor`` always wants a video processor, and every video processor needs
torchvision, which is not installable on this CPU machine. Images are all this project feeds the model, so
:class:`ImageOnlyQwen2_5_VLProcessor` is the stock processor minus the video attribute (same tokens, same
image handling, same chat template). :func:`load_processor` uses the stock ``AutoProcessor`` when it can
(GPU machines with torchvision) and falls back to the image-only processor otherwise.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from transformers import Qwen2_5_VLProcessor

from .tokenizer import forget_load_kwargs

log = logging.getLogger(__name__)


class ImageOnlyQwen2_5_VLProcessor(Qwen2_5_VLProcessor):
    """``Qwen2_5_VLProcessor`` without a video processor (no torchvision needed)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        # ProcessorMixin derives the sub-processor list from this signature: no video_processor here, so
        # none is looked up, checked or saved.
        super().__init__(
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=None,
            chat_template=chat_template,
            **kwargs,
        )


def _processor_class(path: Path) -> str | None:
    import json

    for name in ("processor_config.json", "preprocessor_config.json"):
        f = path / name
        if f.is_file():
            try:
                cls = json.loads(f.read_text()).get("processor_class")
            except (OSError, ValueError):
                continue
            if cls:
                return cls
    return None


def load_processor(path: str | Path, *, trust_remote_code: bool = False) -> Any:
    """The processor saved in ``path``: the stock one when its classes load, else the image-only one."""
    from transformers import AutoProcessor

    path = Path(path)
    if _processor_class(path) == ImageOnlyQwen2_5_VLProcessor.__name__:
        return forget_load_kwargs(ImageOnlyQwen2_5_VLProcessor.from_pretrained(path))
    try:
        return forget_load_kwargs(AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code))
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        # Without torchvision the stock processor cannot build its video processor; images still work.
        log.info("stock processor unavailable in %s (%s); using the image-only Qwen2.5-VL processor", path, exc)
        return forget_load_kwargs(ImageOnlyQwen2_5_VLProcessor.from_pretrained(path))
