"""Batched generation backends: ``hf`` (transformers, CPU or one GPU), ``fast`` (the project's own sampler for
Qwen2/Llama text models) and ``vllm`` (vLLM engine, GPU).

``make_generator(model_dir, GenerationConfig(backend=...))`` loads a checkpoint; ``Generator.generate(batch,
images=None, max_new_tokens=, temperature=, top_p=, n=1, seed=)`` returns ``n`` response texts per chat
conversation (``complete`` adds token counts and finish reasons). Used by evaluation, the OpenAI-compatible
server and the benchmarks.
"""

from .base import (
    BACKENDS,
    Completion,
    Generator,
    backend_class,
    content_parts,
    make_generator,
    text_only,
)
from .config import GenerationConfig

__all__ = [
    "BACKENDS",
    "Completion",
    "GenerationConfig",
    "Generator",
    "backend_class",
    "content_parts",
    "make_generator",
    "text_only",
]
