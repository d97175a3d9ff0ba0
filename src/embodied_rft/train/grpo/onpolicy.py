"""On-policy GRPO prompts: the states the initial policy reaches when it plays training episodes.

An extension, off by default (``grpo.onpolicy.episodes: 0``); the paper's RFT prompts are the offline
decomposed expert trajectories only. Why it exists: interactive evaluation fails in states the expert never
visits -- after the policy's own wrong find, after a plan that ended with the wrong object in hand, after an
action repeated while it keeps failing -- and the offline prompts never show GRPO those states.

Input: the policy GRPO starts from (any :class:`~embodied_rft.evaluate.policy.Policy`; the stage passes the
checkpoint behind the ``hf`` backend, greedy), training episodes (``data/episodes/train.jsonl``), the prompt
config and EB's episode limits. Output: one decomposed-format sample per planner call -- the prompt exactly as
the interactive evaluation builds it, and a label whose gold plan is the symbolic planner's plan from that
state (``world.planner.plan_for``), so the paper's reward scores it unchanged. A state the planner cannot
finish from (an object sliced or moved past repair) yields no sample and is counted.

How: the episodes run with EB's execution rules (``evaluate.episode.EpisodeRun``), ``inflight`` of them at a time
per process, each round one generation call for every live episode, and an episode that ends replaced by the next;
every state is recorded before the policy answers, then the answer is executed. The states are sorted into the
order lockstep batches of ``batch_size`` episodes record them, so how many episodes are in play, and in how many
processes, changes the speed only. The stage's policy prefills each prompt from where its episode's previous
prompt ends (``generation/prefix.py``). The states are written atomically next to the run's checkpoints with the
inputs' fingerprint, so a resumed GRPO run reuses them.

Most states come right after a failed action, where the SFT policy rarely produces the planner's whole
remaining plan (C_x = 0), so the paper's filter rejects their groups: these prompts need
``grpo.filter.enabled: false`` (or a partial credit filter) to train on at all (docs/experiments.md, issue 23).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rft.config import check
from embodied_rft.core.atomic import write_json_atomic, write_jsonl_atomic
from embodied_rft.core.digest import sha256_file
from embodied_rft.data.decompose import sample_record
from embodied_rft.data.jsonl import DataError, iter_jsonl
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.progress import bar
from embodied_rft.world.actions import N_GLOBAL

log = logging.getLogger(__name__)

# sample ids of on-policy states end with ":call<planner call index>"
STATE_SUFFIX = ":call"


@dataclass(frozen=True)
class OnPolicyConfig:
    """The ``grpo.onpolicy`` config section."""

    # Training episodes the initial policy plays (greedy, EB's rules) to collect the states it reaches;
    # 0 = off (the paper: offline decomposed prompts only).
    episodes: int = 0
    # Share of the GRPO prompts taken from those states; the rest are decomposed prompts (1.0 = states only).
    fraction: float = 1.0
    # The states are recorded in the order lockstep batches of this many episodes give them (batch, planner
    # call, episode): part of the states' identity, since the order feeds the seeded prompt mix.
    batch_size: int = 48
    # Episodes in play at once per process, each replaced by the next as it ends (0 = batch_size). Speed only:
    # the states and their order do not depend on it, so it is not part of the states' cache key.
    inflight: int = 0
    # New-token cap of the policy's answers while collecting (0 = grpo.max_new_tokens).
    max_new_tokens: int = 0
    # Seed of the choice of episodes.
    seed: int = 0
    # Processes playing the episodes (1 = in the stage's process), each every workers-th episode and its share of the
    # cores; the states and their order do not depend on it, so it is not part of the states' cache key.
    workers: int = 1
    # Keep only the states right after a failed action (ReGRPO's on-policy failure states; docs/regrpo.md §5).
    failed_only: bool = False

    def __post_init__(self) -> None:
        check(self.episodes >= 0, "grpo.onpolicy.episodes", f"must be >= 0 (0 = off); got {self.episodes}")
        check(0.0 < self.fraction <= 1.0, "grpo.onpolicy.fraction", f"must be in (0, 1]; got {self.fraction}")
        check(self.batch_size >= 1, "grpo.onpolicy.batch_size", f"must be >= 1; got {self.batch_size}")
        check(self.max_new_tokens >= 0, "grpo.onpolicy.max_new_tokens", "must be >= 0 (0 = grpo.max_new_tokens)")
        check(self.inflight >= 0, "grpo.onpolicy.inflight", f"must be >= 0 (0 = batch_size); got {self.inflight}")
        check(self.workers >= 1, "grpo.onpolicy.workers", f"must be >= 1; got {self.workers}")


def state_sample(run: Any) -> dict | None:
    """The decomposed-format sample of an :class:`EpisodeRun`'s current state (the prompt it would send the
    policy now, and the symbolic planner's plan from there as gold), or None when the planner finds no plan."""
    from embodied_rft.world.planner import PlanError, plan_for

    try:
        names = plan_for(run.sim)
    except PlanError:
        return None
    gold = [(run.space.get_id(name), name) for name in names]
    n = len(run.history)
    extras = [name for i, name in enumerate(run.space.names) if i >= N_GLOBAL]
    sample = sample_record(
        run.episode,
        f"{run.episode['episode_id']}{STATE_SUFFIX}{run.planner_calls}",
        n,
        n + len(gold),
        run.sim,
        run.history,
        gold,
        extras,
        run.scene_types,
        run.prompt_cfg,
        None,
        "images",
    )
    sample["failed_last"] = bool(run.executed) and not run.executed[-1][2]
    return sample


def _play(
    policy: Any,
    episodes: Sequence[tuple[int, dict]],
    prompt_cfg: PromptConfig,
    limits: Any,
    batch_size: int,
    inflight: int,
):
    """Play ``episodes`` (``(index in the whole list, episode)`` pairs), ``inflight`` at a time: every round sends
    each live episode's prompt in one ``policy.plan`` call, and an episode that ends is replaced by the next one.
    Returns ((order key, sample) pairs, end reasons, unplannable states); the key sorts the samples as lockstep
    batches of ``batch_size`` episodes record them (batch, planner call, episode)."""
    from collections import deque

    from embodied_rft.evaluate.episode import EpisodeRun

    keyed: list[tuple[tuple[int, int, int], dict]] = []
    ends: dict[str, int] = {}
    unplannable = 0
    waiting = deque(episodes)
    active: list[tuple[int, Any]] = []
    done = bar(len(episodes), "on-policy episodes", "episode")
    while waiting or active:
        while waiting and len(active) < inflight:
            i, ep = waiting.popleft()
            active.append((i, EpisodeRun(ep, prompt_cfg, limits)))
        prompts = []
        for i, run in active:
            s = state_sample(run)
            if s is None:
                unplannable += 1
                prompts.append(run.messages())
            else:
                keyed.append(((i // batch_size, run.planner_calls, i), s))
                prompts.append(s["prompt"])  # the same messages the run would build
        responses = policy.plan(prompts, None, [r.context() for _, r in active])
        still = []
        for (i, run), text in zip(active, responses, strict=True):
            run.apply(text if isinstance(text, str) else "")
            if run.done:
                ends[run.end_reason] = ends.get(run.end_reason, 0) + 1
                done.update(1)
            else:
                still.append((i, run))
        active = still
    done.close()
    return keyed, ends, unplannable


_WORKER: dict[str, Any] = {}


def _init_worker(spec: Any, prompt_cfg: PromptConfig, limits: Any, threads: int) -> None:
    import torch

    torch.set_num_threads(max(1, threads))  # the workers share the machine's cores
    _WORKER.update(policy=spec.build(), prompt_cfg=prompt_cfg, limits=limits)


def _worker_play(args: tuple[list[tuple[int, dict]], int, int]):
    episodes, batch_size, inflight = args
    return _play(_WORKER["policy"], episodes, _WORKER["prompt_cfg"], _WORKER["limits"], batch_size, inflight)


def collect_states(
    policy: Any,
    episodes: Sequence[dict],
    prompt_cfg: PromptConfig,
    limits: Any,
    batch_size: int,
    workers: int = 1,
    inflight: int = 0,
) -> tuple[list[dict], dict[str, Any]]:
    """Play ``episodes`` with ``policy`` and return (one sample per planner call, a summary).

    The samples come in the order lockstep batches of ``batch_size`` episodes record them: batch by batch, within
    a batch planner call by planner call, within a call in episode order. How the episodes are actually played
    does not change that order: ``inflight`` episodes at a time (0 = ``batch_size``), each replaced by the next as
    it ends, so every generation call stays full; ``workers > 1`` splits the episodes (every ``workers``-th) over
    that many spawned processes (``policy`` must then be a picklable spec with ``build()``, e.g.
    :class:`~embodied_rft.evaluate.policy.PolicySpec`), each with its share of the cores."""
    if prompt_cfg.observation == "image":
        raise ValueError(
            "grpo.onpolicy: image observations are not supported yet (the states would need their frames saved)"
        )
    t0 = time.perf_counter()
    inflight = inflight or batch_size
    indexed = list(enumerate(episodes))
    n = min(workers, len(indexed))
    if n > 1:
        if not hasattr(policy, "build"):
            raise TypeError("collect_states(workers > 1): pass a policy spec with build(), not a built policy")
        import multiprocessing as mp
        import os

        threads = max(1, (os.cpu_count() or 1) // n)
        shares = [(indexed[w::n], batch_size, inflight) for w in range(n)]
        with mp.get_context("spawn").Pool(n, _init_worker, (policy, prompt_cfg, limits, threads)) as pool:
            parts = pool.map(_worker_play, shares)
    else:
        built = policy.build() if hasattr(policy, "build") else policy
        try:
            parts = [_play(built, indexed, prompt_cfg, limits, batch_size, inflight)]
        finally:
            if built is not policy and hasattr(built, "close"):
                built.close()
    keyed: list[tuple[tuple[int, int, int], dict]] = []
    ends: dict[str, int] = {}
    unplannable = 0
    for got, e, u in parts:
        keyed.extend(got)
        for k, v in e.items():
            ends[k] = ends.get(k, 0) + v
        unplannable += u
    keyed.sort(key=lambda kv: kv[0])
    samples = [s for _, s in keyed]
    summary = {
        "episodes": len(episodes),
        "success": ends.get("success", 0),
        "end_reasons": dict(sorted(ends.items())),
        "states": len(samples),
        "after_failed_action": sum(s["failed_last"] for s in samples),
        "unplannable_states": unplannable,
        "time_s": round(time.perf_counter() - t0, 3),
    }
    return samples, summary


def collect_with_model(
    policy_dir: str | Path,
    episodes: Sequence[dict],
    prompt_cfg: PromptConfig,
    limits: Any,
    batch_size: int,
    max_new_tokens: int,
    seed: int,
    *,
    inflight: int = 0,
    workers: int = 1,
    fast: bool = True,
) -> tuple[list[dict], dict[str, Any]]:
    """:func:`collect_states` with the checkpoint at ``policy_dir`` answering greedily, each episode's next prompt
    prefilled from its last one; the ``fast`` backend where the checkpoint allows it (its greedy outputs are
    token-identical to ``hf``'s), ``workers`` processes that each build the policy themselves."""
    from embodied_rft.evaluate.policy import ModelPolicy, PolicySpec
    from embodied_rft.generation.base import make_generator
    from embodied_rft.generation.config import GenerationConfig
    from embodied_rft.generation.fast import checkpoint_supported

    gen_cfg = GenerationConfig(
        backend="fast" if fast and checkpoint_supported(policy_dir) else "hf",
        max_new_tokens=max_new_tokens,
        batch_size=inflight or batch_size,  # each round's prompts in one generation call
        prefill_buckets=4,
        prefix_cache=True,  # an episode's next prompt extends its last one
        temperature=0.0,
        seed=seed,
    )
    if workers > 1:
        spec = PolicySpec("model", str(policy_dir), gen_cfg, seed)
        return collect_states(spec, episodes, prompt_cfg, limits, batch_size, workers=workers, inflight=inflight)
    gen = make_generator(policy_dir, gen_cfg)
    try:
        return collect_states(ModelPolicy(gen), episodes, prompt_cfg, limits, batch_size, inflight=inflight)
    finally:
        gen.close()


def choose_episodes(path: str | Path, n: int, seed: int) -> list[dict]:
    """``n`` episodes of ``path`` (a fixed-seed sample; all when there are fewer)."""
    eps = [rec for _, rec in iter_jsonl(path)]
    random.Random(seed).shuffle(eps)
    return eps[:n]


def mix_prompts(decomposed: list[dict], states: list[dict], fraction: float, seed: int) -> list[dict]:
    """All ``states`` plus enough decomposed prompts (a fixed-seed sample) that states are ``fraction`` of
    the result; the engine shuffles the order."""
    if not states:
        raise ValueError("grpo.onpolicy: no states were collected (every state was unplannable?)")
    n_dec = min(len(decomposed), round(len(states) * (1.0 - fraction) / fraction))
    picked = random.Random(seed).sample(decomposed, n_dec) if n_dec else []
    return list(states) + picked


def select_states(states: tuple[list[dict], dict[str, Any]], failed_only: bool) -> tuple[list[dict], dict[str, Any]]:
    """The collected states, only those after a failed action with ``failed_only`` (counted in the summary)."""
    if not failed_only:
        return states
    kept = [s for s in states[0] if s.get("failed_last")]
    if not kept:
        raise DataError(
            f"grpo.onpolicy.failed_only: none of the {len(states[0])} collected states follows a failed action; "
            "play more episodes (grpo.onpolicy.episodes) or set failed_only=false"
        )
    return kept, {**states[1], "failed_only": True, "states_kept": len(kept)}


def load_or_collect(path: str | Path, key: str, collect: Any) -> tuple[list[dict], dict[str, Any]]:
    """The states saved at ``path`` for the inputs fingerprint ``key``, else ``collect()``'s, saved there. The
    meta file records the states file's sha256: a file changed since it was written is collected again (and the
    log says so), never reused."""
    path = Path(path)
    meta_path = path.with_suffix(".meta.json")
    if path.exists() and meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            meta = {}
        if isinstance(meta, dict) and meta.get("key") == key:
            if meta.get("sha256") == sha256_file(path):
                log.info("reusing %d on-policy states from %s", meta["summary"]["states"], path)
                return [rec for _, rec in iter_jsonl(path)], meta["summary"]
            log.warning(
                "%s: does not match the sha256 in %s (edited, damaged, or written by an older version): "
                "collecting the on-policy states again",
                path,
                meta_path.name,
            )
    samples, summary = collect()
    write_jsonl_atomic(path, samples)
    write_json_atomic(meta_path, {"key": key, "summary": summary, "sha256": sha256_file(path)})
    return samples, summary


__all__ = [
    "OnPolicyConfig",
    "STATE_SUFFIX",
    "choose_episodes",
    "collect_states",
    "collect_with_model",
    "load_or_collect",
    "mix_prompts",
    "select_states",
    "state_sample",
]
