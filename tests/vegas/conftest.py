"""Fixtures shared by the VeGAS tests."""

from __future__ import annotations

import pytest

from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.vegas.config import SynthConfig
from embodied_rft.vegas.synth import run_synth
from embodied_rft.world import GeneratorConfig, generate_episodes


@pytest.fixture(scope="session")
def records(tmp_path_factory):
    """Synthesised verification records of 12 generated train episodes (two task types), 30% held out."""
    root = tmp_path_factory.mktemp("verify")
    cfg = GeneratorConfig(seed=2, task_types=("pick_and_place_simple", "pick_clean_then_place_in_recep"))
    write_jsonl_atomic(root / "train_eps.jsonl", generate_episodes(cfg, "train", 12))
    run_synth(
        SynthConfig(val_fraction=0.3, reasoning="brief"), root / "train_eps.jsonl", root / "verify", root / "s.json"
    )
    return root
