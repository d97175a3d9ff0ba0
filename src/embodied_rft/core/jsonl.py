"""Line-checked JSONL reading: readers name the file and line of any malformed record (and the field, through
:func:`require`). Writing goes through :mod:`embodied_rft.core.atomic`. In the core so that the record formats
(``schema.py``, ``world/episode.py``) read files without importing ``data/``, which builds on them; ``data/jsonl.py``
is the name the rest of the project imports it by.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class DataError(ValueError):
    """Bad input data; the message names the file, the line (when there is one) and the field."""


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """Yield (line number, record) for each non-empty line; a bad line raises DataError."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    with path.open("r", encoding="utf-8", errors="strict") as fh:
        lineno = 0
        while True:
            try:
                line = fh.readline()
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}:{lineno + 1}: not valid UTF-8 ({exc.reason})") from None
            if not line:
                break
            lineno += 1
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(rec, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            yield lineno, rec


def read_jsonl(path: str | os.PathLike, parse: Callable[[dict, str], T] | None = None) -> list[T]:
    """Read a JSONL file; ``parse(record, where)`` (where = 'file:line') validates each record."""
    out = []
    for lineno, rec in iter_jsonl(path):
        out.append(parse(rec, f"{path}:{lineno}") if parse else rec)
    return out


def require(rec: dict, field: str, typ: type | tuple[type, ...], where: str) -> Any:
    """Fetch ``rec[field]`` checking its type; errors name ``where`` and the field."""
    if field not in rec:
        raise DataError(f"{where}: missing field '{field}'")
    val = rec[field]
    if isinstance(val, bool) and typ in (int, float):
        raise DataError(f"{where}: field '{field}' must be {typ.__name__}, got bool")
    if not isinstance(val, typ):
        tn = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise DataError(f"{where}: field '{field}' must be {tn}, got {type(val).__name__} {str(val)[:60]!r}")
    return val
