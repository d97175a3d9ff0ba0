"""Rollout generation of the local GRPO engine, in-process or in Ray actors.

Inputs: encoded prompts, the sampling settings, a policy to sample from. Output: G response token-id lists
per prompt, in prompt order (the same as :func:`rollout.sample_responses`).

:class:`LocalRollout` samples with the training process's own model. :class:`RayRollout`
(``grpo.num_rollout_workers > 0``) starts that many Ray actors, each loading the policy from the checkpoint
directory with ``embodied_rft.models.load_model`` and then receiving the trainer's current weights;
:meth:`RayRollout.refresh` pushes the weights again after every optimised buffer (one ``ray.put``, shared
by all actors), so rollouts always come from the policy the next old log-probs are computed with. The
prompts of a call are split into contiguous chunks, one per actor, each seeded from the call's seed and
the chunk index. Locally Ray starts with ``ray_num_cpus`` CPUs (2 on the CPU default) and no dashboard;
a cluster already joined by ``ray.init`` is used as it is.

Both sample with ``grpo.sampler`` (``rollout.make_sampler``: the fast sampler for Qwen2/Llama text
models, which also returns each sampled token's log-prob, or ``transformers.generate``). Where this departs
from the paper: OpenRLHF generates with vLLM engines.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from embodied_rft.generation.sampler import FastSampler
from embodied_rft.train.grpo.rollout import EncodedPrompt, PolicyIO, Rollout, make_sampler, sample_groups

log = logging.getLogger(__name__)


class LocalRollout:
    """Sample with the trainer's own model (the fast sampler reads its parameters at every call)."""

    def __init__(self, model: Any, io: PolicyIO, device: Any, sampler: FastSampler | None = None) -> None:
        # sampler: the engine's (rollout.make_sampler), None = transformers' generate
        self.model, self.io, self.device, self.sampler = model, io, device, sampler

    def sample(self, prompts: Sequence[EncodedPrompt], group_size: int, *, seed: int, **gen: Any) -> Rollout:
        return sample_groups(
            self.model, self.io, prompts, group_size, sampler=self.sampler, seed=seed, device=self.device, **gen
        )

    def refresh(self, model: Any) -> None:  # same object and parameters: nothing to copy
        pass

    def close(self) -> None:
        pass


def merge_rollouts(parts: Sequence[Rollout]) -> Rollout:
    """One :class:`Rollout` from the chunks of a call, in order (log-probs only if every chunk has them)."""
    responses = [g for p in parts for g in p.responses]
    have = all(p.logprobs is not None for p in parts)
    logprobs = [g for p in parts for g in (p.logprobs or [])] if have else None
    return Rollout(responses, logprobs, sum(p.row_steps for p in parts))


class RolloutWorker:
    """One Ray actor: a policy copy that samples responses (wrapped with ``ray.remote`` at start-up)."""

    def __init__(self, policy_dir: str, max_prompt_tokens: int, threads: int = 1, sampler: str = "auto") -> None:
        from embodied_rft.models import load_model

        torch.set_num_threads(max(1, threads))
        self.model, tok = load_model(policy_dir, for_training=False)
        self.model.float().eval()
        self.io = PolicyIO(tok, max_prompt_tokens)
        self.io.add_model_eos(self.model)
        self.sampler = make_sampler(self.model, sampler)
        self.version = -1

    def set_weights(self, state: dict, version: int) -> int:
        self.model.load_state_dict(state)
        self.version = version
        return version

    def sample(self, prompts: list[EncodedPrompt], group_size: int, seed: int, gen: dict) -> tuple[int, Rollout]:
        return self.version, sample_groups(
            self.model, self.io, prompts, group_size, sampler=self.sampler, seed=seed, device="cpu", **gen
        )


class RayRollout:
    """Sample in ``n_workers`` Ray actors holding policy copies."""

    def __init__(
        self, n_workers: int, policy_dir: str, max_prompt_tokens: int, model: Any, num_cpus: int, sampler: str = "auto"
    ) -> None:
        import ray

        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        worker_cls = ray.remote(num_cpus=1)(RolloutWorker)
        self.workers = [worker_cls.remote(str(policy_dir), max_prompt_tokens, 1, sampler) for _ in range(n_workers)]
        self.version = 0
        self.refresh(model)
        log.info("rollout: %d Ray actors started", n_workers)

    def refresh(self, model: Any) -> None:
        """Push the trainer's current weights to every actor (blocks until all have them)."""
        state = {
            k: v.detach().to("cpu", torch.float32) if v.is_floating_point() else v.detach().cpu()
            for k, v in model.state_dict().items()
        }
        ref = self._ray.put(state)
        self.version += 1
        self._ray.get([w.set_weights.remote(ref, self.version) for w in self.workers])

    def sample(self, prompts: Sequence[EncodedPrompt], group_size: int, *, seed: int, **gen: Any) -> Rollout:
        n = len(self.workers)
        size = -(-len(prompts) // n)
        chunks = [list(prompts[i : i + size]) for i in range(0, len(prompts), size)]
        futures = [
            w.sample.remote(c, group_size, seed * 1009 + j, gen) for j, (w, c) in enumerate(zip(self.workers, chunks))
        ]
        parts: list[Rollout] = []
        for version, part in self._ray.get(futures):
            if version != self.version:  # cannot happen with the blocking refresh; guards the on-policy claim
                raise RuntimeError(f"rollout actor sampled with weights v{version}, trainer is at v{self.version}")
            parts.append(part)
        return merge_rollouts(parts)

    def close(self) -> None:
        for w in self.workers:
            try:
                self._ray.kill(w)
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        self.workers = []
        if self._owns_ray:
            self._ray.shutdown()


__all__ = ["LocalRollout", "RayRollout", "RolloutWorker", "merge_rollouts"]
