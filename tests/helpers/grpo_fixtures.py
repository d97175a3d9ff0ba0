"""Test data and tiny policies for the GRPO tests (built once per test process).

* :func:`make_samples`: decomposed samples in the project's schema (compact EB prompt, JSON label) for a few
  pick-and-place tasks with real EB-ALFRED action ids, one sample per step.
* :func:`sft_policy`: a tiny Qwen2 (hidden 128, 2 layers) with a BPE tokenizer from ``embodied_rft.models``,
  briefly fitted on the gold responses so that sampling at temperature 1 gets some plans right and some
  wrong — the only regime in which GRPO has a gradient and the accuracy filter accepts groups. Built once
  (~10 s) and kept in ``.cache/test-fixtures``.
* :func:`vl_policy`: the same for the tiny Qwen2.5-VL (``tiny_vl``), with rendered frames, untrained.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from embodied_rft.core.integrity import seal_folder
from embodied_rft.data.prompt import PromptConfig, build_messages
from embodied_rft.data.response import format_response
from embodied_rft.schema import format_label
from embodied_rft.world.actions import PUT_DOWN, ActionSpace

TASKS = [
    ("Put a mug in the sink.", "Mug", "Sink"),
    ("Place an apple on the table.", "Apple", "DiningTable"),
    ("Put the book on the bed.", "Book", "Bed"),
    ("Move a cup to the counter.", "Cup", "CounterTop"),
]
SYSTEM = "Plan EB-ALFRED actions by id. Answer with the JSON plan."


def _prompt_cfg(image: str | None) -> PromptConfig:
    # the instruction once, first (the regime the fitted fixture policy was sized for)
    return PromptConfig(
        style="compact", action_list="extras", observation="image" if image else "text", instruction_at="start"
    )


def _plan(obj: str, recep: str) -> list[str]:
    return [f"find a {obj}", f"pick up the {obj}", f"find a {recep}", PUT_DOWN]


def make_samples(tasks=TASKS, image: str | None = None) -> list[dict]:
    """One decomposed sample per step of each task (the schema of data/decomposed/*.jsonl)."""
    space = ActionSpace()
    out = []
    for t, (instruction, obj, recep) in enumerate(tasks):
        pairs = [(space.id(n), n) for n in _plan(obj, recep)]
        history: list[dict] = []
        for n, (aid, name) in enumerate(pairs):
            obs = f"You see a {obj} and a {recep}." if image is None else None
            out.append(
                {
                    "sample_id": f"ep{t}:{n}",
                    "episode_id": f"ep{t}",
                    "step": n,
                    "num_steps": len(pairs),
                    "task_type": "pick_and_place_simple",
                    "subset": "base",
                    "instruction": instruction,
                    "history": [dict(h) for h in history],
                    "observation": obs or "",
                    "image": image,
                    "prompt": [
                        # a short system turn keeps the tiny CPU model's sequences short; the user turn is the
                        # project's own prompt builder's
                        {"role": "system", "content": SYSTEM},
                        build_messages(_prompt_cfg(image), instruction, history, obs, space)[1],
                    ],
                    "label": format_label(pairs[n:]),
                }
            )
            history.append({"action_id": aid, "action_name": name, "feedback": "Last action executed successfully."})
    return out


def gold_response(sample: dict, full: bool = False) -> str:
    """The gold remaining plan as a response: all four EB keys (``full``), or only ``executable_plan`` —
    half the tokens, and all that accuracy (hence C_x and the filter) looks at."""
    gold = json.loads(sample["label"])["gold"]
    if full:
        return format_response([tuple(p) for p in gold], language_plan="")
    return json.dumps({"executable_plan": [{"action_id": a, "action_name": n} for a, n in gold]})


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@functools.lru_cache(maxsize=1)
def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="grpo-fixtures-"))
    atexit.register(shutil.rmtree, root, True)
    return root


def _cache_dir() -> Path:
    """Fitted policies are kept across test runs in ``.cache/test-fixtures/<key>``; the key hashes this file
    and the torch/transformers versions, so a change to either rebuilds them."""
    import torch
    import transformers

    key = hashlib.sha256(
        Path(__file__).read_bytes() + torch.__version__.encode() + transformers.__version__.encode()
    ).hexdigest()[:12]
    base = Path(
        os.environ.get("EMBODIED_RFT_TEST_CACHE", Path(__file__).resolve().parents[2] / ".cache" / "test-fixtures")
    )
    return base / key


def _cached(name: str, build) -> Path:
    final = _cache_dir() / name
    if (final / "config.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=final.parent))
    build(tmp / "model")
    try:
        os.replace(tmp / "model", final)
    except OSError:  # another test process built it first
        pass
    shutil.rmtree(tmp, ignore_errors=True)
    return final


def _tiny_cfg(kind: str = "tiny"):
    from embodied_rft.models import ModelConfig, TextArch

    return ModelConfig(
        name=f"test_{kind}",
        kind=kind,
        vocab_size=700,
        text=TextArch(
            hidden_size=128,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=256,
            max_position_embeddings=1024,
        ),
        image_max_pixels=12544,
    )


def _corpus(samples: list[dict]) -> list[str]:
    texts = [m["content"] for s in samples for m in s["prompt"]]
    return texts + [gold_response(s) for s in samples]


def fit_on_gold(policy_dir: Path, samples: list[dict], steps: int, lr: float = 5e-3, seed: int = 0) -> None:
    """Teacher-force the gold responses (loss on response tokens) for ``steps`` full-batch AdamW steps, in
    place. One thread, so the result is the same on every run."""
    import torch

    from embodied_rft.models import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    try:
        model, tok = load_model(policy_dir, for_training=True)
        rows = []
        for s in samples:
            prompt = tok.apply_chat_template(s["prompt"], add_generation_prompt=True, tokenize=False)
            p = tok(prompt, add_special_tokens=False)["input_ids"]
            r = tok(gold_response(s) + "<|im_end|>", add_special_tokens=False)["input_ids"]
            rows.append((p, r))
        width = max(len(p) + len(r) for p, r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id)
        labels = torch.full((len(rows), width), -100)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (p, r) in enumerate(rows):
            ids[i, : len(p) + len(r)] = torch.tensor(p + r)
            labels[i, len(p) : len(p) + len(r)] = torch.tensor(r)
            attn[i, : len(p) + len(r)] = 1
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        for _ in range(steps):
            loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        model.save_pretrained(policy_dir)
        seal_folder(policy_dir)  # the folder was copied from a sealed base: seal what it holds now
    finally:
        torch.set_num_threads(threads)


def grpo_samples() -> list[dict]:
    """The prompts the GRPO tests train on: the four steps of one task."""
    return make_samples(TASKS[:1])


@functools.lru_cache(maxsize=1)
def sft_policy() -> Path:
    """A tiny Qwen2 (hidden 128, 2 layers, 0.4M parameters) fitted for 80 steps on :func:`grpo_samples`:
    at temperature 1 it gets 1-3 of 4 sampled plans exactly right per prompt (CPU, deterministic)."""
    from embodied_rft.models import build_base_model

    def build(out: Path) -> None:
        samples = grpo_samples()
        build_base_model(_tiny_cfg(), _corpus(samples), out)
        fit_on_gold(out, samples, 80)

    return _cached("sft", build)


@functools.lru_cache(maxsize=1)
def base_policy() -> Path:
    """The same tiny Qwen2, untrained."""
    from embodied_rft.models import build_base_model

    return _cached("base", lambda out: build_base_model(_tiny_cfg(), _corpus(grpo_samples()), out))


@functools.lru_cache(maxsize=1)
def vl_data() -> tuple[Path, Path]:
    """(tiny Qwen2.5-VL policy, samples file whose samples carry a rendered frame)."""
    from PIL import Image

    from embodied_rft.models import build_base_model

    root = _root() / "vl"
    img_dir = root / "data" / "images"
    img_dir.mkdir(parents=True)
    Image.new("RGB", (112, 112), (200, 120, 40)).save(img_dir / "frame.png")
    samples = make_samples(TASKS[:1], image="images/frame.png")
    path = write_jsonl(root / "data" / "train.jsonl", samples)
    policy = _cached("vl", lambda out: build_base_model(_tiny_cfg("tiny_vl"), _corpus(samples), out))
    return policy, path
