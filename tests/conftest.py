"""Session-wide test settings: offline, deterministic, and where ../shared test data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from embodied_rft.core import plugins

# before any test module imports them: failed asserts in tests.helpers show their values too
pytest.register_assert_rewrite("tests.helpers")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]

# the extensions' plug-ins are found as a stage finds them: through the `plugins:` table of conf/config.yaml (a test
# that builds a section from conf/ data without a stage's context sees the same names; core/plugins.py)
plugins.use(yaml.safe_load((REPO / "conf" / "config.yaml").read_text("utf-8"))["plugins"])


def shared_dir() -> Path | None:
    """../shared next to the repo (or $EMBODIED_RFT_SHARED); None when absent."""
    env = os.environ.get("EMBODIED_RFT_SHARED")
    p = Path(env) if env else REPO.parent / "shared"
    return p if p.is_dir() else None


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared() -> Path:
    p = shared_dir()
    if p is None:
        pytest.skip("../shared test data is absent (set EMBODIED_RFT_SHARED to point at it)")
    return p
