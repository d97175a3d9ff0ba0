"""Reflection on held-out per-step calls: where a reflection is not needed (docs/regrpo.md §7).

In EB's interactive loop the planner is called at an episode's start, after a failed action, and when a plan ran
out without reaching the goal. So the loop's calls "after a successful action" are starts, which no arm here
reflects at, and plan-exhausted calls: every action executed and the goal is still not reached, a silent failure,
where a reflection is warranted (a GroundingDrift near-miss looks the same). The calls where a reflection is
plainly not needed are the expert's own states: the first step and each step after a successful action on the
expert's path. The decomposed held-out samples are exactly those (``decompose``'s val file; with the RoT engine
its recovery samples are in the train file only).

Input: a model folder and decomposed samples (JSONL). Output (:func:`measure`): per kind of call (``first``: no
history; ``after_success``: the last action executed; ``after_failure``: it was invalid) the calls, the greedy
answers that reflect, their reflection tokens in the model's tokenizer (:func:`text.reflection_tokens`: the span
from the first ErrorType/Evidence/FixPlan marker), tokens per call, the reflecting answers per ErrorType they name
(``named``), and answers cut at the token cap; per kind too (``plans``, :func:`plan_tally`) the answers whose plan
starts with the label's first action and, after a failure, those that start with the failed action again; plus the
model files' digest, so a finished measurement is reused only for the same weights (and only while it matches the
digest written with it). Greedy decoding with the fast
sampler, the GRPO stage's held-out check's (``train/grpo/heldout.greedy_responses``).

``python -m embodied_rft.regrpo.steps --model DIR --samples FILE --out FILE`` writes the result atomically
(the ReGRPO studies run it for every arm, ``regrpo/study.py`` ``steps``; their ``eta`` section reads it). With
``--rot-episodes EPISODES`` it first writes the RoT engine's near-misses on those held-out episodes to ``--samples``
(:func:`heldout_rot_samples`): how often a policy repeats a failure it did not make itself (docs/regrpo.md §8).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.atomic import write_json_atomic
from ..core.digest import file_digest, folder_digests, json_digest
from ..core.integrity import RECORD_FIELD, record_intact, seal_record
from ..data.decompose import is_recovery
from ..data.jsonl import read_jsonl
from ..schema import read_label
from .text import last_failed, reflection_span, reflection_tokens

log = logging.getLogger(__name__)

KINDS = ("first", "after_success", "after_failure")
STATE_KINDS = ("first", "clean", "silent", "failed")
_NAMED = re.compile(r"ErrorType:\s*([A-Za-z]+)")


def call_kind(sample: dict, where: str = "sample") -> str:
    """``first`` | ``after_success`` | ``after_failure`` of a decomposed sample, from its ``history``."""
    history = sample.get("history")
    if not isinstance(history, list):
        raise ValueError(f"{where}: field 'history' must be a list, got {type(history).__name__}")
    if not history:
        return "first"
    return "after_failure" if last_failed(history) else "after_success"


def state_kind(sample: dict, where: str = "sample") -> str:
    """:func:`call_kind` with the calls after an executed action split in two: ``clean`` (on the expert's path, or an
    on-policy state) and ``silent`` (a recovery sample whose near-miss executed: a RoT GroundingDrift state, where a
    reflection is needed); ``first`` and ``failed`` otherwise. One of :data:`STATE_KINDS`."""
    kind = call_kind(sample, where)
    if kind == "after_success":
        return "silent" if is_recovery(sample) else "clean"
    return "failed" if kind == "after_failure" else kind


def tally(
    kinds: Sequence[str], tokens: Sequence[int], truncated: Sequence[bool], types: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per kind: calls, reflecting answers, reflection tokens, tokens per call, reflection rate, truncated answers;
    with ``types`` (the ErrorType each answer names, "" for none) the reflecting answers per named type."""
    types = types if types is not None else [""] * len(kinds)
    if not len(kinds) == len(tokens) == len(truncated) == len(types):
        raise ValueError(
            f"tally: {len(kinds)} kinds, {len(tokens)} token counts, {len(truncated)} truncation flags, "
            f"{len(types)} error types"
        )
    out: dict[str, dict[str, Any]] = {}
    for k, t, cut, et in zip(kinds, tokens, truncated, types, strict=True):
        d = out.setdefault(k, {"calls": 0, "reflecting": 0, "reflection_tokens": 0, "truncated": 0, "named": {}})
        d["calls"] += 1
        d["reflecting"] += t > 0
        d["reflection_tokens"] += t
        d["truncated"] += bool(cut)
        if t > 0:
            d["named"][et or "none"] = d["named"].get(et or "none", 0) + 1
    return {k: with_rates(out[k]) for k in KINDS if k in out}


def plan_tally(kinds: Sequence[str], samples: Sequence[dict], firsts: Sequence[int | None]) -> dict[str, dict]:
    """Per kind: the answers whose plan starts with the label's first action (``first_correct``) and, after a
    failure, those that start with the failed action again (``repeat``), with their rates over the calls."""
    out: dict[str, dict[str, Any]] = {}
    for i, (k, s, first) in enumerate(zip(kinds, samples, firsts, strict=True)):
        d = out.setdefault(k, {"calls": 0, "first_correct": 0, "repeat": 0})
        gold, _ = read_label(s["label"], f"sample {i}")
        d["calls"] += 1
        d["first_correct"] += first is not None and bool(gold) and first == gold[0][0]
        d["repeat"] += k == "after_failure" and first == s["history"][-1]["action_id"]
    return {k: plan_rates(out[k]) for k in KINDS if k in out}


def plan_rates(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` (one kind's ``calls``, ``first_correct``, ``repeat``) with their rates over the calls (per seed here,
    pooled over seeds in ``regrpo/study.py``)."""
    d["first_correct_rate"] = round(d["first_correct"] / d["calls"], 4)
    d["repeat_rate"] = round(d["repeat"] / d["calls"], 4)
    return d


def first_action(response: str) -> int | None:
    """The first action id of a response's executable plan (None when none can be read)."""
    from ..evaluate.episode import read_plan

    _, ids = read_plan(response, sys.maxsize)
    return ids[0] if ids else None


def heldout_rot_samples(episodes_path: str | Path, prompt_cfg: Any, recovery: int = 2, seed: int = 0) -> list[dict]:
    """The RoT engine's near-miss samples (``regrpo/rot.py``, default mix) on held-out episodes: ``recovery`` per
    trajectory, nothing else. The engine's failures at the expert's steps, answered by a policy that never trained
    on these episodes (docs/regrpo.md §8: they do not need the failure read)."""
    from ..data.decompose import decompose_episodes
    from ..data.jsonl import iter_jsonl
    from .config import RotConfig
    from .rot import RotEngine

    eps = [rec for _, rec in iter_jsonl(episodes_path)]
    samples = decompose_episodes(
        eps, prompt_cfg, recovery=recovery, seed=seed, source=RotEngine(RotConfig(enabled=True))
    )
    return [s for s in samples if is_recovery(s)]


def named_type(response: str) -> str:
    """The ErrorType a response's reflection names ("" when it names none)."""
    m = _NAMED.search(reflection_span(response))
    return m.group(1) if m else ""


def with_rates(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` (one kind's ``calls``, ``reflecting``, ``reflection_tokens``) with its tokens per call and reflection
    rate set from those counts (per seed here, pooled over seeds in ``regrpo/study.py``)."""
    d["tokens_per_call"] = round(d["reflection_tokens"] / d["calls"], 4)
    d["reflection_rate"] = round(d["reflecting"] / d["calls"], 4)
    return d


def model_digest(model_dir: str | Path) -> str:
    """One digest of a model folder's files (weights, tokenizer, config)."""
    return json_digest(folder_digests(model_dir), 16)


def load_policy(model_dir: str | Path, samples: Sequence[dict]) -> tuple[Any, Any, list, Callable[[str], int]]:
    """The model at ``model_dir`` in fp32 for decoding, its :class:`PolicyIO`, ``samples`` encoded as prompts, and a
    counter of text tokens in its tokenizer (what the reflection cost counts)."""
    import torch

    from ..models.factory import load_model
    from ..train.grpo.rollout import PolicyIO

    model, tok = load_model(model_dir, for_training=False)
    model = model.to(torch.float32)
    io = PolicyIO(tok, max_prompt_tokens=4096)
    io.add_model_eos(model)

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    return model, io, [io.encode(s, i) for i, s in enumerate(samples)], count


def measure(
    model_dir: str | Path, samples: Sequence[dict], *, max_new_tokens: int = 512, batch_size: int = 16
) -> dict[str, Any]:
    """Greedy answers of the model at ``model_dir`` to ``samples``, tallied per kind of call (module docstring)."""
    from ..train.grpo.heldout import greedy_responses
    from ..train.grpo.rollout import make_sampler

    kinds = [call_kind(s, f"sample {i}") for i, s in enumerate(samples)]
    model, io, prompts, count = load_policy(model_dir, samples)
    eos = set(io.eos_ids)
    resps = greedy_responses(
        model, io, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, sampler=make_sampler(model, "fast")
    )
    texts = [io.decode(resp) for resp in resps]
    tokens = [reflection_tokens(text, count) for text in texts]
    truncated = [not (resp and resp[-1] in eos) for resp in resps]
    return {
        "model": Path(model_dir).as_posix(),
        "model_digest": model_digest(model_dir),
        "samples": len(samples),
        "max_new_tokens": max_new_tokens,
        "kinds": tally(kinds, tokens, truncated, [named_type(t) for t in texts]),
        "plans": plan_tally(kinds, samples, [first_action(t) for t in texts]),
    }


def run(model_dir: str | Path, samples_path: str | Path, out: str | Path, **kw: Any) -> dict[str, Any]:
    """:func:`measure` on the samples in ``samples_path``, written to ``out``; reused when ``out`` holds the same
    model digest and sample file."""
    out = Path(out)
    key = {"samples_digest": file_digest(samples_path)}
    if out.exists():
        old = json.loads(out.read_text("utf-8"))
        if old.get("model_digest") == model_digest(model_dir) and old.get("samples_digest") == key["samples_digest"]:
            if record_intact(old):
                return {k: v for k, v in old.items() if k != RECORD_FIELD}
            log.warning("%s: does not match the digest written with it (edited or damaged): measuring again", out)
    res = {**measure(model_dir, read_jsonl(samples_path), **kw), **key}
    write_json_atomic(out, seal_record(res))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--samples", required=True, help="decomposed samples (JSONL), e.g. the decompose stage's val file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument(
        "--rot-episodes",
        default=None,
        help="held-out episodes (JSONL): first write the RoT engine's near-miss samples on them (two per trajectory) "
        "to --samples, unless that file exists",
    )
    ap.add_argument("overrides", nargs="*", help="config overrides for the prompt of --rot-episodes' samples")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.rot_episodes and not Path(args.samples).exists():
        from ..config import build
        from ..core.atomic import write_jsonl_atomic
        from ..data.prompt import PromptConfig
        from ..params import compose

        prompt_cfg = build(PromptConfig, compose("conf", args.overrides)["prompt"], "prompt")
        write_jsonl_atomic(args.samples, heldout_rot_samples(args.rot_episodes, prompt_cfg))
    res = run(args.model, args.samples, args.out, max_new_tokens=args.max_new_tokens)
    log.info("%s: %s", args.model, json.dumps(res["kinds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
