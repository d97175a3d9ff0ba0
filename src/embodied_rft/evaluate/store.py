"""Append-only, crash-safe per-episode results, so an interrupted evaluation resumes where it stopped.

Input: a results path (``<work_dir>/<model>/episodes.jsonl``) and a fingerprint of everything that decides a
result (the model's files, the policy, the limits, the prompt and generation settings). Output: the results
already there (:meth:`ResultStore.done`) and :meth:`ResultStore.append`, which writes one JSON line, flushes
and fsyncs it before returning, so a record that was reported written survives a crash or a kill.

On open: a fingerprint that differs from the one in ``<path>.meta.json`` (a retrained model, new limits)
discards the old results (they describe something else); a last line cut short by a crash is dropped and
the file truncated to the last complete record; each record carries a hash of its episode, so an episode
whose content changed under the same id is run again; and each record carries the digest of its own content
(:func:`embodied_rft.core.integrity.seal_record`), so a record edited or damaged on disk after it was written
(one success flag flipped) is not used: its episode runs again, and the store says so (:attr:`rejected`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from embodied_rft.core.atomic import write_json_atomic
from embodied_rft.core.digest import folder_digests, json_digest
from embodied_rft.core.integrity import RECORD_FIELD, record_intact, seal_record

log = logging.getLogger(__name__)


def episode_hash(ep: dict) -> str:
    return json_digest(ep, 16, ensure_ascii=False)


def dir_fingerprint(path: str | os.PathLike) -> str:
    """A digest of a checkpoint directory: its files' names and contents (:mod:`embodied_rft.core.digest`'s rule)."""
    return fingerprint(folder_digests(path))


def fingerprint(obj: Any) -> str:
    return json_digest(obj)


class ResultStore:
    def __init__(self, path: str | os.PathLike, fp: str, resume: bool = True) -> None:
        self.path = Path(path)
        self.meta_path = self.path.with_name(self.path.name + ".meta.json")
        self.fp = fp
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: dict[str, dict] = {}
        self.rejected: list[int] = []  # line numbers of records that do not match their digest (rerun)
        old_fp = None
        if self.meta_path.exists():
            try:
                old_fp = json.loads(self.meta_path.read_text("utf-8")).get("fingerprint")
            except (OSError, ValueError):
                old_fp = None
        if self.path.exists() and (not resume or old_fp != fp):
            why = "resume is off" if not resume else "the model or settings changed"
            log.info("%s: discarding earlier results (%s)", self.path, why)
            self.path.unlink()
        write_json_atomic(self.meta_path, {"fingerprint": fp})
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        with self.path.open("rb") as fh:
            data = fh.read()
        good_end = data.rfind(b"\n") + 1
        if good_end < len(data):
            # a record cut short by a crash: drop it (its episode runs again) so appends start on a fresh line
            log.warning("%s: dropping an incomplete last record (%d bytes)", self.path, len(data) - good_end)
            with self.path.open("r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())
        for lineno, line in enumerate(data[:good_end].splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                log.warning("%s:%d: unreadable record skipped (its episode runs again)", self.path, lineno)
                continue
            if not record_intact(rec):
                self.rejected.append(lineno)
                continue
            if isinstance(rec.get("episode_id"), str):
                rec.pop(RECORD_FIELD)
                self._records[rec["episode_id"]] = rec
        if self.rejected:
            shown = ", ".join(map(str, self.rejected[:10])) + (" …" if len(self.rejected) > 10 else "")
            log.warning(
                "%s: %d record(s) do not match the digest written with them (edited or damaged; lines %s): "
                "not used, their episodes run again",
                self.path,
                len(self.rejected),
                shown,
            )

    def done(self, ep: dict) -> dict | None:
        """The stored result of ``ep``, or None when it must run (absent, or the episode changed)."""
        rec = self._records.get(ep["episode_id"])
        if rec is not None and rec.get("episode_hash") == episode_hash(ep):
            return rec
        return None

    def append(self, rec: dict) -> None:
        line = json.dumps(seal_record(rec), ensure_ascii=False, separators=(",", ":")) + "\n"
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self._records[rec["episode_id"]] = rec

    def __len__(self) -> int:
        return len(self._records)
