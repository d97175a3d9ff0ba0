"""Which way the success term pushes reflection, per kind of training state (docs/regrpo.md §8).

GRPO compares the answers of one group, all to the same state. So the success term pushes reflection up on a kind
of state when, within groups that neither all succeed nor all fail, the answers that reflect succeed more often
than those that do not; it pushes it down when they succeed less. ReGRPO's cost η·C acts on top of that, and in a
group where every answer succeeds it is the only difference.

Input: a model folder, decomposed samples (JSONL: the GRPO prompts, e.g. ``decompose``'s train file with the RoT
engine on) and the episodes they come from (the simulator rebuilds each state). Per state, G answers sampled as the
GRPO rollouts sample them (the fast sampler, a temperature, a new-token cap), each marked whether it reflects
(:func:`text.reflection_tokens` > 0) and whether its plan, executed from the state, reaches the goal
(:class:`execute.Executor`, the ``regrpo`` reward's executed success). Kinds of state: ``first`` (no history),
``clean`` (the last action executed on the expert's path: a decomposed step, not a recovery sample), ``silent``
(a recovery sample whose near-miss executed: a RoT GroundingDrift state, where a reflection is needed) and
``failed`` (the last action was invalid).

Output (:func:`tally`), per kind: states, answers, the share that reflect, groups per band (``all_success``,
``mixed``, ``all_failure``), the mixed groups' success rate of reflecting and of non-reflecting answers, and the
all-success groups where some but not all answers reflect (where the cost is the only difference).

``python -m embodied_rft.regrpo.groups --model DIR --samples FILE --episodes FILE --out FILE`` writes it
atomically. A diagnostic: no stage or check reads it.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.atomic import write_json_atomic
from ..data.jsonl import read_jsonl
from .steps import STATE_KINDS, load_policy, model_digest, state_kind
from .text import reflection_tokens

log = logging.getLogger(__name__)


def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def tally(kinds: Sequence[str], groups: Sequence[Sequence[tuple[bool, bool]]]) -> dict[str, Any]:
    """Per kind of state, from each state's answers as (reflects, succeeds) pairs (module docstring)."""
    out: dict[str, Any] = {}
    for kind, group in zip(kinds, groups, strict=True):
        d = out.setdefault(
            kind,
            {
                "states": 0,
                "answers": 0,
                "reflecting": 0,
                "bands": dict.fromkeys(("all_success", "mixed", "all_failure"), 0),
                "mixed_reflecting": [0, 0],  # [successes, answers] of the mixed groups' reflecting answers
                "mixed_plain": [0, 0],  # and of their answers without a reflection
                "all_success_cost_only": 0,
            },
        )
        refl = [r for r, _ in group]
        succ = [s for _, s in group]
        d["states"] += 1
        d["answers"] += len(group)
        d["reflecting"] += sum(refl)
        band = "all_success" if all(succ) else "all_failure" if not any(succ) else "mixed"
        d["bands"][band] += 1
        if band == "mixed":
            for r, s in group:
                counts = d["mixed_reflecting" if r else "mixed_plain"]
                counts[0] += s
                counts[1] += 1
        elif band == "all_success" and 0 < sum(refl) < len(refl):
            d["all_success_cost_only"] += 1
    for d in out.values():
        d["reflecting_share"] = _rate(d["reflecting"], d["answers"])
        d["mixed_success_reflecting"] = _rate(*d["mixed_reflecting"])
        d["mixed_success_plain"] = _rate(*d["mixed_plain"])
    return {k: out[k] for k in STATE_KINDS if k in out}


def pick(samples: Sequence[dict], per_kind: int, seed: int) -> list[dict]:
    """At most ``per_kind`` states of each kind (a fixed-seed draw), in the samples' order."""
    idx: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        idx.setdefault(state_kind(s, f"sample {i}"), []).append(i)
    keep: set[int] = set()
    for ids in idx.values():
        keep.update(random.Random(seed).sample(ids, min(per_kind, len(ids))) if per_kind else ids)
    return [s for i, s in enumerate(samples) if i in keep]


def measure(
    model_dir: str | Path,
    samples: Sequence[dict],
    executor: Any,
    *,
    group_size: int = 8,
    temperature: float = 0.7,
    max_new_tokens: int = 200,
    batch_size: int = 16,
    seed: int = 0,
) -> dict[str, Any]:
    """G sampled answers per state of ``samples``, scored by ``executor(text, sample) -> (success, progress)``."""
    from ..train.grpo.rollout import make_sampler, sample_groups

    kinds = [state_kind(s, f"sample {i}") for i, s in enumerate(samples)]
    model, io, prompts, count = load_policy(model_dir, samples)
    sampler = make_sampler(model, "fast")
    groups: list[list[tuple[bool, bool]]] = []
    for b in range(0, len(prompts), batch_size):
        rollout = sample_groups(
            model,
            io,
            prompts[b : b + batch_size],
            group_size,
            sampler=sampler,
            temperature=temperature,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            seed=seed * 1_000_003 + b,
        )
        for sample, responses in zip(samples[b : b + batch_size], rollout.responses, strict=True):
            texts = [io.decode(r) for r in responses]
            groups.append([(reflection_tokens(t, count) > 0, executor(t, sample)[0] == 1.0) for t in texts])
    return {
        "model": Path(model_dir).as_posix(),
        "model_digest": model_digest(model_dir),
        "group_size": group_size,
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
        "kinds": tally(kinds, groups),
    }


def main(argv: list[str] | None = None) -> int:
    from .execute import Executor

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--samples", required=True, help="decomposed samples (JSONL): the GRPO prompts")
    ap.add_argument("--episodes", required=True, help="the episodes they come from (JSONL), e.g. train.jsonl")
    ap.add_argument("--out", required=True)
    ap.add_argument("--per-kind", type=int, default=200, help="states per kind (fixed-seed draw); 0 = all")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.7, help="the tiny recipe's rollout temperature")
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    samples = pick(read_jsonl(args.samples), args.per_kind, args.seed)
    episodes = {e["episode_id"]: e for e in read_jsonl(args.episodes)}
    missing = sorted({str(s.get("episode_id")) for s in samples} - set(episodes))
    if missing:  # the executor would score those states 0 and the tally would read them as failures
        raise SystemExit(
            f"{args.samples}: {len(missing)} episode(s) not in {args.episodes}, e.g. {missing[0]!r}; "
            "pass the episodes file of the split the samples were decomposed from"
        )
    res = measure(
        args.model,
        samples,
        Executor(episodes),
        group_size=args.group_size,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    res["samples"] = Path(args.samples).as_posix()
    write_json_atomic(Path(args.out), res)
    log.info("%s: %s", args.model, json.dumps(res["kinds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
