"""The persistent teacher-answer cache: every answer paid for is stored once and never asked for again.

Input: a cache path (a ``.sqlite``/``.db`` file, or a directory that gets ``answers.sqlite``). Keys are the
sha256 of the canonical JSON of the exact request (messages, model, sampling params) plus the sample index,
so changing the prompt, model or temperature asks again while a rerun or a resumed run reuses every answer.
Storage is SQLite in WAL mode with ``synchronous=FULL``: each answer is committed (and fsynced) on its own
before the run goes on, so SIGKILL or Ctrl-C loses at most the requests in flight; readers and a writer in
another process may share the file. Only answers are stored — no headers, no keys.

Each row carries the sha256 of its key and answer fields (``digest``), written with it; :meth:`ResponseCache.get`
recomputes it, and a row that no longer matches (an answer edited by hand, still valid JSON) is deleted and
reported as a miss, so the answer is asked for again and the run says so (:attr:`ResponseCache.rejected`, the
``cache_rejected`` counter in distill's metrics) instead of training on it. A cache written before digests
existed is sealed once, when first opened by this code (its rows are trusted that one time, and logged).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ..core.digest import json_digest
from .base import Answer

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    sample_id TEXT NOT NULL,
    sample_index INTEGER NOT NULL,
    text TEXT NOT NULL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    finish_reason TEXT,
    created REAL NOT NULL,
    digest TEXT
)
"""


def row_digest(key: str, text: str, tokens_in: int, tokens_out: int, finish_reason: str | None) -> str:
    """The sha256 of an answer row's identity and content (what :meth:`ResponseCache.get` hands out)."""
    return json_digest([key, text, tokens_in, tokens_out, finish_reason], ensure_ascii=False)


def _digest_data_urls(obj: Any) -> Any:
    """The request with every inline data URL replaced by its sha256: same identity, a fraction of the size."""
    if isinstance(obj, str):
        if obj.startswith("data:") and len(obj) > 256:
            return "sha256:" + hashlib.sha256(obj.encode("ascii", "replace")).hexdigest()
        return obj
    if isinstance(obj, dict):
        return {k: _digest_data_urls(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_digest_data_urls(v) for v in obj]
    return obj


def cache_key(request: dict[str, Any], sample_index: int) -> str:
    """sha256 of the canonical JSON of (request, sample index); the request holds messages, model and
    sampling params. Images travel inside the messages as data URLs and enter the key by their digest, so
    a changed image is a new key."""
    blob = json.dumps(
        {"request": _digest_data_urls(request), "sample_index": sample_index},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def resolve_path(path: str | Path) -> Path:
    path = Path(path)
    return path if path.suffix in (".sqlite", ".db", ".sqlite3") else path / "answers.sqlite"


class ResponseCache:
    """Thread-safe key -> :class:`Answer` store (one connection, one lock; each put is its own transaction)."""

    def __init__(self, path: str | Path):
        self.path = resolve_path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # isolation_level=None: autocommit; each INSERT is durable when execute() returns.
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)
        self.rejected = 0  # rows found not matching their digest (deleted; asked again)
        self._seal_legacy_rows()

    def _seal_legacy_rows(self) -> None:
        """Add the ``digest`` column to a cache written before it existed, and seal its rows (once)."""
        with self._lock:
            cols = {r[1] for r in self._db.execute("PRAGMA table_info(answers)")}
            if "digest" in cols:
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cols = {r[1] for r in self._db.execute("PRAGMA table_info(answers)")}
                if "digest" in cols:  # another process sealed it meanwhile
                    self._db.execute("COMMIT")
                    return
                self._db.execute("ALTER TABLE answers ADD COLUMN digest TEXT")
                rows = self._db.execute(
                    "SELECT key, text, tokens_in, tokens_out, finish_reason FROM answers"
                ).fetchall()
                self._db.executemany(
                    "UPDATE answers SET digest = ? WHERE key = ?", [(row_digest(*r), r[0]) for r in rows]
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        log.warning("%s: sealed %d answers cached before digests existed (trusted this once)", self.path, len(rows))

    def get(self, key: str) -> Answer | None:
        """The cached answer, or None: absent, or its row no longer matches its digest (then deleted, and
        counted in :attr:`rejected`, so the answer is asked again)."""
        with self._lock:
            row = self._db.execute(
                "SELECT text, tokens_in, tokens_out, finish_reason, digest FROM answers WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            if row[4] != row_digest(key, *row[:4]):
                self._db.execute("DELETE FROM answers WHERE key = ?", (key,))
                self.rejected += 1
                log.warning(
                    "%s: cached answer %s… does not match the digest written with it (edited or damaged); "
                    "deleted, it is asked for again",
                    self.path,
                    key[:12],
                )
                return None
        return Answer(row[0], row[1], row[2], row[3])

    def put(self, key: str, answer: Answer, *, model: str, sample_id: str, sample_index: int) -> bool:
        """Store an answer; False (and no change) if the key is already there — the first answer wins."""
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO answers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    model,
                    sample_id,
                    sample_index,
                    answer.text,
                    answer.tokens_in,
                    answer.tokens_out,
                    answer.finish_reason,
                    time.time(),
                    row_digest(key, answer.text, answer.tokens_in, answer.tokens_out, answer.finish_reason),
                ),
            )
            return cur.rowcount == 1

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]

    def keys(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT key FROM answers")}

    def close(self) -> None:
        with self._lock:
            try:
                # fold the WAL back into the main file so the cache is one self-contained file at rest
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                self._db.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
