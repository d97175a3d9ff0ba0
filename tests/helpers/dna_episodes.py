"""The tiny preset's own episodes (its generator settings composed from conf/, as `prepare` runs them) for the D&A
tests, built once per process: the bench and the learned reward models are about the preset's task types."""

from __future__ import annotations

import functools

from embodied_rft.config import build
from embodied_rft.pipeline import compose
from embodied_rft.world.generator import GeneratorConfig, generate_episodes


@functools.lru_cache(maxsize=1)
def preset_config() -> dict:
    return compose("conf")


@functools.lru_cache(maxsize=4)
def preset_episodes(split: str, n: int | None = None) -> tuple[dict, ...]:
    gen = build(GeneratorConfig, preset_config()["data"]["generator"], "data.generator")
    return tuple(generate_episodes(gen, split, n))
