"""Helpers shared by test modules (fixtures, tiny checkpoints, fault servers, kill harness): ``from tests.helpers
import ...``. Not collected as tests; tests/conftest.py has pytest rewrite their asserts as in test modules.

``vllm_probe.py`` is a script run in vLLM's own venv (by path, with PYTHONPATH=src), not imported.
"""
