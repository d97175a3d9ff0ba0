"""The fast sampler: G samples per prompt from one prefill, an in-place K/V cache, and exact top-p draws.

Input: a :class:`~.decoder.DecoderLM` (a Qwen2 / Llama causal LM's own weights), prompts as token ids,
``n`` samples per prompt, the new-token cap, temperature, top-p, end-token ids and a seed. Output:
:class:`Samples` — per prompt, ``n`` token-id lists (the end token included when one was generated) and the
log-prob of each sampled token under the temperature-scaled distribution, ``log softmax(logits / T)``, the
quantity GRPO's loss uses for π_old (``train.grpo_loss.token_logprobs``), so the trainer needs no second
pass to get it.

How, and why each part (measured in ``bench/bench_sampler.py``):
1. each distinct prompt is prefilled once and its keys/values are kept once: every decode step reads them once
   for all ``n`` samples (``generate`` with repeated rows computes and reads every prompt ``n`` times);
2. the generated tokens' cache is preallocated for the cap and each step writes one column in place
   (``DynamicCache`` concatenates every step);
3. rows that finished are dropped from the batch once the live ones fall to ``compact_at`` of it, and prompts
   whose samples all finished with them (finished rows otherwise keep being decoded until the longest answer
   ends);
4. a draw is one uniform per row and an inverse-CDF lookup (``searchsorted`` on the cumulative
   probabilities), not ``torch.multinomial``; with ``top_p < 1`` the probabilities are sorted and the
   nucleus is the smallest prefix whose mass reaches ``top_p`` (ties and the boundary as transformers'
   ``TopPLogitsWarper``: a token is dropped when the mass of the tokens ranked below it, itself included, is
   at most ``1 − top_p``; at least one token is kept). The uniforms come from a ``torch.Generator`` seeded
   with ``seed``, one per output row and step, so a call is a pure function of its inputs (a resumed GRPO run
   samples what the killed one would have; when rows are dropped does not matter) and the global RNG is
   untouched.
``temperature == 0`` is greedy: argmax, one row per prompt, repeated ``n`` times; its log-probs are at T = 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from .decoder import DecoderLM


@dataclass
class Samples:
    """``tokens[p][g]``: the g-th sample of prompt p (ids, end token included); ``logprobs[p][g]``: a float32
    tensor of the same length; ``steps``: decode steps run; ``row_steps``: rows decoded, summed over steps."""

    tokens: list[list[list[int]]]
    logprobs: list[list[torch.Tensor]]
    steps: int = 0
    row_steps: int = 0


def nucleus_probs(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` [B, V] with every token outside the top-p nucleus set to 0 (not renormalised)."""
    if top_p >= 1.0:
        return probs
    sorted_p, idx = probs.sort(dim=-1)  # ascending, as transformers' TopPLogitsWarper
    drop_sorted = sorted_p.cumsum(dim=-1) <= (1.0 - top_p)
    drop_sorted[:, -1] = False  # keep at least the most likely token
    drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
    return probs.masked_fill(drop, 0.0)


def draw(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs`` [B, V] (non-negative, any total) by inverse CDF at ``uniforms`` [B]."""
    cdf = probs.cumsum(dim=-1)
    target = (uniforms * cdf[:, -1]).unsqueeze(1)
    tok = torch.searchsorted(cdf, target, right=True).squeeze(1)
    # u·total can round onto the total itself; never step past the last token that has mass
    return tok.clamp_(max=probs.shape[1] - 1)


class FastSampler:
    """Samples from a :class:`DecoderLM` (see the module docstring)."""

    def __init__(self, lm: DecoderLM, *, compact_at: float = 0.75) -> None:
        if not 0.0 < compact_at <= 1.0:
            raise ValueError(f"compact_at must be in (0, 1], got {compact_at}")
        self.lm = lm
        self.compact_at = compact_at

    @torch.inference_mode()
    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        n: int,
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        eos_ids: Iterable[int],
        seed: int = 0,
    ) -> Samples:
        if not prompts:
            return Samples([], [])
        if n < 1 or max_new_tokens < 1:
            raise ValueError(f"n and max_new_tokens must be >= 1, got {n}, {max_new_tokens}")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        greedy = temperature == 0.0
        reps = 1 if greedy else n
        lm = self.lm
        dev = lm.device
        eos = torch.tensor(sorted(set(int(e) for e in eos_ids)), dtype=torch.long, device=dev)
        gen = torch.Generator(device=dev).manual_seed(int(seed))
        logits, prompt_kv, lens = lm.prefill([list(p) for p in prompts])
        packed = lm.packed()  # this call's q/k/v weights as one matrix per layer
        B = len(prompts) * reps
        cache = lm.gen_cache(B, max_new_tokens, reps)
        if reps > 1:  # row r is sample r % reps of prompt r // reps; the prompt's keys stay in prompt_kv, once
            rows = torch.arange(len(prompts), device=dev).repeat_interleave(reps)
            logits, lens = logits[rows], lens[rows]
        origin = torch.arange(B)  # cache row -> output row
        alive = torch.ones(B, dtype=torch.bool)  # cache rows still generating
        out_tok = torch.zeros((B, max_new_tokens), dtype=torch.long)
        out_lp = torch.zeros((B, max_new_tokens), dtype=torch.float32)
        out_len = torch.full((B,), max_new_tokens, dtype=torch.long)
        positions = lens.clone()  # rotary position of each cache row's next token
        steps = row_steps = 0
        for t in range(max_new_tokens):
            scaled = logits.float()
            if not greedy and temperature != 1.0:
                scaled = scaled / temperature
            logp = torch.log_softmax(scaled, dim=-1)
            if greedy:
                tok = logp.argmax(dim=-1)
            else:
                # one uniform per output row every step, whether or not the row is still in the batch: the
                # draws do not depend on when finished rows are dropped
                u = torch.rand(B, generator=gen, device=dev)[origin.to(dev)]
                tok = draw(nucleus_probs(logp.exp(), top_p), u)
            lp = logp.gather(1, tok.unsqueeze(1)).squeeze(1).cpu()
            tok_cpu = tok.cpu()
            o = origin[alive]
            out_tok[o, t] = tok_cpu[alive]
            out_lp[o, t] = lp[alive]
            done = torch.isin(tok, eos).cpu() & alive
            if bool(done.any()):
                out_len[origin[done]] = t + 1
                alive &= ~done
            n_alive = int(alive.sum())
            if n_alive == 0 or t == max_new_tokens - 1:
                break
            if n_alive <= self.compact_at * cache.rows:  # drop the finished rows (and finished prompts)
                keep = alive.nonzero().squeeze(1)
                keep_dev = keep.to(dev)
                slot = cache.slot[keep_dev]
                used, owner = torch.unique(slot // reps, return_inverse=True)
                if len(used) < prompt_kv.prompts:
                    prompt_kv = prompt_kv.keep(used)
                cache = cache.keep(keep_dev, owner * reps + slot % reps)
                tok, positions = tok[keep_dev], positions[keep_dev]
                origin, alive = origin[keep], alive[keep]
            logits = lm.decode_step(tok, positions, prompt_kv, cache, packed)
            positions = positions + 1
            steps += 1
            row_steps += cache.rows
        tokens: list[list[list[int]]] = []
        lps: list[list[torch.Tensor]] = []
        for p in range(len(prompts)):
            tg, lg = [], []
            for g in range(reps):
                r = p * reps + g
                k = int(out_len[r])
                tg.append(out_tok[r, :k].tolist())
                lg.append(out_lp[r, :k].clone())
            if greedy and n > 1:
                tg, lg = [list(x) for x in tg * n], [x.clone() for x in lg * n]
            tokens.append(tg)
            lps.append(lg)
        return Samples(tokens, lps, steps, row_steps)
