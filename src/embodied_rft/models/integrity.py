"""Checking a checkpoint folder is whole before loading it.

Input: a checkpoint folder (``models/base``, ``models/sft``, ``models/grpo`` or a cached hub snapshot).
Output: nothing, or :class:`DamagedCheckpointError` naming the damaged file and what to do.

Why: transformers reports a truncated ``model.safetensors`` as "Error while deserializing header: incomplete
metadata" without naming the file, a cut ``config.json`` as a bare ``JSONDecodeError``, and a folder whose
``tokenizer.json`` is gone loads "successfully" with a three-token tokenizer that encodes every prompt to
nothing. A copy cut short (a full disk, an interrupted ``dvc pull`` or ``cp``) produces exactly these. The structural
checks read only ``config.json`` and the safetensors headers (8 bytes plus a small JSON each), so they are
cheap even for a sharded 7B checkpoint: a safetensors file is complete iff its size is 8 + header length +
the end offset of its last tensor. A folder this project wrote also carries ``checksums.sha256``
(:mod:`embodied_rft.core.integrity`), and every byte is checked against it: a flipped byte or low mantissa bit
in the weights, which leaves the file well-formed, is found too.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from embodied_rft.core.integrity import MANIFEST, IntegrityError, verify_folder

from .pretrained import ModelNotAvailableError

# Any one of these makes a loadable tokenizer (fast tokenizer file, BPE vocab, or a sentencepiece model).
_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")
_FIX = (
    "the checkpoint is damaged; rebuild it (re-run the stage that wrote it, e.g. `dvc repro -f <stage>`) "
    "or restore it (`dvc checkout`)"
)


class DamagedCheckpointError(ModelNotAvailableError):
    """A checkpoint folder exists but a file in it is missing, cut short or unreadable."""


def _safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete safetensors file, or None when it is."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{size} bytes: too short to hold a safetensors header"
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            return f"header of {n} bytes runs past the end of the {size}-byte file (cut short)"
        try:
            header = json.loads(fh.read(n))
        except (ValueError, UnicodeDecodeError):
            return "header is not valid JSON"
    if not isinstance(header, dict):
        return "header is not a JSON object"
    ends = [
        t["data_offsets"][1]
        for k, t in header.items()
        if k != "__metadata__" and isinstance(t, dict) and "data_offsets" in t
    ]
    need = 8 + n + max(ends, default=0)
    if size < need:
        return f"{size} bytes, but its header describes {need} (cut short)"
    return None


def check_checkpoint(path: str | Path) -> None:
    """Raise :class:`DamagedCheckpointError` unless ``path`` holds a readable config, complete weights and a
    tokenizer."""
    p = Path(path)
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise DamagedCheckpointError(f"{p}: no config.json (not a checkpoint folder, or {_FIX})")
    try:
        cfg = json.loads(cfg_file.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise DamagedCheckpointError(f"{cfg_file}: not valid JSON ({exc}); {_FIX}") from None
    if not isinstance(cfg, dict):
        raise DamagedCheckpointError(f"{cfg_file}: expected a JSON object; {_FIX}")

    index = p / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text("utf-8"))["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DamagedCheckpointError(f"{index}: unreadable shard index ({type(exc).__name__}); {_FIX}") from None
        weights = [p / s for s in shards]
    elif (p / "model.safetensors").exists():
        weights = [p / "model.safetensors"]
    elif (p / "pytorch_model.bin").is_file():
        weights = []  # a pickle: no cheap completeness check; transformers names it if it fails
    else:
        raise DamagedCheckpointError(f"{p}: no weights (model.safetensors); {_FIX}")
    for w in weights:
        problem = _safetensors_problem(w)
        if problem:
            raise DamagedCheckpointError(f"{w}: {problem}; {_FIX}")

    if not any((p / f).is_file() for f in _TOKENIZER_FILES):
        raise DamagedCheckpointError(
            f"{p}: no tokenizer files (one of {list(_TOKENIZER_FILES)}): it would load as an empty tokenizer; {_FIX}"
        )
    try:
        # checksums.sha256 of a folder this project wrote: every byte as written
        verify_folder(p, f"{_FIX}; if you replaced the file on purpose, delete {p / MANIFEST}")
    except IntegrityError as exc:
        raise DamagedCheckpointError(str(exc)) from None


__all__ = ["DamagedCheckpointError", "check_checkpoint"]
