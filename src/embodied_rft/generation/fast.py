"""The ``fast`` backend: the project's own sampler (:mod:`.sampler`) behind the :class:`Generator` interface.

Input: a checkpoint directory of a Qwen2 or Llama text model (the tiny default, SmolLM2), or a loaded
``(model, tokenizer)`` pair. Output: completions, exactly as the ``hf`` backend returns them: prompts are
templated, sorted by length and cut into batches of ``batch_size`` like ``hf`` does, greedy outputs are
token-identical to ``model.generate`` (tested), and sampling uses the same temperature and top-p with a
per-batch seed ``seed + batch index``; each completion also carries its sampled tokens' summed log-prob. What
differs is the cost: each prompt is prefilled once for its ``n`` samples, the K/V cache is written in place and
finished rows leave the batch (``bench/bench_sampler.py`` measures it against ``hf``).

Other model types (vision-language models, other families) raise a ValueError that names
``generation.backend``: they keep the ``hf`` and ``vllm`` backends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .base import Completion
from .config import GenerationConfig
from .decoder import DecoderLM, config_unsupported_reason, unsupported_reason
from .hf import HFGenerator
from .prefix import PrefixCache
from .sampler import FastSampler


def checkpoint_supported(model_dir: str | Path) -> bool:
    """Whether the checkpoint in ``model_dir`` is a model the fast backend runs (judged from its config)."""
    from transformers import AutoConfig

    if not (Path(model_dir) / "config.json").is_file():
        return False
    return config_unsupported_reason(AutoConfig.from_pretrained(str(model_dir))) is None


class FastGenerator(HFGenerator):
    name = "fast"

    def __init__(self, model: Any, tokenizer: Any, cfg: GenerationConfig) -> None:
        super().__init__(model, tokenizer, cfg)
        why = unsupported_reason(self.model)
        if why is not None or self.processor is not None:
            raise ValueError(f"generation.backend=fast: {why or 'vision-language models use hf or vllm'}")
        self.sampler = FastSampler(DecoderLM(self.model), prefill_buckets=cfg.prefill_buckets)
        self.prefix = PrefixCache() if cfg.prefix_cache else None

    def complete(self, batch: Any, images: Any = None, **kw: Any) -> list[list[Completion]]:
        if self.prefix is not None:
            self.prefix.next_call()  # prompts can extend the previous call's
        return super().complete(batch, images, **kw)

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
        # the chat template already wrote any BOS token; don't let the tokenizer add another
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        out = self.sampler.sample(
            ids,
            n,
            max_new_tokens=mnt,
            temperature=temp,
            top_p=tp,
            eos_ids=self.eos_ids,
            seed=seed,
            should_stop=should_stop,
            prefix=self.prefix,
        )
        return [
            [
                dataclasses.replace(self._completion(t, len(prompt)), logprob=float(lp.sum()))
                for t, lp in zip(group, lps, strict=True)
            ]
            for prompt, group, lps in zip(ids, out.tokens, out.logprobs, strict=True)
        ]
