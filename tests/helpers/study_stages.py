"""Test-only: reading a generated study's DVC stages (studies/<name>/dvc.yaml entries)."""

from __future__ import annotations


def do(stages: dict, name: str) -> dict:
    """A ``foreach`` stage's body."""
    return stages[name]["do"]


def arg(cmd: str, key: str) -> str:
    """The value of ``key=...`` or ``--key value`` on a generated command line (quotes removed)."""
    words = [w.strip("'") for w in cmd.split()]
    for i, w in enumerate(words):
        if w.startswith(f"{key}="):
            return w.split("=", 1)[1]
        if w == key:
            return words[i + 1]
    raise KeyError(key)
