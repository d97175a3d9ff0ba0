"""Rollouts in single-thread worker processes that read the trainer's weights from shared memory.

Input: the trainer's policy (a Qwen2 / Llama text model the fast sampler runs), the number of processes,
encoded prompts and the sampling settings. Output: the same :class:`~.rollout.Rollout` as the in-process
path — G responses per prompt and their sampled-token log-probs — with the prompts of a call split into
contiguous chunks, one per process, chunk ``j`` seeded ``seed·1009 + j`` (as the Ray actors do).

Why: a decode step of a 3.7M-parameter model is a chain of small matrix products that one thread cannot
spread over two cores; two single-thread processes each decoding half of the prompts are faster than one
two-thread process (``bench/bench_sampler.py`` has the row). Why not Ray actors (``grpo.num_rollout_workers``):
they hold copies of the weights, sent again after every buffer; here ``model.share_memory()`` moves the
parameters into shared memory once, in place (the optimiser keeps the same tensors and updates them in
place), each worker builds the architecture from the config and adopts those tensors
(``load_state_dict(assign=True)``), so after every optimiser step the workers already sample from the new
weights — nothing to copy, no version to check. The trainer never writes while a call is out (it waits for the
answers), so a call sees one set of weights.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from typing import Any

import torch

from embodied_rft.generation.sampler import Samples
from embodied_rft.train.grpo.rollout import EncodedPrompt, Rollout

log = logging.getLogger(__name__)


def _worker(conn: Any, config: Any, state: dict[str, torch.Tensor], compact_at: float, max_rows: int | None) -> None:
    """Worker loop: build the model around the shared tensors, then answer sampling requests."""
    torch.set_num_threads(1)
    try:
        from transformers import AutoModelForCausalLM

        from embodied_rft.generation.decoder import DecoderLM
        from embodied_rft.generation.sampler import FastSampler

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(state, assign=True, strict=False)
        model.tie_weights()
        # non-persistent buffers (rotary frequencies) are not in the state dict: rebuild them on the CPU
        model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config)
        model.eval()
        missing = [n for n, p in model.named_parameters() if p.is_meta]
        if missing:
            raise RuntimeError(f"shared state lacks parameters: {missing[:5]}")
        sampler = FastSampler(DecoderLM(model), compact_at=compact_at, max_rows=max_rows)
        conn.send(("ready", None))
    except Exception:  # noqa: BLE001 - reported to the trainer, which raises it
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        msg = conn.recv()
        if msg is None:
            return
        prompts, n, kw = msg
        try:
            out = sampler.sample(prompts, n, **kw)
            lps = [[lp.tolist() for lp in group] for group in out.logprobs]
            conn.send(("ok", (out.tokens, lps, out.row_steps)))
        except Exception:  # noqa: BLE001 - reported to the trainer, which raises it
            conn.send(("error", traceback.format_exc()))


class _AsSampler:
    def __init__(self, pool: ProcessRollout) -> None:
        self.pool = pool

    def sample(self, prompts: Sequence[Sequence[int]], n: int, **kw: Any) -> Samples:
        return self.pool.sample_ids(prompts, n, **kw)


class ProcessRollout:
    """Sample in ``n_procs`` single-thread processes sharing the trainer's parameters (see the module docstring)."""

    def __init__(
        self, model: Any, eos_ids: Sequence[int], n_procs: int, compact_at: float = 0.75, max_rows: int | None = None
    ) -> None:
        from embodied_rft.generation.decoder import unsupported_reason

        why = unsupported_reason(model)
        if why is not None:
            raise ValueError(f"grpo.rollout_processes: the shared-memory workers run the fast sampler; {why}")
        if next(model.parameters()).device.type != "cpu":
            raise ValueError("grpo.rollout_processes: shared-memory workers are for CPU training (device=cpu)")
        model.share_memory()
        state = model.state_dict()
        ctx = torch.multiprocessing.get_context("spawn")
        self.eos_ids = list(eos_ids)
        self.conns, self.procs = [], []
        for _ in range(n_procs):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, model.config, state, compact_at, max_rows), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        for c in self.conns:
            self._answer(c)
        log.info("rollout: %d single-thread worker processes on shared weights", n_procs)

    def _answer(self, conn: Any) -> Any:
        try:
            kind, payload = conn.recv()
        except EOFError:
            self.close()
            raise RuntimeError("a rollout worker process died (see its output above)") from None
        if kind == "error":
            self.close()
            raise RuntimeError(f"rollout worker failed:\n{payload}")
        return payload

    def sample_ids(
        self,
        prompts: Sequence[Sequence[int]],
        n: int,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        eos_ids: Sequence[int] | None = None,
        seed: int = 0,
    ) -> Samples:
        """:meth:`FastSampler.sample`'s contract, the prompts split over the workers (chunk j seeded seed·1009 + j)."""
        k = len(self.conns)
        size = -(-len(prompts) // k)
        chunks = [list(prompts[i : i + size]) for i in range(0, len(prompts), size)]
        used = self.conns[: len(chunks)]
        eos = list(self.eos_ids if eos_ids is None else eos_ids)
        for j, (conn, chunk) in enumerate(zip(used, chunks)):
            kw = dict(
                max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, eos_ids=eos, seed=seed * 1009 + j
            )
            conn.send(([list(p) for p in chunk], n, kw))
        out = Samples([], [])
        for conn in used:
            tokens, lps, row_steps = self._answer(conn)
            out.tokens.extend(tokens)
            out.logprobs.extend([[torch.tensor(x, dtype=torch.float32) for x in group] for group in lps])
            out.row_steps += row_steps
        return out

    def as_sampler(self) -> _AsSampler:
        """This pool behind the fast sampler's interface (for ``heldout.evaluate_greedy``)."""
        return _AsSampler(self)

    def sample(
        self,
        prompts: Sequence[EncodedPrompt],
        group_size: int,
        *,
        seed: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
    ) -> Rollout:
        out = self.sample_ids(
            [p.ids for p in prompts],
            group_size,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
        )
        return Rollout(out.tokens, out.logprobs, out.row_steps)

    def refresh(self, model: Any) -> None:  # the workers read the trainer's own (shared) parameters
        pass

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        self.conns, self.procs = [], []


__all__ = ["ProcessRollout"]
