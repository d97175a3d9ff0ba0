"""Atomic writes of files and folders: a killed stage never leaves a half-written output.

Files (:func:`atomic_open` and the ``write_*_atomic`` helpers): content goes to a temporary file in the same
directory, flushed and fsynced, then ``os.replace``d onto the output path, so DVC (or the next stage) reads
either the old file or the new one.

Folders (:func:`atomic_directory`) yield an empty sibling temp folder; when the ``with`` body finishes, the
folder is swapped onto the target with renames (the old target, if any, is moved aside first and deleted
after), so a reader sees either the complete old checkpoint or the complete new one. A body that raises leaves
the target untouched and the temp folder deleted. Both renames stay within one parent folder, hence one file
system. :func:`replace_directory` is the swap on its own, for a folder built elsewhere in the same parent
(several training processes that must agree on one staging path); ``core/integrity.py``'s ``save_pretrained_atomic``
writes a sealed Hugging Face checkpoint (model + tokenizer/processor) this way.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: Mode of every file written here: what ``open()`` would give (0o666 less the umask), not mkstemp's 0o600.
FILE_MODE = 0o666 & ~_umask()
DIR_MODE = 0o777 & ~_umask()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_SWEPT: set[Path] = set()  # folders whose dead writers' temps this process has already removed
_TEMP = re.compile(r"\..+\.(\d+)\.[A-Za-z0-9_]+\.tmp")


def remove_stale_temps(folder: str | os.PathLike) -> list[Path]:
    """Delete the temp files :func:`atomic_open` left in ``folder`` in processes that are gone (killed
    mid-write): ``.<name>.<pid>.<random>.tmp`` whose ``pid`` no longer runs. Returns what was removed."""
    removed = []
    for cand in Path(folder).glob(".*.tmp"):
        m = _TEMP.fullmatch(cand.name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            with contextlib.suppress(FileNotFoundError):
                cand.unlink()
                removed.append(cand)
    return removed


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Open a temp file next to ``path``; on clean exit fsync and rename it onto ``path`` (mode
    :data:`FILE_MODE`). Temps of earlier writers that were killed are removed first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = path.parent.resolve()
    if folder not in _SWEPT:  # once per folder and process: a folder of thousands of frames is listed once
        remove_stale_temps(folder)
        _SWEPT.add(folder)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path) as fh:
        fh.write(text)


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh, indent=indent, sort_keys=False, ensure_ascii=False)
        fh.write("\n")


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[Any]) -> int:
    """Write one JSON object per line, atomically; returns the number of records."""
    n = 0
    with atomic_open(path) as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
            fh.write("\n")
            n += 1
    return n


@contextmanager
def atomic_directory(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp folder next to ``target``; move it onto ``target`` on success."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    own = re.compile(rf"\.{re.escape(target.name)}\.(?:tmp|old)-(\d+)-[0-9a-f]{{8}}")
    for stale in target.parent.glob(f".{target.name}.*-*"):  # a killed writer's half-built or old folder
        m = own.fullmatch(stale.name)
        if m and stale.is_dir() and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_directory(tmp, target)


def normalize_modes(folder: str | os.PathLike) -> None:
    """Give everything under ``folder`` the modes of the files written here: :data:`FILE_MODE` for files
    (:data:`DIR_MODE` for executables) and :data:`DIR_MODE` for folders. Libraries that write through private temp
    files leave 0600 behind (``safetensors``' ``save_file``: every ``model.safetensors``). Symlinks and hard-linked
    files (weights linked from the Hugging Face cache) are not this folder's own and are left as they are."""
    for root, _, files in os.walk(folder):  # a symlinked folder is listed, never entered
        _set_mode(root, DIR_MODE)
        for name in files:
            _set_mode(os.path.join(root, name), FILE_MODE)


def _set_mode(path: str, mode: int) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink > 1):
        return
    if stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IXUSR:
        mode = DIR_MODE
    if stat.S_IMODE(st.st_mode) != mode:
        with contextlib.suppress(PermissionError):  # another user's file (a cluster job's) keeps its owner's mode
            os.chmod(path, mode)


def replace_directory(src: str | os.PathLike, target: str | os.PathLike) -> None:
    """Move folder ``src`` onto ``target`` (same file system), replacing what was there; modes are normalised first
    (:func:`normalize_modes`), so every output folder reads like the files :func:`atomic_open` writes."""
    src, target = Path(src), Path(target)
    normalize_modes(src)
    old = target.with_name(f".{target.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    if target.exists():
        os.replace(target, old)
    os.replace(src, target)
    shutil.rmtree(old, ignore_errors=True)


__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "atomic_directory",
    "atomic_open",
    "normalize_modes",
    "remove_stale_temps",
    "replace_directory",
    "write_json_atomic",
    "write_jsonl_atomic",
    "write_text_atomic",
]
