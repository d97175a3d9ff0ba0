"""The GRPO stage's on-policy play (``train/grpo/onpolicy.py``): greedy training episodes, every state recorded.

Run: ``python bench/bench_play.py [--episodes 150] [--model models/sft]``.
Input: a checkpoint (default: the pipeline's SFT model ``models/sft`` when it exists — the realistic case, whose
answers execute and whose prompts grow with the history — else an untrained tiny Qwen2, whose answers never
parse) and training episodes (``data/episodes/train.jsonl`` when it exists, else generated). Output: a table.

Side by side in one process, one thread, on the same episodes and checkpoint:
- ``lockstep 48, padded prefill``: how the play ran before (batches of 48 episodes, each round's prompts
  prefilled as one left-padded batch, every prompt from its first token);
- ``all in play, buckets + prefix store``: the default now (every episode of the process in play at once, prompts
  prefilled in up to 4 length buckets, each from where its episode's previous prompt ends: generation/prefix.py).
``ratio`` = episodes/s against the lockstep row; ``same_states`` says whether both recorded identical states in the
same order (greedy answers must agree). ``run()`` returns the rows for a combined bench report.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _inputs(episodes: int, model: str | None, root: Path) -> tuple[Path, list[dict], str]:
    from embodied_rft.train.grpo.onpolicy import choose_episodes

    train = REPO / "data" / "episodes" / "train.jsonl"
    if train.exists():
        eps = choose_episodes(train, episodes, 0)
    else:
        from embodied_rft.world.generator import GeneratorConfig, generate_episodes

        eps = generate_episodes(GeneratorConfig(seed=0), "train", episodes)
    path = Path(model) if model else REPO / "models" / "sft"
    if (path / "config.json").exists():
        return path, eps, str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    from embodied_rft.models import ModelConfig, build_base_model
    from embodied_rft.world.generator import GeneratorConfig, generate_episodes

    corpus = [e["instruction"] for e in generate_episodes(GeneratorConfig(seed=0), "train", 200)]
    return build_base_model(ModelConfig(name="bench_tiny", kind="tiny"), corpus, root / "tiny"), eps, "untrained tiny"


def _play(model: Path, eps: list[dict], inflight: int, buckets: int, prefix: bool) -> tuple[float, str, int]:
    from omegaconf import OmegaConf

    from embodied_rft.config import build
    from embodied_rft.data.prompt import PromptConfig
    from embodied_rft.evaluate.config import EpisodeLimits
    from embodied_rft.evaluate.policy import ModelPolicy
    from embodied_rft.generation.base import make_generator
    from embodied_rft.generation.config import GenerationConfig
    from embodied_rft.train.grpo.onpolicy import collect_states

    params = OmegaConf.load(REPO / "params.yaml")
    cfg = GenerationConfig(
        backend="fast",
        max_new_tokens=int(params.grpo.max_new_tokens),
        batch_size=inflight,
        temperature=0.0,
        device="cpu",
        prefill_buckets=buckets,
        prefix_cache=prefix,
    )
    gen = make_generator(model, cfg)
    prompt_cfg = build(PromptConfig, OmegaConf.to_container(params.prompt, resolve=True), "prompt")
    t0 = time.perf_counter()
    samples, _ = collect_states(ModelPolicy(gen), eps, prompt_cfg, EpisodeLimits(), 48, inflight=inflight)
    dt = time.perf_counter() - t0
    digest = hashlib.sha256("\n".join(json.dumps(s, sort_keys=True) for s in samples).encode()).hexdigest()
    return dt, digest, len(samples)


def run(episodes: int = 150, model: str | None = None, threads: int = 1) -> list[dict]:
    import torch

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        path, eps, name = _inputs(episodes, model, Path(tmp))
        t_old, d_old, n_states = _play(path, eps, 48, 1, False)
        t_new, d_new, _ = _play(path, eps, len(eps), 4, True)
    same = d_old == d_new
    base = {"bench": "play", "unit": "episodes/s", "model": name, "states": n_states}
    return [
        {**base, "case": "lockstep 48, padded prefill", "value": len(eps) / t_old, "ratio": 1.0, "vs": "itself"},
        {
            **base,
            "case": "all in play, buckets + prefix store",
            "value": len(eps) / t_new,
            "ratio": t_old / t_new,
            "vs": f"lockstep 48 (same states: {same})",
            "same_states": same,
        },
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=150)
    ap.add_argument("--model", default=None, help="checkpoint (default: models/sft, else an untrained tiny model)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    rows = run(args.episodes, args.model, args.threads)
    for r in rows:
        print(
            f"{r['case']:<40} {r['value']:8.2f} {r['unit']}  ratio {r['ratio']:.2f}  ({r['model']}, {r['states']} states)"
        )
    return 0 if rows[-1]["same_states"] else 1


if __name__ == "__main__":
    sys.exit(main())
