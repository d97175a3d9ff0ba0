"""Prompt-prefix reuse between calls of the fast sampler: a prompt that extends one of the previous call's prompts
is prefilled only from where the two part.

Why: an interactive episode's next prompt is its last prompt with more history (EB's planner prompt grows by the
actions just executed), so a greedy play that sends every live episode's prompt each round prefills the same
history again and again. On the GRPO stage's on-policy play most prompt tokens repeat the same episode's previous
prompt, and that prefill was a large share of the play's time (docs/experiments.md, "issue 23: the on-policy play").

Input: token-id prompts and the :class:`~.decoder.DecoderLM` they run on. Output: what ``DecoderLM.prefill``
returns (last-position logits, keys/values, lengths), up to float rounding: the reused keys/values are the ones
the earlier prefill computed for the same tokens, and the rest attend to them (``DecoderLM.prefill_extend``).
Greedy answers agree with a full prefill's (tested).

How: the keys/values of every prompt prefilled in the current call are kept until the end of the next one
(:meth:`PrefixCache.next_call`); a prompt is matched to the stored prompt that shares its longest token prefix
(a chain of hashes over blocks of :attr:`PrefixCache.block` tokens, then token by token), and reuses it when the
match has at least :attr:`PrefixCache.min_reuse` tokens. Weights that changed in place since a prompt was stored
(an optimiser step) drop the store, so a stale prefix is never read. Use it where the weights stay fixed for
many calls — the on-policy play, evaluation — not for sampled GRPO rollouts: their prompts rarely extend one
another, and a rounding change there moves an occasional sampled draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .decoder import DecoderLM, length_buckets, merge_prefills
from .kvcache import PromptKV


@dataclass
class _Stored:
    ids: list[int]
    kv: PromptKV
    row: int
    start: int  # first real column of the row; the prompt's tokens are columns start .. start + len(ids) - 1


class PrefixCache:
    """The previous and the current call's prompts' keys/values, for :meth:`prefill` (see the module docstring)."""

    block = 16
    min_reuse = 32

    def __init__(self) -> None:
        self._previous: dict[int, tuple[_Stored, int]] = {}
        self._current: dict[int, tuple[_Stored, int]] = {}
        self._version: tuple[int, ...] | None = None
        self.reused_tokens = 0
        self.prompt_tokens = 0

    def next_call(self) -> None:
        """Start a new call: this call's prompts become the ones the next prompts can extend; older ones go."""
        self._previous, self._current = self._current, {}

    def clear(self) -> None:
        self._previous, self._current = {}, {}

    def _chain(self, ids: list[int]) -> list[int]:
        """The hash of each whole block of ``ids``, chained over the blocks before it."""
        out, h, b = [], 0, self.block
        for end in range(b, len(ids) + 1, b):
            h = hash((h, tuple(ids[end - b : end])))
            out.append(h)
        return out

    def _match(self, ids: list[int], chain: list[int]) -> tuple[_Stored, int] | None:
        """The stored prompt sharing the longest prefix with ``ids`` (whose block hashes are ``chain``) and that
        prefix's length (< len(ids))."""
        found = None
        for h in chain:
            hit = self._previous.get(h) or self._current.get(h)
            if hit is None:
                break
            found = hit
        if found is None:
            return None
        stored, n = found
        if stored.ids[:n] != ids[:n]:  # a hash collision
            return None
        limit = min(len(stored.ids), len(ids) - 1)  # at least one token of the new prompt runs
        while n < limit and stored.ids[n] == ids[n]:
            n += 1
        return stored, min(n, limit)

    def _check_weights(self, lm: DecoderLM) -> None:
        version = tuple(p._version for p in lm.model.parameters())
        if version != self._version:
            self.clear()
            self._version = version

    def prefill(
        self, lm: DecoderLM, prompts: list[list[int]], max_buckets: int = 1
    ) -> tuple[torch.Tensor, PromptKV, torch.Tensor]:
        """``lm.prefill(prompts, max_buckets)``, reusing stored prefixes; the prompts are stored in turn."""
        self._check_weights(lm)
        prompts = [list(p) for p in prompts]
        chains = [self._chain(p) for p in prompts]
        matches = [self._match(p, c) for p, c in zip(prompts, chains, strict=True)]
        hits = [i for i, m in enumerate(matches) if m is not None and m[1] >= self.min_reuse]
        hit_set = set(hits)
        misses = [i for i in range(len(prompts)) if i not in hit_set]
        groups: list[list[int]] = []
        parts: list[tuple[torch.Tensor, PromptKV, torch.Tensor]] = []
        if misses:
            groups.append(misses)
            parts.append(lm.prefill([prompts[i] for i in misses], max_buckets))
        suffix_lens = [len(prompts[i]) - matches[i][1] for i in hits]  # type: ignore[index]
        for g in length_buckets(suffix_lens, max_buckets) if hits else []:
            rows = [hits[j] for j in g]
            groups.append(rows)
            parts.append(self._extend(lm, [(prompts[i], *matches[i]) for i in rows]))  # type: ignore[misc]
        logits, kv, lens = merge_prefills(groups, parts)
        self.prompt_tokens += sum(len(p) for p in prompts)
        self.reused_tokens += sum(matches[i][1] for i in hits)  # type: ignore[index]
        self._store(prompts, chains, kv)
        return logits, kv, lens

    def _extend(self, lm: DecoderLM, rows: list[tuple[list[int], _Stored, int]]):
        """``lm.prefill_extend`` of prompts with their stored prefixes gathered into right-aligned tensors."""
        Lw = max(n for _, _, n in rows)
        ks: list[torch.Tensor] = []
        vs: list[torch.Tensor] = []
        for li in range(len(lm.layers)):
            ref = rows[0][1].kv.v[li]
            k = ref.new_zeros((len(rows), ref.shape[1], Lw, ref.shape[3]))
            v = torch.zeros_like(k)
            for r, (_, st, n) in enumerate(rows):
                k[r, :, Lw - n :] = st.kv.k_t[li][st.row, :, :, st.start : st.start + n].transpose(-1, -2)
                v[r, :, Lw - n :] = st.kv.v[li][st.row, :, st.start : st.start + n]
            ks.append(k)
            vs.append(v)
        lens = torch.tensor([n for _, _, n in rows], dtype=torch.long)
        return lm.prefill_extend(ks, vs, lens, [ids[n:] for ids, _, n in rows])

    def _store(self, prompts: list[list[int]], chains: list[list[int]], kv: PromptKV) -> None:
        starts = torch.isfinite(kv.bias).to(torch.int8).argmax(dim=1).tolist()  # each row's tokens are contiguous
        for i, (p, chain) in enumerate(zip(prompts, chains, strict=True)):
            stored = _Stored(p, kv, i, starts[i])
            for b, h in enumerate(chain):
                self._current.setdefault(h, (stored, (b + 1) * self.block))


__all__ = ["PrefixCache"]
