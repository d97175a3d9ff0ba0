"""Integrity of what the project writes and later reads back: checkpoint folders and cached records.

Input: a folder the project wrote (a model checkpoint, a GRPO or SFT resume checkpoint) or one cached record (a
result line of an episode store, a teacher answer). Output: a digest recorded at write time and checked at read
time, so a byte that changed on disk after the write (bit rot, a cut copy, an edit by hand) is found before it is
used, never used silently.

- **Folders** carry ``checksums.sha256`` in ``sha256sum`` format (``<hex>  <relative path>``, so ``sha256sum -c
  checksums.sha256`` checks one by hand). :func:`seal_folder` writes it as the last file of a finished folder;
  :func:`verify_folder` hashes every listed file in full and raises :class:`IntegrityError` naming the first file
  that is missing or whose digest differs. A folder without the file (written before this rule, or by another
  tool such as a hub download) is not checked: :func:`verify_folder` returns False so the caller can say so.
- **Records** carry a ``"sha"`` field, the digest of the record's canonical JSON without it (:func:`seal_record`);
  :func:`record_intact` is False for an edited or damaged record, and for one that has no digest.

The digests are a guard against accidents, not against an attacker who can rewrite both a file and its digest.
Every byte is hashed (sha256 runs at roughly 1 GB/s per core, so a 15 GB 7B checkpoint takes seconds), once per
process and file: a sampled digest (:func:`embodied_rft.core.digest.file_digest` beyond 64 MiB) would miss a flipped
byte between its blocks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .atomic import atomic_directory, write_text_atomic
from .digest import json_digest, sha256_file

MANIFEST = "checksums.sha256"
RECORD_FIELD = "sha"


class IntegrityError(ValueError):
    """A file or record no longer matches the digest recorded when it was written."""

    def __init__(self, path: str | os.PathLike, problem: str, fix: str) -> None:
        self.path = Path(path)
        self.problem = problem
        self.fix = fix
        super().__init__(f"{path}: {problem}; {fix}")


def _listed(folder: Path) -> list[Path]:
    return sorted(f for f in folder.rglob("*") if f.is_file() and f.name != MANIFEST)


def seal_folder(folder: str | os.PathLike, files: Iterable[str | os.PathLike] | None = None) -> Path:
    """Write ``<folder>/checksums.sha256`` over ``files`` (default: every file under the folder), atomically."""
    root = Path(folder)
    paths = [root / f for f in files] if files is not None else _listed(root)
    lines = [f"{sha256_file(p)}  {p.relative_to(root).as_posix()}\n" for p in sorted(paths)]
    out = root / MANIFEST
    write_text_atomic(out, "".join(lines))
    return out


def read_manifest(folder: str | os.PathLike) -> dict[str, str] | None:
    """``{relative path: sha256}`` from the folder's manifest, or None when it has none."""
    man = Path(folder) / MANIFEST
    if not man.is_file():
        return None
    out: dict[str, str] = {}
    for lineno, line in enumerate(man.read_text("utf-8", errors="replace").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not name:
            raise IntegrityError(man, f"line {lineno} is not '<sha256>  <file>'", "the manifest itself is damaged")
        out[name] = digest
    return out


# Files this process already found matching their manifest, by path -> (digest, stat signature): a folder checked
# when a stage starts and again when its model loads is hashed once. Only files whose mtime was at least
# _SETTLED_NS old when hashed are remembered (git's "racy clean" rule): a write within the file system's timestamp
# granularity of the check could otherwise leave the signature unchanged.
_VERIFIED: dict[Path, tuple[str, tuple[int, int, int]]] = {}
_SETTLED_NS = 2_000_000_000


def _signature(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


def verify_folder(folder: str | os.PathLike, fix: str) -> bool:
    """Check every file the folder's manifest lists; True when checked, False when the folder has no manifest.

    Raises :class:`IntegrityError` (with ``fix``, what the caller's user should do) naming the first file that is
    missing or whose bytes changed since :func:`seal_folder`. A file this process already verified is not hashed
    again while its inode, size and mtime are unchanged."""
    root = Path(folder)
    listed = read_manifest(root)
    if listed is None:
        return False
    for name, digest in listed.items():
        p = root / name
        if not p.is_file():
            raise IntegrityError(p, f"missing (listed in {MANIFEST})", fix)
        key, st = p.resolve(), p.stat()
        if _VERIFIED.get(key) == (digest, _signature(st)):
            continue
        started = time.time_ns()
        actual = sha256_file(p)
        if actual != digest:
            _VERIFIED.pop(key, None)
            raise IntegrityError(
                p, f"sha256 {actual[:12]}… differs from {digest[:12]}… recorded in {MANIFEST} when it was written", fix
            )
        if st.st_mtime_ns < started - _SETTLED_NS:
            _VERIFIED[key] = (digest, _signature(st))
    return True


def record_digest(rec: dict[str, Any]) -> str:
    """The sha256 of a record's canonical JSON (:func:`~.digest.json_digest`), its own ``"sha"`` field left out."""
    return json_digest({k: v for k, v in rec.items() if k != RECORD_FIELD}, ensure_ascii=False)


def seal_record(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` with its ``"sha"`` set (a new dict; ``rec`` is not changed)."""
    return {**{k: v for k, v in rec.items() if k != RECORD_FIELD}, RECORD_FIELD: record_digest(rec)}


def record_intact(rec: Any) -> bool:
    """The record is a dict whose ``"sha"`` matches its content."""
    return isinstance(rec, dict) and rec.get(RECORD_FIELD) == record_digest(rec)


def save_pretrained_atomic(model: Any, tokenizer_or_processor: Any, out_dir: str | Path) -> None:
    """Save a Hugging Face checkpoint (model + tokenizer/processor) so ``out_dir`` is never half-written
    (:func:`atomic_directory`)."""
    with atomic_directory(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer_or_processor.save_pretrained(tmp)
        seal_folder(tmp)  # checksums.sha256: load_model verifies it (models/integrity.py)


__all__ = [
    "save_pretrained_atomic",
    "MANIFEST",
    "RECORD_FIELD",
    "IntegrityError",
    "read_manifest",
    "record_digest",
    "record_intact",
    "seal_folder",
    "seal_record",
    "verify_folder",
]
