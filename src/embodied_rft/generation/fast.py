"""The ``fast`` backend: the project's own sampler (:mod:`.sampler`) behind the :class:`Generator` interface.

Input: a checkpoint directory of a Qwen2 or Llama text model (the tiny default, SmolLM2), or a loaded
``(model, tokenizer)`` pair. Output: completions, exactly as the ``hf`` backend returns them: prompts are
templated, sorted by length and cut into batches of ``batch_size`` like ``hf`` does, greedy outputs are
token-identical to ``model.generate`` (tested), and sampling uses the same temperature and top-p with a
per-batch seed ``seed + batch index``. What differs is the cost: each prompt is prefilled once for its
``n`` samples, the K/V cache is written in place and finished rows leave the batch
(``bench/bench_sampler.py`` measures it against ``hf``).

Other model types (vision-language models, other families) raise a ValueError that names
``generation.backend``: they keep the ``hf`` and ``vllm`` backends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import Completion
from .config import GenerationConfig
from .decoder import SUPPORTED_MODEL_TYPES, DecoderLM, unsupported_reason
from .hf import HFGenerator
from .sampler import FastSampler


def checkpoint_supported(model_dir: str | Path) -> bool:
    """Whether the checkpoint in ``model_dir`` is a text model the fast backend runs (from its config.json)."""
    import json

    cfg_path = Path(model_dir) / "config.json"
    if not cfg_path.is_file():
        return False
    cfg = json.loads(cfg_path.read_text())
    return cfg.get("model_type") in SUPPORTED_MODEL_TYPES and not cfg.get("vision_config")


class FastGenerator(HFGenerator):
    name = "fast"

    def __init__(self, model: Any, tokenizer: Any, cfg: GenerationConfig) -> None:
        super().__init__(model, tokenizer, cfg)
        why = unsupported_reason(self.model)
        if why is not None or self.processor is not None:
            raise ValueError(f"generation.backend=fast: {why or 'vision-language models use hf or vllm'}")
        self.sampler = FastSampler(DecoderLM(self.model))

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, cfg: GenerationConfig) -> FastGenerator:
        from ..models import load_model

        model, tok = load_model(str(model_dir), for_training=False)
        return cls(model, tok, cfg)

    def _generate_batch(
        self, texts: list[str], images: list[Any], mnt: int, temp: float, tp: float, n: int, seed: int
    ) -> list[list[Completion]]:
        # the chat template already wrote any BOS token; don't let the tokenizer add another
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        out = self.sampler.sample(ids, n, max_new_tokens=mnt, temperature=temp, top_p=tp, eos_ids=self.eos_ids, seed=seed)
        comps: list[list[Completion]] = []
        for prompt, group in zip(ids, out.tokens, strict=True):
            cs = []
            for toks in group:
                stopped = bool(toks) and toks[-1] in self.eos_ids
                body = toks[:-1] if stopped else toks
                cs.append(
                    Completion(
                        text=self.tokenizer.decode(body, skip_special_tokens=True),
                        prompt_tokens=len(prompt),
                        completion_tokens=len(toks),
                        finish_reason="stop" if stopped else "length",
                    )
                )
            comps.append(cs)
        return comps
