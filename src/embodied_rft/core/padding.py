"""Left padding of token-id rows for one batched forward: the layout the GRPO rollouts and the verifier's P(yes)
read share. Input: rows of token ids of different lengths. Output: ids [B, W] (``pad_id`` on the left), the
attention mask [B, W] (1 on real tokens) and rotary positions counted from each row's first real token (0 on
padding), so a padded row computes what it computes alone."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` left-padded to the longest: (ids, attention mask), both long."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids, mask


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded batch: 0, 1, ... from each row's first real token, 0 on padding."""
    return (mask.cumsum(-1) - 1).clamp(min=0) * mask


__all__ = ["left_pad", "positions"]
