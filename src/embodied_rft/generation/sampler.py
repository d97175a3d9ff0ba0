"""The fast sampler: G samples per prompt from one prefill, an in-place K/V cache, and exact top-p draws.

Input: a :class:`~.decoder.DecoderLM` (a Qwen2 / Llama causal LM's own weights), prompts as token ids,
``n`` samples per prompt, the new-token cap, temperature, top-p, end-token ids and a seed. Output:
:class:`Samples` — per prompt, ``n`` token-id lists (the end token included when one was generated) and the
log-prob of each sampled token under the temperature-scaled distribution, ``log softmax(logits / T)``, the
quantity GRPO's loss uses for π_old (``train.grpo.loss.token_logprobs``), so the trainer needs no second
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
5. with ``prefill_buckets > 1`` the prompts admitted together are prefilled in up to that many length buckets
   (``DecoderLM.prefill``) instead of all padded to the longest: the same values up to float rounding.
``temperature == 0`` is greedy: argmax, one row per prompt, repeated ``n`` times; its log-probs are at T = 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from .base import GenerationCancelled
from .decoder import DecoderLM
from .prefix import PrefixCache


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


def prompt_seed(seed: int, index: int) -> int:
    """The seed of prompt ``index``'s uniforms in a call seeded ``seed`` (a fixed 63-bit mix of the two)."""
    return (int(seed) * 0x9E3779B97F4A7C15 + (int(index) + 1) * 0xBF58476D1CE4E5B9) % (1 << 63)


class FastSampler:
    """Samples from a :class:`DecoderLM` (see the module docstring)."""

    def __init__(
        self, lm: DecoderLM, *, compact_at: float = 0.75, max_rows: int | None = None, prefill_buckets: int = 1
    ) -> None:
        if not 0.0 < compact_at <= 1.0:
            raise ValueError(f"compact_at must be in (0, 1], got {compact_at}")
        if max_rows is not None and max_rows < 1:
            raise ValueError(f"max_rows must be >= 1 or None, got {max_rows}")
        self.lm = lm
        self.compact_at = compact_at
        self.max_rows = max_rows
        if prefill_buckets < 1:
            raise ValueError(f"prefill_buckets must be >= 1, got {prefill_buckets}")
        self.prefill_buckets = prefill_buckets

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
        should_stop: Callable[[], bool] | None = None,
        prefix: PrefixCache | None = None,
    ) -> Samples:
        """``prefix``: prefill through this :class:`~.prefix.PrefixCache` (reusing earlier calls' prompt prefixes)."""
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
        n_prompts = len(prompts)
        total = n_prompts * reps  # output rows: row p·reps + g is sample g of prompt p
        # live rows at most: whole prompts, at least one; the rest wait and are admitted as rows finish
        width = total if self.max_rows is None else min(total, max(reps, self.max_rows // reps * reps))
        streaming = width < total
        admit_at = max(reps, width // 8)  # free rows that make an admission worth its prefill and compaction
        eos = torch.tensor(sorted(set(int(e) for e in eos_ids)), dtype=torch.long, device=dev)
        uniforms = None
        if not greedy:  # each prompt's own stream: what a row draws does not depend on when it is decoded
            uniforms = torch.empty((total, max_new_tokens), dtype=torch.float32)
            for p in range(n_prompts):
                g = torch.Generator().manual_seed(prompt_seed(seed, p))
                uniforms[p * reps : (p + 1) * reps] = torch.rand((reps, max_new_tokens), generator=g)
            uniforms = uniforms.to(dev)
        packed = lm.packed()  # this call's q/k/v weights as one matrix per layer
        rope = lm.rope_table(max(len(p) for p in prompts) + max_new_tokens)  # every position a row can reach
        # a row writes at most max_new_tokens - 1 columns; with admissions the window slides, and compaction
        # moves it back to column 0 before it reaches the end
        cache = lm.gen_cache(width, max_new_tokens * (2 if streaming else 1), reps, zeroed=streaming)
        out_tok = torch.zeros((total, max_new_tokens), dtype=torch.long)
        out_lp = torch.zeros((total, max_new_tokens), dtype=torch.float32)
        out_len = torch.full((total,), max_new_tokens, dtype=torch.long)
        empty = torch.zeros(0, dtype=torch.long)
        state = dict(kv=None, next=0)
        origin, count, positions = empty, empty, empty.to(dev)  # per cache row: output row, tokens drawn, position
        alive = torch.zeros(0, dtype=torch.bool)

        def admit() -> torch.Tensor | None:
            """Prefill as many waiting prompts as fit; their rows join the cache. Returns their first logits."""
            nonlocal origin, count, positions, alive
            k = min((width - cache.rows) // reps, n_prompts - state["next"])
            if k <= 0:
                return None
            first = state["next"]
            batch = [list(prompts[p]) for p in range(first, first + k)]
            if prefix is not None:
                logits, kv, lens = prefix.prefill(lm, batch, self.prefill_buckets)
            else:
                logits, kv, lens = lm.prefill(batch, self.prefill_buckets)
            base = 0 if state["kv"] is None else state["kv"].prompts
            state["kv"] = kv if state["kv"] is None else state["kv"].cat(kv)
            state["next"] = first + k
            rows = torch.arange(k, device=dev).repeat_interleave(reps)
            g = torch.arange(reps, device=dev).repeat(k)
            cache.extend((base + rows) * reps + g)
            origin = torch.cat([origin, first * reps + torch.arange(k * reps)])
            count = torch.cat([count, torch.zeros(k * reps, dtype=torch.long)])
            positions = torch.cat([positions, lens[rows]])
            alive = torch.cat([alive, torch.ones(k * reps, dtype=torch.bool)])
            return logits[rows]

        logits = admit()
        tok = torch.zeros(0, dtype=torch.long, device=dev)
        steps = row_steps = 0
        while True:
            scaled = logits.float()
            if not greedy and temperature != 1.0:
                scaled = scaled / temperature
            logp = torch.log_softmax(scaled, dim=-1)
            if greedy:
                tok = logp.argmax(dim=-1)
            else:
                u = uniforms[origin.to(dev), count.clamp(max=max_new_tokens - 1).to(dev)]
                tok = draw(nucleus_probs(logp.exp(), top_p), u)
            lp = logp.gather(1, tok.unsqueeze(1)).squeeze(1).cpu()
            tok_cpu = tok.cpu()
            o, c = origin[alive], count[alive]
            out_tok[o, c] = tok_cpu[alive]
            out_lp[o, c] = lp[alive]
            count = count + alive.long()
            hit = torch.isin(tok, eos).cpu() & alive
            if bool(hit.any()):
                out_len[origin[hit]] = count[hit]
            alive = alive & ~hit & (count < max_new_tokens)
            n_alive = int(alive.sum())
            waiting = state["next"] < n_prompts
            if n_alive == 0 and not waiting:
                break
            admit_now = waiting and width - n_alive >= admit_at
            full = cache.length >= cache.columns
            if n_alive < cache.rows and (admit_now or full or n_alive <= self.compact_at * cache.rows):
                # drop the finished rows (and finished prompts); the live rows' tokens move to column 0
                keep = alive.nonzero().squeeze(1)
                keep_dev = keep.to(dev)
                slot = cache.slot[keep_dev]
                used, owner = torch.unique(slot // reps, return_inverse=True)
                kv = state["kv"]
                if n_alive == 0:
                    state["kv"] = None
                elif len(used) < kv.prompts:
                    state["kv"] = kv.keep(used)
                cache.keep(keep_dev, owner * reps + slot % reps)
                tok, positions = tok[keep_dev], positions[keep_dev]
                origin, count, alive = origin[keep], count[keep], alive[keep]
            elif full:  # nothing finished: move the window back to column 0
                cache.keep(torch.arange(cache.rows, device=dev), cache.slot)
            parts = []
            if cache.rows:
                parts.append(lm.decode_step(tok, positions, state["kv"], cache, packed, rope))
                positions = positions + 1
                steps += 1
                row_steps += cache.rows
            if admit_now:
                new = admit()
                if new is not None:
                    parts.append(new)
            logits = parts[0] if len(parts) == 1 else torch.cat(parts)
            if should_stop is not None and should_stop():
                raise GenerationCancelled("generation cancelled")
        tokens: list[list[list[int]]] = []
        lps: list[list[torch.Tensor]] = []
        for p in range(n_prompts):
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
