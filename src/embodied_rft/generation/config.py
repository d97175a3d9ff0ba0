"""The generation settings shared by evaluation, the server and benchmarks.

Input: the ``generation`` mapping of a stage's config (``evaluate.generation`` in ``conf/evaluate/``), turned
into a frozen :class:`GenerationConfig` by ``config.build``. Output: the object the backends in this package
take. The paper generates with vLLM inside OpenRLHF (max 4096 new tokens) and EmbodiedBench evaluates with
temperature 0 and at most 2048 new tokens; the CPU default here is much shorter because a tiny model's
answers are short and CPU decoding is slow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import check


@dataclass(frozen=True)
class GenerationConfig:
    # backend: hf (transformers, CPU or one GPU) | fast (the project's sampler for Qwen2/Llama text models:
    # one prefill per prompt, in-place K/V cache; greedy outputs identical to hf) | vllm (vLLM engine, GPU;
    # the paper's rollouts and eval)
    backend: Literal["hf", "fast", "vllm"] = "hf"
    # new-token limit per response (EmbodiedBench: 2048; paper's RL rollouts: 4096)
    max_new_tokens: int = 256
    # sampling temperature; 0 = greedy (EmbodiedBench evaluates greedily)
    temperature: float = 0.0
    # nucleus sampling mass; 1.0 = off (ignored when greedy)
    top_p: float = 1.0
    # prompts per forward batch (hf); vLLM schedules its own batches
    batch_size: int = 8
    # fast: a batch's prompts are prefilled in up to this many length buckets instead of all padded to the
    # longest (1 = one padded batch); the values agree up to float rounding, greedy answers agree (tested)
    prefill_buckets: int = 1
    # fast: reuse the keys/values of the previous call's prompts for a prompt that extends one of them
    # (generation/prefix.py: an episode's next planner prompt); for fixed weights, e.g. interactive play
    prefix_cache: bool = False
    # base seed of the sampler (torch.manual_seed for hf, SamplingParams.seed for vllm)
    seed: int = 0
    # weights dtype: auto (checkpoint's own; float32 on CPU for hf) | float32 | bfloat16 | float16
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # hf: device for the model; auto = cuda when available, else cpu
    device: str = "auto"
    # vllm: fraction of GPU memory the engine may take
    gpu_memory_utilization: float = 0.85
    # vllm: tensor-parallel GPUs per engine
    tensor_parallel_size: int = 1
    # vllm: context length the engine reserves (prompt + response); 0 = the model's own maximum
    max_model_len: int = 0
    # vllm: skip CUDA graph capture (faster start, slower decoding; useful for short evaluations and CPU)
    enforce_eager: bool = False

    def __post_init__(self) -> None:
        check(self.max_new_tokens >= 1, "max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        check(0.0 <= self.temperature <= 5.0, "temperature", f"must be in [0, 5] (0 = greedy), got {self.temperature}")
        check(0.0 < self.top_p <= 1.0, "top_p", f"must be in (0, 1], got {self.top_p}")
        check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        check(self.prefill_buckets >= 1, "prefill_buckets", f"must be >= 1, got {self.prefill_buckets}")
        check(
            0.0 < self.gpu_memory_utilization <= 1.0,
            "gpu_memory_utilization",
            f"must be in (0, 1], got {self.gpu_memory_utilization}",
        )
        check(self.tensor_parallel_size >= 1, "tensor_parallel_size", f"must be >= 1, got {self.tensor_parallel_size}")
        check(self.max_model_len >= 0, "max_model_len", f"must be >= 0 (0 = model maximum), got {self.max_model_len}")
        check(bool(self.device), "device", "must be auto, cpu, cuda or cuda:N")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
