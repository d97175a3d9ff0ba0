"""The generation backend interface and its registry.

Input: a batch of chat conversations (OpenAI/ChatML messages, ``[{"role", "content"}]``), optionally one image
(a ``PIL.Image``) or a list of images per conversation. Output: for each conversation ``n`` completions, as
text (:meth:`Generator.generate`) or with token counts and a finish reason (:meth:`Generator.complete`).

Backends are looked up by name in :data:`BACKENDS` (``hf`` = transformers, ``fast`` = the project's
sampler for Qwen2/Llama text models, ``vllm`` = vLLM) and imported
only when asked for, so the CPU default never imports vLLM. Images reach a conversation in one of three ways,
all normalised by :func:`content_parts`: an ``<image>`` placeholder in a text message (what
``data.prompt.build_messages`` writes for ``observation=image``), explicit ``{"type": "image"}`` content parts
(what the server builds from OpenAI ``image_url`` parts), or neither, in which case the images go in front of
the last user message's text, as EmbodiedBench sends them.
"""

from __future__ import annotations

import abc
import importlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..data.prompt import IMAGE_PLACEHOLDER
from .config import GenerationConfig

log = logging.getLogger(__name__)

# name -> "module:Class"; imported lazily so a missing optional backend costs nothing until used.
BACKENDS: dict[str, str] = {
    "hf": "embodied_rft.generation.hf:HFGenerator",
    "fast": "embodied_rft.generation.fast:FastGenerator",
    "vllm": "embodied_rft.generation.vllm_backend:VLLMGenerator",
}

Messages = Sequence[dict]
ImagesArg = Sequence[Any] | None  # per conversation: None, one PIL image, or a list of them


@dataclass(frozen=True)
class Completion:
    """One generated response."""

    text: str
    # tokens in the (templated) prompt, and in the response including its stop token
    prompt_tokens: int
    completion_tokens: int
    # "stop" (an end-of-sequence token ended it) | "length" (max_new_tokens reached), as OpenAI reports it
    finish_reason: Literal["stop", "length"]
    # the sampled tokens' summed log-probability under the sampling distribution (stop token included), when the
    # backend reports it (fast); None otherwise. Best-of-N breaks score ties with it (vegas/select.py). Not part
    # of equality: backends that agree on the tokens agree on the completion
    logprob: float | None = field(default=None, compare=False)


class GenerationCancelled(RuntimeError):
    """A generation stopped early because its ``should_stop`` callback said so."""


class Generator(abc.ABC):
    """A loaded model that turns chat conversations into responses.

    Subclasses implement :meth:`complete`; per-call arguments left as None fall back to the
    :class:`GenerationConfig` the generator was built with.
    """

    name: str = "base"
    supports_images: bool = False

    def __init__(self, cfg: GenerationConfig) -> None:
        self.cfg = cfg

    @classmethod
    @abc.abstractmethod
    def from_pretrained(cls, model_dir: str | Path, cfg: GenerationConfig) -> Generator:
        """Load the checkpoint in ``model_dir``."""

    @abc.abstractmethod
    def complete(
        self,
        batch: Sequence[Messages],
        images: ImagesArg = None,
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        n: int = 1,
        seed: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> list[list[Completion]]:
        """``n`` completions for each conversation of ``batch``, in input order. ``should_stop`` is polled
        while decoding (about once per generated token); when it returns True the call raises
        :class:`GenerationCancelled` (a server uses it for a client that left or a request past its time)."""

    def generate(
        self,
        batch: Sequence[Messages],
        images: ImagesArg = None,
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        n: int = 1,
        seed: int | None = None,
    ) -> list[list[str]]:
        """``n`` response texts for each conversation of ``batch``, in input order."""
        out = self.complete(
            batch, images, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, n=n, seed=seed
        )
        return [[c.text for c in cs] for cs in out]

    def close(self) -> None:  # noqa: B027 - a no-op by default; backends holding resources override it
        """Free the model (a no-op unless the backend holds external resources)."""

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- helpers shared by backends -------------------------------------------------------------
    def _resolve(
        self, max_new_tokens: int | None, temperature: float | None, top_p: float | None, seed: int | None, n: int
    ) -> tuple[int, float, float, int]:
        mnt = self.cfg.max_new_tokens if max_new_tokens is None else int(max_new_tokens)
        temp = self.cfg.temperature if temperature is None else float(temperature)
        tp = self.cfg.top_p if top_p is None else float(top_p)
        sd = self.cfg.seed if seed is None else int(seed)
        if mnt < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {mnt}")
        if temp < 0:
            raise ValueError(f"temperature must be >= 0, got {temp}")
        if not 0.0 < tp <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {tp}")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        return mnt, temp, tp, sd


def per_conversation_images(batch: Sequence[Messages], images: ImagesArg) -> list[list[Any]]:
    """``images`` as one list per conversation (empty when it has none)."""
    if images is None:
        return [[] for _ in batch]
    if len(images) != len(batch):
        raise ValueError(f"images: expected one entry per conversation ({len(batch)}), got {len(images)}")
    out = []
    for im in images:
        if im is None:
            out.append([])
        elif isinstance(im, (list, tuple)):
            out.append(list(im))
        else:
            out.append([im])
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def content_parts(messages: Messages, images: list[Any]) -> tuple[list[dict], list[Any]]:
    """Messages with list-of-parts content where images belong, and the images in prompt order.

    Explicit ``{"type": "image", "image": PIL}`` parts keep their images; each ``<image>`` placeholder takes
    the next image of ``images``; images left over go in front of the last user message. Raises ValueError
    when there are more placeholders than images.
    """
    pending = list(images)
    ordered: list[Any] = []
    out: list[dict] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for p in content:
                if p.get("type") == "image":
                    img = p.get("image")
                    if img is None:
                        if not pending:
                            raise ValueError("an image part has no image and none were passed")
                        img = pending.pop(0)
                    ordered.append(img)
                    parts.append({"type": "image"})
                else:
                    parts.append({"type": "text", "text": p.get("text", "")})
            out.append({"role": m["role"], "content": parts})
        elif isinstance(content, str) and IMAGE_PLACEHOLDER in content:
            pieces = content.split(IMAGE_PLACEHOLDER)
            parts = []
            for i, piece in enumerate(pieces):
                if i > 0:
                    if not pending:
                        raise ValueError(
                            f"message has {len(pieces) - 1} {IMAGE_PLACEHOLDER} placeholders but fewer images"
                        )
                    ordered.append(pending.pop(0))
                    parts.append({"type": "image"})
                if piece:
                    parts.append({"type": "text", "text": piece})
            out.append({"role": m["role"], "content": parts})
        else:
            out.append({"role": m["role"], "content": [{"type": "text", "text": _text_of(content)}]})
    if pending:
        users = [i for i, m in enumerate(out) if m["role"] == "user"]
        if not users:
            raise ValueError("images were passed but the conversation has no user message")
        last = out[users[-1]]
        last["content"] = [{"type": "image"} for _ in pending] + last["content"]
        ordered.extend(pending)
    return out, ordered


def text_only(messages: Messages) -> list[dict]:
    """Messages with string content (parts joined); raises ValueError if any part is an image."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image" for p in content):
            raise ValueError("this model has no image processor: image content parts cannot be used")
        out.append({"role": m["role"], "content": _text_of(content)})
    return out


def backend_class(name: str) -> type[Generator]:
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ValueError(f"generation.backend: unknown backend {name!r}; choose one of {sorted(BACKENDS)}") from None
    mod, cls = target.split(":")
    return getattr(importlib.import_module(mod), cls)


def make_generator(model_dir: str | Path, cfg: GenerationConfig) -> Generator:
    """Load the checkpoint in ``model_dir`` with the backend ``cfg.backend`` names."""
    return backend_class(cfg.backend).from_pretrained(model_dir, cfg)
