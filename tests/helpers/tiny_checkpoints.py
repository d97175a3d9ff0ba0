"""Tiny checkpoints and episodes shared by the generation, evaluation and server tests (built once per process).

* :func:`episodes`: held-out episodes from the symbolic world's generator (all six subsets).
* :func:`text_model`: an untrained tiny Qwen2 (1 layer, hidden 64, head width 64 — a head size vLLM's CPU
  attention supports) with a BPE tokenizer trained on the episodes' prompts, via ``embodied_rft.models``.
* :func:`fitted_model`: the same, fitted on the expert response to the first episode's first prompt, so
  greedy decoding reproduces a whole, executable plan: the model path of the harness can then succeed.
* :func:`vl_model`: a tiny Qwen2.5-VL (untrained) for the image code paths.

Imported as ``tests.helpers.tiny_checkpoints`` by the generation, evaluation, GRPO, reliability and server tests,
so the caches are shared within a test process.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from embodied_rft.core.integrity import seal_folder
from embodied_rft.data.prompt import PromptConfig, build_messages
from embodied_rft.data.response import format_response

# Compact prompt listing only the scene's extra actions: a few hundred tokens, so CPU tests stay fast.
PROMPT = PromptConfig(style="compact", action_list="extras")


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread: these models are tiny, and on a 2-core machine shared with other test
    processes two threads per process oversubscribe the cores (a fit took 32 s on 2 threads, 2.7 s on 1)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.lru_cache(maxsize=1)
def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="eval-fixtures-"))
    atexit.register(shutil.rmtree, root, True)
    return root


@functools.lru_cache(maxsize=4)
def episodes(split: str = "valid_seen", n: int = 12) -> tuple[dict, ...]:
    from embodied_rft.world.generator import GeneratorConfig, generate_episodes

    return tuple(generate_episodes(GeneratorConfig(seed=0), split, n))


def first_prompt(ep: dict, prompt_cfg: PromptConfig = PROMPT) -> list[dict]:
    from embodied_rft.world import Simulator

    sim = Simulator.from_episode(ep)
    types = sorted({o["type"] for o in ep["scene"]["objects"]})
    return build_messages(prompt_cfg, ep["instruction"], [], sim.observe_text(), sim.actions, types)


def expert_response(ep: dict) -> str:
    from embodied_rft.world import Simulator

    space = Simulator.from_episode(ep).actions
    return format_response([(space.id(n), n) for n in ep["expert_plan"]], language_plan="")


def _corpus() -> list[str]:
    eps = episodes()
    texts = []
    for ep in eps:
        texts += [m["content"] for m in first_prompt(ep)]
        texts.append(expert_response(ep))
    return texts


def _cfg(kind: str = "tiny"):
    from embodied_rft.models import ModelConfig, TextArch

    return ModelConfig(
        name=f"test_{kind}",
        kind=kind,
        vocab_size=800,
        text=TextArch(
            hidden_size=64,
            num_layers=1,
            num_heads=1,
            num_kv_heads=1,
            intermediate_size=128,
            max_position_embeddings=2048,
        ),
        image_max_pixels=12544,
    )


@functools.lru_cache(maxsize=1)
def text_model() -> Path:
    from embodied_rft.models import build_base_model

    return build_base_model(_cfg(), _corpus(), _root() / "text")


@functools.lru_cache(maxsize=1)
def fitted_model(steps: int = 80) -> Path:
    """A copy of :func:`text_model` trained to answer episode 0's expert plan to episode 0's first prompt."""
    import torch

    from embodied_rft.models import load_model

    out = _root() / "fitted"
    shutil.copytree(text_model(), out)
    ep = episodes()[0]
    torch.manual_seed(0)
    model, tok = load_model(out, for_training=True)
    prompt = tok.apply_chat_template(first_prompt(ep), add_generation_prompt=True, tokenize=False)
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    r = tok(expert_response(ep) + "<|im_end|>", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p + r])
    labels = torch.tensor([[-100] * len(p) + r])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with one_thread():
        for _ in range(steps):
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    model.save_pretrained(out)
    seal_folder(out)  # the folder was copied from a sealed base: seal what it holds now
    return out


@functools.lru_cache(maxsize=1)
def vl_model() -> Path:
    from embodied_rft.models import build_base_model

    return build_base_model(_cfg("tiny_vl"), _corpus(), _root() / "vl")


def solid_png(size: tuple[int, int] = (96, 96), color: tuple[int, int, int] = (200, 120, 40)) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()
