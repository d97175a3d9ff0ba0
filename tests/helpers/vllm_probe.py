"""Run the ``vllm`` backend in vLLM's own environment and print the completions as JSON (one line).

Usage (by ``tests/generation/test_vllm_backend.py``): ``<vllm venv python> tests/helpers/vllm_probe.py REQUEST.json``
with PYTHONPATH=src (a script: it imports nothing from tests/).
REQUEST: {"model": dir, "conversations": [[messages]], "images": [png path | null] | null, "n": int,
"temperature": float, "max_new_tokens": int}. vLLM spawns its engine processes, hence the ``__main__`` guard.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from PIL import Image

    from embodied_rft.generation import GenerationConfig, make_generator

    req = json.loads(open(sys.argv[1], encoding="utf-8").read())
    cfg = GenerationConfig(
        backend="vllm",
        max_new_tokens=req["max_new_tokens"],
        dtype="float32",
        enforce_eager=True,
        max_model_len=2048,
        gpu_memory_utilization=0.5,
        seed=0,
    )
    gen = make_generator(req["model"], cfg)
    images = req.get("images")
    if images is not None:
        images = [Image.open(p).convert("RGB") if p else None for p in images]
    outs = gen.complete(req["conversations"], images, n=req.get("n", 1), temperature=req.get("temperature", 0.0))
    print("RESULT " + json.dumps([[c.__dict__ for c in cs] for cs in outs]), flush=True)
    gen.close()


if __name__ == "__main__":
    main()
