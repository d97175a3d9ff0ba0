"""Collect a policy's on-policy states for ``decompose.rot.onpolicy_states`` (``regrpo/onpolicy.py``,
docs/regrpo.md §2).

``python -m embodied_rft.regrpo.collect --model DIR --episodes train.jsonl --n 200 --out states.jsonl [OVERRIDE ...]``
plays ``n`` training episodes (a fixed-seed sample) with the policy greedily under EB's rules, the states GRPO's
``grpo.onpolicy`` collects (``train/grpo/onpolicy.py``), and writes every planner call's state atomically with the
inputs' fingerprint; a rerun with the same inputs reuses the file. The prompt config is ``conf/``'s with the
overrides, as the decompose stage gets it. Kept apart from ``regrpo/onpolicy.py`` so the decompose stage does not
import the generation stack.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def collect(
    model_dir: str | Path,
    episodes_path: str | Path,
    n: int,
    out: str | Path,
    prompt_cfg: Any,
    *,
    seed: int = 0,
    max_new_tokens: int = 384,
    batch_size: int = 48,
) -> tuple[list[dict], dict[str, Any]]:
    """The states ``model_dir`` reaches in ``n`` training episodes (greedy, EB's limits), saved at ``out`` with
    their inputs' fingerprint (reused for the same inputs)."""
    from ..config import as_dict
    from ..core.digest import path_identity
    from ..evaluate.config import EpisodeLimits
    from ..train.grpo.checkpoint import fingerprint
    from ..train.grpo.onpolicy import choose_episodes, collect_with_model, load_or_collect

    limits = EpisodeLimits()
    key = fingerprint(
        {
            "onpolicy": [n, batch_size, max_new_tokens, seed],
            "prompt": as_dict(prompt_cfg),
            "limits": [limits.max_env_steps, limits.max_invalid_actions, limits.max_planner_calls],
            "policy": path_identity(model_dir),
            "episodes": path_identity(episodes_path),
        }
    )

    def run() -> tuple[list[dict], dict[str, Any]]:
        eps = choose_episodes(episodes_path, n, seed)
        return collect_with_model(model_dir, eps, prompt_cfg, limits, batch_size, max_new_tokens, seed)

    return load_or_collect(out, key, run)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the policy folder that plays (e.g. an SFT arm's models/sft)")
    ap.add_argument("--episodes", required=True, help="training episodes (JSONL)")
    ap.add_argument("--n", type=int, default=200, help="episodes played (a fixed-seed sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=384)
    ap.add_argument("--out", required=True)
    ap.add_argument("overrides", nargs="*", help="config overrides for the prompt (as the decompose stage gets them)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from ..config import build
    from ..data.prompt import PromptConfig
    from ..params import compose

    prompt_cfg = build(PromptConfig, compose("conf", args.overrides)["prompt"], "prompt")
    _, summary = collect(
        args.model, args.episodes, args.n, args.out, prompt_cfg, seed=args.seed, max_new_tokens=args.max_new_tokens
    )
    log.info("on-policy states: %s", json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["collect"]
