"""Held-out check of the GRPO policy: greedy responses on val samples, scored with the training reward.

Inputs: the policy being trained (or the SFT model it starts from), its :class:`PolicyIO`, encoded val
prompts. Output: the shared held-out metrics (:mod:`embodied_rft.scoring`: ``reward_mean`` (max 1.5),
``exact_plan_rate``, ``prefix_accuracy`` (reported beside the reward because the format terms give ≈ 0.5 to any
valid JSON, docs/calibration.md §3.4), ``format_rate``, the reward terms, response tokens and the share cut at
the token cap) and ``per_prompt``: each prompt's ``[reward, accuracy_full]`` in prompt order. Run before and after GRPO, it makes "GRPO raised held-out reward over the SFT
model" (or not) visible in ``metrics/grpo.json``; :func:`paired_gain` compares the two runs prompt by prompt
(the same prompts, greedy), so a gain comes with its own uncertainty instead of a bare difference of means.

This is an offline one-shot check (plan vs. gold), not the interactive simulator evaluation of the
``evaluate`` stage; it uses the same prompt encoding as the rollouts so the numbers are comparable.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

from embodied_rft.core.stats import mcnemar_exact, paired, paired_diff_ci
from embodied_rft.reward import RewardConfig
from embodied_rft.scoring import score_response, summarize
from embodied_rft.train.grpo.rollout import EncodedPrompt, PolicyIO, sample_groups

log = logging.getLogger(__name__)


def greedy_responses(
    model: Any,
    io: PolicyIO,
    prompts: Sequence[EncodedPrompt],
    *,
    max_new_tokens: int,
    batch_size: int,
    device: Any = "cpu",
    sampler: Any = None,
) -> list[list[int]]:
    """Each prompt's greedy response (token ids, in prompt order), ``batch_size`` prompts per decode; ``sampler``
    (``rollout.make_sampler``) decodes with the fast sampler, token-identical to ``generate`` (None: ``generate``)."""
    out: list[list[int]] = []
    for s in range(0, len(prompts), batch_size):
        out += [
            resp
            for (resp,) in sample_groups(
                model,
                io,
                prompts[s : s + batch_size],
                1,
                sampler=sampler,
                temperature=0.0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                seed=0,
                device=device,
            ).responses
        ]
    return out


def evaluate_greedy(
    model: Any,
    io: PolicyIO,
    prompts: Sequence[EncodedPrompt],
    reward: RewardConfig,
    *,
    max_new_tokens: int,
    batch_size: int,
    device: Any,
    sampler: Any = None,
) -> dict:
    """Greedy held-out metrics (see module docstring) of :func:`greedy_responses`; an empty prompt list gives
    ``{"samples": 0}``."""
    if not prompts:
        return {"samples": 0}
    eos = set(io.eos_ids)
    resps = greedy_responses(
        model, io, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, device=device, sampler=sampler
    )
    rows = [
        score_response(io.decode(resp), p.label, reward, tokens=len(resp), truncated=not (resp and resp[-1] in eos))
        for p, resp in zip(prompts, resps, strict=True)
    ]
    out = summarize(rows)
    out["per_prompt"] = [[round(r["total"], 6), r["accuracy_full"]] for r in rows]
    return out


def paired_gain(
    before: Sequence[Sequence[float]], after: Sequence[Sequence[float]], *, resamples: int = 2000, seed: int = 0
) -> dict:
    """Prompt-by-prompt comparison of two greedy runs on the same held-out prompts (``per_prompt`` rows of
    :func:`evaluate_greedy`, same order).

    ``reward``: how many prompts scored higher / lower / the same after, the mean difference, its 95% paired
    bootstrap interval (``resamples`` draws of the prompts, fixed ``seed``) and the exact two-sided sign-test
    p-value of up vs down. ``accuracy_full``: the evaluate stage's paired comparison
    (:func:`embodied_rft.evaluate.aggregate.paired`, prompts for episodes: ``only_a`` solved exactly only before,
    ``only_b`` only after, the exact McNemar p-value) with the gain in exact-plan rate, ``mean_diff``, and its 95%
    interval for paired proportions, ``ci95`` (:func:`accuracy_full_gain`). A gain whose interval includes 0 is not a gain this sample can show."""
    if len(before) != len(after):
        raise ValueError(
            f"paired_gain: {len(before)} prompts before GRPO but {len(after)} after; they must be the same prompts"
        )
    if not before:
        raise ValueError("paired_gain: no held-out prompts to compare")
    d = [float(a[0]) - float(b[0]) for b, a in zip(before, after)]
    n = len(d)
    up = sum(1 for x in d if x > 1e-9)
    down = sum(1 for x in d if x < -1e-9)
    rng = random.Random(seed)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    lo, hi = means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]
    return {
        "n": n,
        "reward": {
            "up": up,
            "down": down,
            "same": n - up - down,
            "mean_diff": round(sum(d) / n, 6),
            "ci95": [round(lo, 6), round(hi, 6)],
            "p_sign": round(mcnemar_exact(down, up), 4),
        },
        "accuracy_full": accuracy_full_gain(
            paired(
                {str(i): bool(b[1]) for i, b in enumerate(before)}, {str(i): bool(a[1]) for i, a in enumerate(after)}
            )
        ),
    }


# what metrics/grpo.json shows of the held-out block, for either engine
HELDOUT_HEADLINE = {
    "before": {"samples": True, "reward_mean": True, "exact_plan_rate": True},
    "after": {"samples": True, "reward_mean": True, "exact_plan_rate": True},
    "paired": {
        "n": True,
        "reward": {"up": True, "down": True, "mean_diff": True, "ci95": True, "p_sign": True},
        "accuracy_full": {"only_a": True, "only_b": True, "p_mcnemar": True, "mean_diff": True, "ci95": True},
    },
}


def heldout_block(before: dict | None, after: dict | None, seed: int) -> dict | None:
    """``metrics/grpo.json``'s ``heldout``: both runs' means, the gain of each headline mean and, prompt by prompt,
    :func:`paired_gain`; None unless both checks scored prompts."""
    if not (before and after and before.get("samples")):
        return None
    out = {
        "before": heldout_means(before),
        "after": heldout_means(after),
        **{f"{k}_gain": round(after[k] - before[k], 6) for k in ("reward_mean", "exact_plan_rate", "format_rate")},
    }
    if "per_prompt" in before and "per_prompt" in after:
        out["paired"] = paired_gain(before["per_prompt"], after["per_prompt"], seed=seed)
    return out


def heldout_means(ev: dict) -> dict:
    """An :func:`evaluate_greedy` result without its per-prompt rows."""
    return {k: v for k, v in ev.items() if k != "per_prompt"}


def evaluate_checkpoint(
    policy_dir: Any,
    val_samples: Sequence[dict],
    cfg: Any,
    scorer: Callable[[Callable[[str], int]], Any],
    image_root: Any,
) -> dict:
    """The local engine's held-out check (:func:`evaluate_greedy` with ``grpo``'s eval settings) on a saved
    checkpoint: how the stage checks a model trained elsewhere (the OpenRLHF job) the same way it checks its own.
    ``scorer(count_tokens)`` returns the reward the engine would bind to this checkpoint's token counter."""
    import torch

    from embodied_rft.models import load_model
    from embodied_rft.train.grpo.rollout import PolicyIO, make_sampler

    if not val_samples:
        return {"samples": 0}
    model, tok = load_model(policy_dir, for_training=False)
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(auto if cfg.device == "auto" else cfg.device)
    model = model.to(device).eval()
    io = PolicyIO(tok, cfg.max_prompt_tokens, image_root)
    io.add_model_eos(model)
    bound = scorer(lambda text: len(io.tokenizer(text, add_special_tokens=False)["input_ids"]))
    prompts = [io.encode(s, i) for i, s in enumerate(val_samples)]
    with torch.no_grad():
        return evaluate_greedy(
            model,
            io,
            prompts,
            bound,
            max_new_tokens=cfg.eval_max_new_tokens or cfg.max_new_tokens,
            batch_size=cfg.eval_batch_size,
            device=device,
            sampler=make_sampler(model, cfg.sampler, cfg.sampler_max_rows),
        )


def accuracy_full_gain(pair: dict) -> dict:
    """The exact-plan comparison (:func:`embodied_rft.evaluate.aggregate.paired` of before vs after) with the
    gain as a fraction of the prompts, ``mean_diff``, and its 95% interval for paired proportions, ``ci95``."""
    n = pair["episodes"]
    lo, hi = paired_diff_ci(pair["only_a"], pair["only_b"], n)
    return {**pair, "mean_diff": round((pair["only_b"] - pair["only_a"]) / n, 6), "ci95": [round(lo, 6), round(hi, 6)]}


__all__ = [
    "HELDOUT_HEADLINE",
    "accuracy_full_gain",
    "evaluate_checkpoint",
    "evaluate_greedy",
    "greedy_responses",
    "heldout_block",
    "heldout_means",
    "paired_gain",
]
