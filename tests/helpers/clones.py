"""A clean clone of the repository carrying the working tree's code, for the tests that run the pipeline through DVC
as a user would (tests/test_pipeline_e2e.py, tests/test_cluster_e2e.py), and a digest of outputs to prove a failed
run left them byte-identical."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

# what a clone takes from the working tree, so the tests run the code under test and not only HEAD's
TRACKED = ("conf", "stages", "src", "dvc.yaml", "params.yaml")


def working_tree_clone(repo_root: Path, clone: Path, extra: Sequence[str] = ()) -> dict[str, str]:
    """``git clone`` ``repo_root`` into ``clone`` with the working tree's :data:`TRACKED` paths (and ``extra``)
    copied over; returns the environment to run its stages in (this venv first on PATH, the clone's ``src`` on
    PYTHONPATH, W&B off, no hub access). Skips the test without git."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to clone the repository")
    subprocess.run(["git", "clone", "-q", str(repo_root), str(clone)], check=True)
    for tracked in (*TRACKED, *extra):
        src, dst = repo_root / tracked, clone / tracked
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, dst)
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "WANDB_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(clone / "src"),
    }


def tree_digest(path: Path) -> str:
    """sha256 over a file's bytes, or a folder's relative names and bytes."""
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if f.is_file():
            h.update(f.relative_to(path).as_posix().encode() if path.is_dir() else b"")
            h.update(f.read_bytes())
    return h.hexdigest()


def run_ok(cmd: Sequence[str], cwd: Path, env: dict[str, str], timeout: int = 1800) -> subprocess.CompletedProcess:
    """Run ``cmd`` in a clone; fails the test with the command and the tail of its output unless it exits 0."""
    r = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r
