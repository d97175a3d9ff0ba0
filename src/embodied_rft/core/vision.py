"""The vision tower, by one rule for SFT and GRPO: which parameters belong to it, and freezing them.

A parameter belongs to the vision side when one component of its dotted name is one of
:data:`VISION_MODULES` — Qwen2.5-VL's ``visual`` (tower and merger), LLaVA-style ``vision_tower`` /
``multi_modal_projector``, and ``vision_model``. The paper freezes the tower and its projector in both stages.
"""

from __future__ import annotations

from typing import Any

VISION_MODULES = ("visual", "vision_tower", "vision_model", "multi_modal_projector")
#: The same rule as a module-name regex (PEFT's ``exclude_modules``), so LoRA adds no adapters to a frozen tower.
VISION_MODULE_REGEX = r"(.*\.)?(" + "|".join(VISION_MODULES) + r")\..*"


def is_vision_model(model: Any) -> bool:
    """Whether ``model`` has a vision tower (its config carries a vision config)."""
    return getattr(model.config, "vision_config", None) is not None


def is_vision_param(name: str) -> bool:
    return any(part in VISION_MODULES for part in name.split("."))


def freeze_vision(model: Any) -> int:
    """Stop gradients into the vision tower and its projector; returns how many parameters were frozen."""
    n = 0
    for name, p in model.named_parameters():
        if is_vision_param(name):
            p.requires_grad_(False)
            n += p.numel()
    return n


__all__ = ["VISION_MODULES", "VISION_MODULE_REGEX", "freeze_vision", "is_vision_model", "is_vision_param"]
