"""Read and check SFT chat records, and turn them into what the trainer takes.

Input: ``data/distilled/sft.jsonl``, one record per line::

    {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...],
     "images": ["relative/path.png", ...]}          # optional; relative to the JSONL file's folder

(other keys, such as ``sample_id``, are ignored). The last message must be the assistant's answer; it is
what the loss is computed on. Output: :class:`SFTRecord`s, then a ``datasets.Dataset`` of
``{"messages"}`` rows for text models (TRL tokenises it once, up front) or of ``{"messages", "images"}``
rows for vision models (images decoded lazily, per batch).

A text-only model given records with images trains on their text alone (the prompt still describes the
scene in words); the number of images dropped is reported, not hidden.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rft.data.jsonl import DataError, iter_jsonl, require

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class SFTRecord:
    """One training conversation; ``images`` are absolute paths."""

    messages: tuple[dict, ...]
    images: tuple[Path, ...]
    where: str

    @property
    def prompt(self) -> list[dict]:
        """The conversation without the final assistant answer (what the model is asked)."""
        return [dict(m) for m in self.messages[:-1]]

    @property
    def answer(self) -> str:
        return self.messages[-1]["content"]


def _parse(rec: dict, where: str, root: Path) -> SFTRecord:
    messages = require(rec, "messages", list, where)
    if not messages:
        raise DataError(f"{where}: field 'messages' is empty")
    out = []
    for i, m in enumerate(messages):
        w = f"{where}: messages[{i}]"
        if not isinstance(m, dict):
            raise DataError(f"{w}: expected an object, got {type(m).__name__}")
        role = require(m, "role", str, w)
        if role not in ROLES:
            raise DataError(f"{w}: field 'role' must be one of {list(ROLES)}, got {role!r}")
        content = require(m, "content", str, w)
        out.append({"role": role, "content": content})
    if out[-1]["role"] != "assistant":
        raise DataError(
            f"{where}: the last message must be the assistant's answer (role 'assistant'), got {out[-1]['role']!r}"
        )
    if not any(m["role"] == "user" for m in out):
        raise DataError(f"{where}: 'messages' has no user turn")
    images: list[Path] = []
    if rec.get("images") is not None:
        raw = require(rec, "images", list, where)
        for j, p in enumerate(raw):
            if not isinstance(p, str) or not p:
                raise DataError(f"{where}: images[{j}] must be a non-empty relative path, got {p!r}")
            path = root / p
            if not path.is_file():
                raise DataError(f"{where}: images[{j}] {p!r} not found (looked in {path})")
            images.append(path)
    return SFTRecord(tuple(out), tuple(images), where)


def read_sft_records(path: str | Path, limit: int | None = None) -> list[SFTRecord]:
    """The records of an SFT JSONL file (the first ``limit`` if given); errors name file:line and field."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: SFT data file not found")
    root = path.parent
    records = []
    for line_no, rec in iter_jsonl(path):
        records.append(_parse(rec, f"{path}:{line_no}", root))
        if limit is not None and len(records) >= limit:
            break
    if not records:
        raise DataError(f"{path}: no SFT records")
    return records


def open_image(path: Path) -> Any:
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def to_train_dataset(records: list[SFTRecord], vision: bool) -> tuple[Any, int]:
    """(dataset for the trainer, number of images dropped because the model has no vision tower).

    Vision rows keep image *paths* in a ``datasets.Image`` column, so pixels are decoded per batch, when
    the collator asks for them, not all at once.
    """
    from datasets import Dataset, Features, Image, List, Value

    rows = [{"messages": [dict(m) for m in r.messages]} for r in records]
    message = {"role": Value("string"), "content": Value("string")}
    if vision:
        for row, r in zip(rows, records):
            row["images"] = [str(p) for p in r.images]
        features = Features({"messages": List(message), "images": List(Image())})
        return Dataset.from_list(rows, features=features), 0
    dropped = sum(len(r.images) for r in records)
    if dropped:
        log.warning(
            "the model has no vision tower: training on the text of %d image records (%d images dropped)",
            sum(1 for r in records if r.images),
            dropped,
        )
    return Dataset.from_list(rows, features=Features({"messages": List(message)})), dropped


def corpus_texts(records: list[SFTRecord]):
    """Every message text of ``records`` (the tiny tokenizer's training corpus)."""
    for r in records:
        for m in r.messages:
            yield m["content"]
