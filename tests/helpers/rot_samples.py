"""RoT samples for the ReGRPO tests (tests/regrpo/test_distill_rot.py, test_anchors.py): a small generated world's
train episodes decomposed with one recovery step each from the RoT engine, written as a decomposed ``train.jsonl``."""

from __future__ import annotations

from pathlib import Path

from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.decompose import decompose_episodes
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.regrpo.config import RotConfig
from embodied_rft.regrpo.rot import RotEngine
from embodied_rft.world import GeneratorConfig, generate_episodes

WORLD = GeneratorConfig(seed=7, task_types=("pick_and_place_simple", "pick_clean_then_place_in_recep"))
PROMPT = PromptConfig(style="compact", action_list="none", system=False, instruction_at="end")


def rot_samples(root: Path, episodes: int) -> tuple[Path, list[dict]]:
    """``episodes`` train episodes of :data:`WORLD` decomposed (one RoT recovery step each) into ``root/train.jsonl``;
    returns the file and the samples."""
    eps = generate_episodes(WORLD, "train", episodes)
    ss = decompose_episodes(eps, PROMPT, recovery=1, seed=1, source=RotEngine(RotConfig()))
    write_jsonl_atomic(root / "train.jsonl", ss)
    return root / "train.jsonl", ss
