"""Helpers shared by test modules (fixtures, tiny checkpoints, fault servers, kill harness): ``from tests.helpers
import ...``. Not collected as tests; tests/conftest.py has pytest rewrite their asserts as in test modules.

``vllm_probe.py`` is a script run in vLLM's own venv (by path, with PYTHONPATH=src), not imported.
``openrlhf_standin.py`` is run as a Ray job's trainer (``python3 -m tests.helpers.openrlhf_standin``), a CPU stand-in
for OpenRLHF's ``train_ppo_ray``; ``ray_head.py`` starts a real local Ray head for the cluster-path tests.
"""
