"""The key/value caches of the fast sampler and of GRPO's shared-prompt update.

:class:`PromptKV`: each distinct prompt's keys and values, computed once and read once per decode step for all
of its samples. :class:`GenCache`: the generated tokens' keys and values, preallocated and written in place,
one column per decode step; finished rows are compacted out, and with continuous batching rows admitted later
start at later columns. :class:`PromptStates`: what responses need of their prompts in the training forward.
:class:`~embodied_rft.generation.decoder.DecoderLM` builds and reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def _rows_to_grid(t: torch.Tensor, slot: torch.Tensor, P: int, G: int, dense: bool) -> torch.Tensor:
    """Rows [B, Hkv, rep, n] onto the [prompts, samples] grid as [P, Hkv, G·rep, n] (empty slots zero)."""
    if not dense:
        grid = t.new_zeros((P * G, *t.shape[1:]))
        grid[slot] = t
        t = grid
    _, Hkv, rep, n = t.shape
    return t.reshape(P, G, Hkv, rep, n).transpose(1, 2).reshape(P, Hkv, G * rep, n)


def _grid_to_rows(t: torch.Tensor, slot: torch.Tensor, G: int, rep: int, dense: bool) -> torch.Tensor:
    """The inverse of :func:`_rows_to_grid`: [P, Hkv, G·rep, n] back to the rows [B, Hkv, rep, n]."""
    P, Hkv, _, n = t.shape
    t = t.view(P, Hkv, G, rep, n).transpose(1, 2).reshape(P * G, Hkv, rep, n)
    return t if dense else t[slot]


@dataclass
class PromptKV:
    """Each distinct prompt's keys and values, computed once: per layer the keys transposed, ``k_t``
    ``[P, kv_heads, head_dim, W]``, and the values ``[P, kv_heads, W, head_dim]``, both contiguous (prompts
    left-padded to width W; the decode step's two products read them in place, faster than the strided layout
    the projection leaves: docs/experiments.md, "the prompt-key layout"), and ``bias`` [P, W]: 0 on real tokens,
    −inf on padding."""

    k_t: list[torch.Tensor]
    v: list[torch.Tensor]
    bias: torch.Tensor

    @property
    def prompts(self) -> int:
        return self.bias.shape[0]

    @property
    def width(self) -> int:
        return self.bias.shape[1]

    def keep(self, idx: torch.Tensor) -> PromptKV:
        """Only prompts ``idx``, without the padding columns none of them uses."""
        bias = self.bias[idx]
        used = torch.isfinite(bias).any(0)
        lo = int(used.to(torch.int8).argmax()) if bool(used.any()) else 0  # left padding: the first used column
        return PromptKV([t[idx, :, :, lo:] for t in self.k_t], [t[idx, :, lo:] for t in self.v], bias[:, lo:])

    def cat(self, other: PromptKV) -> PromptKV:
        """These prompts followed by ``other``'s, left-padded to the wider of the two."""
        return PromptKV.concat([self, other])

    @staticmethod
    def concat(parts: list[PromptKV]) -> PromptKV:
        """The prompts of ``parts`` in order, each part left-padded to the widest (zero keys/values, −inf bias)."""
        w = max(kv.width for kv in parts)

        def pad(kv: PromptKV) -> PromptKV:
            d = w - kv.width
            if d == 0:
                return kv
            return PromptKV(
                [F.pad(t, (d, 0)) for t in kv.k_t],
                [F.pad(t, (0, 0, d, 0)) for t in kv.v],
                F.pad(kv.bias, (d, 0), value=float("-inf")),
            )

        if len(parts) == 1:
            return parts[0]
        padded = [pad(kv) for kv in parts]
        return PromptKV(
            [torch.cat(x) for x in zip(*(kv.k_t for kv in padded))],
            [torch.cat(x) for x in zip(*(kv.v for kv in padded))],
            torch.cat([kv.bias for kv in padded]),
        )


@dataclass
class GenCache:
    """The generated tokens' keys and values, preallocated: per layer one tensor ``kv``
    ``[capacity, 2, kv_heads, columns, head_dim]`` (keys at index 0, values at 1, so a decode step writes both with
    one copy), of which the first ``rows`` rows are live; :attr:`k` and :attr:`v` are the per-layer views
    ``[capacity, kv_heads, columns, head_dim]``. Columns are decode steps: every step writes column ``length`` of
    every live row in place. Row r's own tokens are columns ``start[r]`` to ``length − 1``: rows admitted later
    (continuous batching) start later, and the columns before their start are masked.

    Row ``r`` continues prompt ``slot[r] // reps`` of the :class:`PromptKV` and is sample ``slot[r] % reps`` of
    it: decoding lays the rows' queries out on a [prompts, reps] grid so each prompt's keys are read once for
    all of its samples instead of once per row."""

    kv: list[torch.Tensor]
    length: int
    slot: torch.Tensor  # [rows] long
    reps: int
    start: torch.Tensor  # [rows] long
    capacity: int  # rows the tensors hold
    columns: int  # decode steps the tensors hold
    lo: int = 0  # the earliest start among live rows: decode steps read columns lo .. length
    mixed: bool = False  # live rows start at different columns (the own-token attention needs a mask)

    @property
    def rows(self) -> int:
        return self.slot.shape[0]

    @property
    def k(self) -> list[torch.Tensor]:
        return [t[:, 0] for t in self.kv]

    @property
    def v(self) -> list[torch.Tensor]:
        return [t[:, 1] for t in self.kv]

    def _bounds(self) -> None:
        if self.rows:
            self.lo = int(self.start.min())
            self.mixed = bool(self.start.max() > self.lo)
        else:
            self.lo, self.mixed = self.length, False

    def keep(self, idx: torch.Tensor, slot: torch.Tensor) -> None:
        """Keep only rows ``idx`` (moved to the front, in place), whose grid slots become ``slot``; their tokens are
        moved to start at column 0, so the columns freed at the right are reused."""
        n = self.length
        lo = int(self.start[idx].min()) if len(idx) else n
        m = len(idx)
        if m:
            for t in self.kv:
                t[:m, :, :, : n - lo] = t[idx, :, :, lo:n]  # the index makes a copy first: the overlap is safe
        self.start = self.start[idx] - lo
        self.length = n - lo
        self.slot = slot
        self._bounds()

    def extend(self, slot: torch.Tensor) -> None:
        """Admit ``len(slot)`` new rows after the live ones; their own tokens start at the next column."""
        m = len(slot)
        if self.rows + m > self.capacity:
            raise ValueError(f"KV cache holds {self.capacity} rows: {self.rows} live + {m} new do not fit")
        self.slot = torch.cat([self.slot, slot])
        self.start = torch.cat([self.start, torch.full((m,), self.length, dtype=torch.long, device=slot.device)])
        self._bounds()

    def own_bias(self) -> torch.Tensor | None:
        """The mask of the columns before each row's start, [rows, 1, 1, length + 1 − lo] (None: nothing to mask)."""
        if not self.mixed:
            return None
        cols = torch.arange(self.lo, self.length + 1, device=self.start.device)
        bias = torch.zeros(
            (self.rows, len(cols)), dtype=self.kv[0].dtype if self.kv else torch.float32, device=self.start.device
        )
        return bias.masked_fill_(cols.unsqueeze(0) < self.start.unsqueeze(1), float("-inf"))[:, None, None, :]


@dataclass
class PromptStates:
    """What responses need of their prompts during training (see :meth:`DecoderLM.prompt_states`)."""

    k: list[torch.Tensor]  # per layer [P, kv_heads, Lp, head_dim]
    v: list[torch.Tensor]
    last: torch.Tensor  # [P, 1, hidden]: the last prompt position's output before the final norm
    valid: torch.Tensor  # [P, Lp] bool (left padding False)
    lens: torch.Tensor  # [P]

    def tensors(self) -> list[torch.Tensor]:
        return [*self.k, *self.v, self.last]

    def detached(self) -> PromptStates:
        """The same states as leaves that collect gradients (``.grad``) from every response pass; one backward of
        :meth:`tensors` with those gradients then runs the prompts' own backward once."""
        k = [t.detach().requires_grad_() for t in self.k]
        v = [t.detach().requires_grad_() for t in self.v]
        return PromptStates(k, v, self.last.detach().requires_grad_(), self.valid, self.lens)


__all__ = ["GenCache", "PromptKV", "PromptStates"]
