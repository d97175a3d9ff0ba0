"""Fixtures shared by the GRPO tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """torch on one thread for the test: tiny models only add contention with intra-op threads (see
    GRPOConfig.num_threads); the previous count is restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
