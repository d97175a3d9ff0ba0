"""Content identity of input files, model folders and JSON-able descriptions, for resume and cache decisions.

Input: a file or a folder (a checkpoint, a data file). Output: a digest that changes when the bytes change and
stays the same when only the file's place or time changes -- a DVC checkout rewrites mtimes, and a result
cached for a model must still be found after one, while a model retrained into the same shapes (same names,
same sizes) must not pass for the old one.

Files up to :data:`FULL_HASH_BYTES` are hashed whole. A larger file (a multi-GB checkpoint shard) is hashed by
its size and :data:`SAMPLED_BLOCKS` blocks of 1 MiB spread evenly over it, so a 7B policy is identified in well
under a second; a retrained shard differs in every block. The SFT resume check, the GRPO resume check and the
evaluation's result store all use this one rule. :func:`json_digest` is the one digest of a JSON-able
description (a run's config and inputs, an episode, params) that resume keys and lineage use.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

FULL_HASH_BYTES = 64 << 20
SAMPLED_BLOCKS = 64
_BLOCK = 1 << 20


def sha256_file(path: str | Path) -> str:
    """The sha256 of every byte of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_BLOCK), b""):
            h.update(chunk)
    return h.hexdigest()


def file_digest(path: str | Path) -> str:
    """The sha256 of a file up to :data:`FULL_HASH_BYTES`; ``sampled:<sha256>`` of its size and evenly spread
    1 MiB blocks beyond that."""
    p = Path(path)
    size = p.stat().st_size
    if size <= FULL_HASH_BYTES:
        return sha256_file(p)
    h = hashlib.sha256(str(size).encode())
    with p.open("rb") as fh:
        for i in range(SAMPLED_BLOCKS):
            fh.seek((size - _BLOCK) * i // (SAMPLED_BLOCKS - 1))
            h.update(fh.read(_BLOCK))
    return "sampled:" + h.hexdigest()


def folder_digests(path: str | Path) -> dict[str, str]:
    """``{relative posix path: file_digest}`` of every file under a folder (sorted; empty if it is missing)."""
    root = Path(path)
    if not root.is_dir():
        return {}
    return {f.relative_to(root).as_posix(): file_digest(f) for f in sorted(root.rglob("*")) if f.is_file()}


def path_identity(path: str | Path) -> dict:
    """A JSON-able identity of a file (``{"sha256": ...}``) or a folder (``{"files": {name: digest}}``)."""
    p = Path(path)
    return {"files": folder_digests(p)} if p.is_dir() else {"sha256": file_digest(p)}


def json_digest(obj: Any, length: int | None = None, *, ensure_ascii: bool = True) -> str:
    """The sha256 of ``obj``'s canonical JSON (sorted keys; non-JSON values by ``str``), cut to ``length``
    hex digits (None: all 64)."""
    blob = json.dumps(obj, sort_keys=True, default=str, ensure_ascii=ensure_ascii)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]
