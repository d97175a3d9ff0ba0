"""Run many interactive episodes: in this process, in local worker processes, or in Ray actors.

Input: episodes, a policy (a :class:`~.policy.PolicySpec`, built once inside each worker, or a ready
:class:`~.policy.Policy` for in-process runs), the prompt config, the episode limits and a
:class:`~.store.ResultStore`. Output: one result per episode, in the order of ``episodes``; every result is
written to the store (fsynced) as soon as its task comes back, and episodes the store already holds are
skipped, so a killed evaluation resumes.

Work is cut into tasks of ``episodes_per_task`` episodes that a worker steps in lockstep
(:func:`~.episode.run_lockstep`), so a model answers all of them in one generation batch per round. Only the
parent process writes results. Local workers are spawned, not forked: forking a process that already holds
torch's thread pools can deadlock.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..data.prompt import PromptConfig
from .config import EpisodeLimits
from .episode import run_lockstep
from .policy import Policy, PolicySpec
from .store import ResultStore, episode_hash

log = logging.getLogger(__name__)

_WORKER: dict[str, Any] = {}


def _init_worker(spec: PolicySpec, prompt_cfg: PromptConfig, limits: EpisodeLimits, threads: int) -> None:
    if spec.kind == "model":
        import torch

        # the workers share the machine's cores; without this each one starts a full-size thread pool
        torch.set_num_threads(max(1, threads))
    _WORKER.update(policy=spec.build(), prompt_cfg=prompt_cfg, limits=limits)


def _run_task(episodes: list[dict]) -> list[dict]:
    return list(run_lockstep(episodes, _WORKER["policy"], _WORKER["prompt_cfg"], _WORKER["limits"]))


class _RayWorker:
    """A Ray actor holding one built policy (wrapped with ``ray.remote`` only when Ray is used)."""

    def __init__(self, spec: PolicySpec, prompt_cfg: PromptConfig, limits: EpisodeLimits) -> None:
        self.policy = spec.build()
        self.prompt_cfg = prompt_cfg
        self.limits = limits

    def run(self, episodes: list[dict]) -> list[dict]:
        return list(run_lockstep(episodes, self.policy, self.prompt_cfg, self.limits))


def run_episodes(
    episodes: Sequence[dict],
    policy: PolicySpec | Policy,
    prompt_cfg: PromptConfig,
    limits: EpisodeLimits,
    store: ResultStore,
    *,
    workers: int = 1,
    parallel: str = "process",
    episodes_per_task: int = 8,
    ray_gpus_per_worker: float = 0.0,
    desc: str = "evaluate",
) -> list[dict]:
    ids = [ep["episode_id"] for ep in episodes]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"episode ids must be unique across the evaluated splits; {dup!r} repeats")
    todo = [ep for ep in episodes if store.done(ep) is None]
    skipped = len(episodes) - len(todo)
    if skipped:
        log.info("%s: %d of %d episodes already done (resumed from %s)", desc, skipped, len(episodes), store.path)
    hashes = {ep["episode_id"]: episode_hash(ep) for ep in todo}
    tasks = [todo[i : i + episodes_per_task] for i in range(0, len(todo), episodes_per_task)]
    bar = tqdm(total=len(todo), desc=desc, unit="ep", leave=False, disable=not todo)

    def record(rec: dict) -> None:
        rec["episode_hash"] = hashes[rec["episode_id"]]
        store.append(rec)
        bar.update(1)

    try:
        if not tasks:
            pass
        elif workers == 1 or len(tasks) == 1:
            built = policy.build() if isinstance(policy, PolicySpec) else policy
            try:
                for task in tasks:
                    for rec in run_lockstep(task, built, prompt_cfg, limits):
                        record(rec)
            finally:
                if isinstance(policy, PolicySpec) and hasattr(built, "close"):
                    built.close()
        else:
            if not isinstance(policy, PolicySpec):
                raise TypeError("parallel workers build their own policy: pass a PolicySpec, not a Policy object")
            n = min(workers, len(tasks))
            if parallel == "ray":
                _run_ray(tasks, policy, prompt_cfg, limits, n, ray_gpus_per_worker, record)
            else:
                threads = max(1, (os.cpu_count() or 1) // n)
                ctx = mp.get_context("spawn")
                with ctx.Pool(n, initializer=_init_worker, initargs=(policy, prompt_cfg, limits, threads)) as pool:
                    for recs in pool.imap_unordered(_run_task, tasks):
                        for rec in recs:
                            record(rec)
    finally:
        bar.close()
    out = []
    for ep in episodes:
        rec = store.done(ep)
        if rec is None:  # pragma: no cover - a worker lost an episode; never silently report fewer
            raise RuntimeError(f"episode {ep['episode_id']} has no result after evaluation")
        out.append(rec)
    return out


def connect_ray(ray: Any) -> None:
    """``ray.init`` the way Ray resolves it (``RAY_ADDRESS`` when it names a cluster, ``host:port`` or ``ray://``;
    else the cluster ``ray start --head`` last started on this machine; else a new local instance), except that a
    ``RAY_ADDRESS`` of a job server (``http://…:8265``, what ``ray job submit`` and the ``grpo`` stage read) is
    not a cluster address: it is set aside for the call, with a warning, instead of failing the evaluation."""
    saved = os.environ.get("RAY_ADDRESS", "")
    job_server = saved.startswith(("http://", "https://"))
    if job_server:
        log.warning("RAY_ADDRESS=%s is a job server, not a cluster address; joining this machine's Ray cluster", saved)
        del os.environ["RAY_ADDRESS"]
    try:
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    finally:
        if job_server:
            os.environ["RAY_ADDRESS"] = saved
    log.info("evaluation actors on Ray at %s", ray.get_runtime_context().gcs_address)


def _run_ray(
    tasks: list[list[dict]],
    spec: PolicySpec,
    prompt_cfg: PromptConfig,
    limits: EpisodeLimits,
    n: int,
    gpus: float,
    record: Callable[[dict], None],
) -> None:
    """One actor per worker; each gets a new task as soon as it returns one (no straggler waits for a
    fixed share). Joins the cluster :func:`connect_ray` finds, and shuts down only a connection it made."""
    import ray

    started = False
    if not ray.is_initialized():
        connect_ray(ray)
        started = True
    if spec.model_dir is not None:
        # actors run in the raylet's working folder, not this one (on another node too): an absolute path, which a
        # multi-node cluster must mount at the same place on every node
        spec = dataclasses.replace(spec, model_dir=str(Path(spec.model_dir).absolute()))
    try:
        actor_cls = ray.remote(num_cpus=1, num_gpus=gpus)(_RayWorker)
        actors = [actor_cls.remote(spec, prompt_cfg, limits) for _ in range(n)]
        queue = list(tasks)
        pending = {}
        for a in actors:
            if queue:
                pending[a.run.remote(queue.pop(0))] = a
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            actor = pending.pop(ref)
            for rec in ray.get(ref):
                record(rec)
            if queue:
                pending[actor.run.remote(queue.pop(0))] = actor
        for a in actors:
            ray.kill(a)
    finally:
        if started:
            ray.shutdown()
