"""The ``hf`` backend: batched generation with transformers (CPU, or one GPU).

Input: a checkpoint directory (loaded through ``embodied_rft.models.load_model``: a causal LM with its
tokenizer, or a vision-language model with its processor) or an already loaded ``(model, tokenizer)`` pair;
chat conversations, optionally with images. Output: completions (text, token counts, finish reason).

How: the chat template is applied to every conversation, conversations are sorted by prompt length and cut
into batches of ``batch_size`` (less padding per batch), each batch is left-padded and decoded with
``model.generate`` and its KV cache; results come back in input order. ``temperature == 0`` is greedy
decoding (``n`` greedy copies are decoded once and repeated); otherwise multinomial sampling with ``top_p``,
seeded with ``torch.manual_seed(seed + batch index)`` so a call is reproducible for a given batch layout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .base import (
    Completion,
    GenerationCancelled,
    Generator,
    ImagesArg,
    Messages,
    content_parts,
    per_conversation_images,
    text_only,
)
from .config import GenerationConfig

log = logging.getLogger(__name__)


def _is_processor(obj: Any) -> bool:
    """A multimodal processor (it carries an image processor and wraps a tokenizer)."""
    return hasattr(obj, "image_processor") and hasattr(obj, "tokenizer")


def _resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


class HFGenerator(Generator):
    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, cfg: GenerationConfig) -> None:
        import torch

        super().__init__(cfg)
        self.processor = tokenizer if _is_processor(tokenizer) else None
        self.tokenizer = tokenizer.tokenizer if self.processor is not None else tokenizer
        self.supports_images = self.processor is not None
        device = _resolve_device(cfg.device)
        if cfg.dtype != "auto":
            model = model.to(getattr(torch, cfg.dtype))
        elif device == "cpu" and next(model.parameters()).dtype in (torch.float16, torch.bfloat16):
            # half precision matmuls are slow (or unsupported) on most CPUs; float32 is the CPU default
            model = model.float()
        self.model = model.to(device).eval()
        self.device = device
        # Left padding: every row's last prompt token sits at the same position, where generation starts.
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_ids = self._eos_ids()
        if not self.eos_ids:
            raise ValueError(
                "the tokenizer and generation config name no end-of-sequence token; generation would never stop"
            )

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, cfg: GenerationConfig) -> HFGenerator:
        from ..models import load_model

        model, tok = load_model(str(model_dir), for_training=False)
        return cls(model, tok, cfg)

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        for v in (gen_eos, self.tokenizer.eos_token_id):
            if isinstance(v, int):
                ids.add(v)
            elif isinstance(v, (list, tuple)):
                ids.update(int(x) for x in v)
        return ids

    # ---- prompt building ------------------------------------------------------------------------
    def _prompt(self, messages: Messages, images: list[Any]) -> tuple[str, list[Any]]:
        # a final assistant message marked {"prefix": true} (the chat-prefix-completion convention) is a prefill: the
        # answer continues it (transformers' continue_final_message; the ReGRPO trigger opens a reflection this way)
        cont = bool(messages) and messages[-1].get("role") == "assistant" and messages[-1].get("prefix") is True
        kw = {"continue_final_message": True} if cont else {"add_generation_prompt": True}
        if self.processor is not None:
            msgs, ordered = content_parts(messages, images)
            text = self.processor.apply_chat_template(msgs, tokenize=False, **kw)
            return text, ordered
        if images:
            raise ValueError("this checkpoint has a tokenizer, not an image processor: it cannot take images")
        text = self.tokenizer.apply_chat_template(text_only(messages), tokenize=False, **kw)
        return text, []

    def _encode(self, texts: list[str], images: list[Any]) -> dict:
        if self.processor is not None:
            enc = self.processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        else:
            # the chat template already wrote any BOS token; don't let the tokenizer add another
            enc = self.tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=False)
        return {k: v.to(self.device) if hasattr(v, "to") else v for k, v in enc.items()}

    @property
    def context_length(self) -> int:
        """Positions the model was built for (prompt + completion), 0 when the config does not say."""
        cfg = self.model.config
        cfg = getattr(cfg, "text_config", None) or cfg
        return int(getattr(cfg, "max_position_embeddings", 0) or 0)

    def count_prompt_tokens(self, messages: Messages, images: list[Any] | None = None) -> int:
        """Tokens of one conversation's templated prompt, as :meth:`complete` would feed it."""
        text, ordered = self._prompt(messages, list(images or []))
        if self.processor is not None:
            return int(self._encode([text], ordered)["input_ids"].shape[1])
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # ---- generation -----------------------------------------------------------------------------
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
        mnt, temp, tp, sd = self._resolve(max_new_tokens, temperature, top_p, seed, n)
        per_images = per_conversation_images(batch, images)
        prompts = [self._prompt(m, im) for m, im in zip(batch, per_images, strict=True)]
        # sort by prompt length so each batch pads little; results are put back in input order
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i][0]))
        results: list[list[Completion] | None] = [None] * len(prompts)
        bs = self.cfg.batch_size
        for b, start in enumerate(range(0, len(order), bs)):
            idx = order[start : start + bs]
            texts = [prompts[i][0] for i in idx]
            imgs = [im for i in idx for im in prompts[i][1]]
            outs = self._generate_batch(texts, imgs, mnt, temp, tp, n, sd + b, should_stop)
            for i, cs in zip(idx, outs, strict=True):
                results[i] = cs
        return [r if r is not None else [] for r in results]

    def _generate_batch(
        self,
        texts: list[str],
        images: list[Any],
        mnt: int,
        temp: float,
        tp: float,
        n: int,
        seed: int,
        should_stop: Callable[[], bool] | None = None,
    ) -> list[list[Completion]]:
        import torch
        from transformers import GenerationConfig as HFGenConfig
        from transformers import StoppingCriteria, StoppingCriteriaList

        class _Cancel(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                if should_stop():
                    raise GenerationCancelled("generation cancelled")
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        enc = self._encode(texts, images)
        greedy = temp == 0.0
        reps = 1 if greedy else n
        gen_cfg = HFGenConfig(
            max_new_tokens=mnt,
            do_sample=not greedy,
            temperature=temp if not greedy else None,
            top_p=tp if not greedy else None,
            top_k=0,  # 0 = off: transformers fills None with 50, silently making top-p sampling top-k 50
            num_return_sequences=reps,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(self.eos_ids),
            use_cache=True,
        )
        if not greedy:
            torch.manual_seed(seed)
        with torch.inference_mode():
            stopping = StoppingCriteriaList([_Cancel()]) if should_stop is not None else None
            out = self.model.generate(**enc, generation_config=gen_cfg, stopping_criteria=stopping)
        prompt_len = enc["input_ids"].shape[1]
        prompt_tokens = enc["attention_mask"].sum(dim=1).tolist()
        new = out[:, prompt_len:].tolist()
        comps: list[list[Completion]] = []
        for row in range(len(texts)):
            cs = [self._completion(new[row * reps + r], int(prompt_tokens[row])) for r in range(reps)]
            comps.append(cs * n if greedy else cs)
        return comps

    def _completion(self, toks: list[int], prompt_tokens: int) -> Completion:
        """One response from its generated ids: text up to the first end token, token counts, finish reason."""
        stop = next((j for j, t in enumerate(toks) if t in self.eos_ids), None)
        body = toks if stop is None else toks[:stop]
        return Completion(
            text=self.tokenizer.decode(body, skip_special_tokens=True),
            prompt_tokens=prompt_tokens,
            completion_tokens=len(body) + (0 if stop is None else 1),
            finish_reason="stop" if stop is not None else "length",
        )
