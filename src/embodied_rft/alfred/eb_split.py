"""EmbodiedBench split files -> EB-style evaluation episodes, and the check against EB's gold NL Steps.

Input: a split file in EmbodiedBench's format (``embodiedbench/envs/eb_alfred/data/splits/<subset>.json``,
or ``shared/embodiedbench/eb_alfred_examples.json``): either a mapping ``{subset: [record, ...]}`` or a
list of records whose subset is the file's stem (``base.json``). A record has ``full_scene_name``
(``<task>/<trial>`` of an ALFRED split), ``repeat_idx`` (the annotation it rewrites), ``task
description`` (the subset's instruction), optional ``task type`` and ``NL Steps`` (the gold plan).
Output: :class:`EbRecord` records; :func:`compare_nl_steps` says how a converted plan differs from the
NL Steps after :func:`~embodied_rft.alfred.names.normalize_action`.

The NL Steps are a noisy reference (docs/facts.md §4.5): a converted plan equals them, or differs only by the
insertions documented in :mod:`embodied_rft.alfred.convert` (:data:`INSERTION_NOTES` says which
departure explains which inserted action), or, for ``held_object``, by naming the object actually held.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rft.alfred.names import normalize_action
from embodied_rft.data.jsonl import DataError
from embodied_rft.schema import SUBSETS, TASK_TYPES


@dataclass(frozen=True)
class EbRecord:
    subset: str
    index: int  # 1-based position in the subset's list (EB numbers its episodes this way)
    full_scene_name: str
    repeat_idx: int
    instruction: str
    task_type: str | None
    nl_steps: tuple[str, ...] | None


def read_eb_split(path: str | os.PathLike) -> list[EbRecord]:
    """Read an EB split file; DataError names the file, the subset, the record and the field."""
    p = Path(path)
    try:
        data = json.loads(p.read_text("utf-8"))
    except FileNotFoundError:
        raise DataError(f"{p}: file not found") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{p}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if isinstance(data, list):
        if p.stem not in SUBSETS:
            raise DataError(f"{p}: a list of records must be in a file named after its subset ({list(SUBSETS)})")
        data = {p.stem: data}
    if not isinstance(data, dict):
        raise DataError(f"{p}: expected a mapping of subset -> records or a list, got {type(data).__name__}")
    out = []
    for subset, recs in data.items():
        if subset not in SUBSETS:
            raise DataError(f"{p}: field '{subset}': unknown subset (expected one of {list(SUBSETS)})")
        if not isinstance(recs, list):
            raise DataError(f"{p}: field '{subset}' must be a list of records")
        for i, r in enumerate(recs):
            out.append(_record(r, subset, i, p))
    return out


def _record(r: Any, subset: str, i: int, p: Path) -> EbRecord:
    where = f"{p}: field '{subset}[{i}]"

    def get(key: str, typ: type, optional: bool = False) -> Any:
        if not isinstance(r, dict):
            raise DataError(f"{where}' must be an object")
        if key not in r:
            if optional:
                return None
            raise DataError(f"{where}.{key}': missing")
        v = r[key]
        if isinstance(v, bool) or not isinstance(v, typ):
            raise DataError(f"{where}.{key}' must be {typ.__name__}, got {type(v).__name__} {str(v)[:60]!r}")
        return v

    name = get("full_scene_name", str)
    tt = get("task type", str, optional=True)
    if tt is not None and tt not in TASK_TYPES:
        raise DataError(f"{where}.task type': unknown task type {tt!r}")
    steps = get("NL Steps", list, optional=True)
    if steps is not None and not all(isinstance(s, str) for s in steps):
        raise DataError(f"{where}.NL Steps' must be a list of strings")
    repeat = get("repeat_idx", int)
    if repeat < 0:
        raise DataError(f"{where}.repeat_idx' must be >= 0, got {repeat}")
    return EbRecord(
        subset=subset,
        index=i + 1,
        full_scene_name=name.strip("/"),
        repeat_idx=repeat,
        instruction=get("task description", str).strip(),
        task_type=tt,
        nl_steps=tuple(steps) if steps is not None else None,
    )


# Which documented departure (convert.NOTES) can explain an inserted action, by normalised verb/object.
INSERTION_NOTES = {
    "turn on faucet": ("faucet",),
    "turn off faucet": ("faucet",),
    "open": ("open_before_put", "open_container"),
    "close": ("open_before_put", "open_container"),
    "find": ("find_before_put", "find_before_interact"),
}


@dataclass(frozen=True)
class NlComparison:
    equal: bool
    inserted: tuple[str, ...]  # normalised actions in ours, not in the NL Steps
    deleted: tuple[str, ...]  # normalised NL Steps actions missing from ours
    replaced: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # (NL Steps part, our part)

    def unexplained(self, notes: dict[str, int]) -> list[str]:
        """Differences no departure in ``notes`` accounts for (empty: the difference is documented)."""
        bad = []
        for a in self.inserted:
            key = a if a in INSERTION_NOTES else a.split(" ")[0]
            if not any(notes.get(n) for n in INSERTION_NOTES.get(key, ())):
                bad.append(f"inserted {a!r}")
        bad += [f"deleted {a!r}" for a in self.deleted]
        for gold, ours in self.replaced:
            if not notes.get("held_object"):
                bad.append(f"replaced {list(gold)} by {list(ours)}")
        return bad


def compare_nl_steps(plan: list[str] | tuple[str, ...], nl_steps: list[str] | tuple[str, ...]) -> NlComparison:
    """Align a converted plan with EB's gold NL Steps (both normalised)."""
    ours = [normalize_action(a) for a in plan]
    gold = [normalize_action(a) for a in nl_steps]
    ins: list[str] = []
    dele: list[str] = []
    rep: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=gold, b=ours, autojunk=False).get_opcodes():
        if op == "insert":
            ins += ours[j1:j2]
        elif op == "delete":
            dele += gold[i1:i2]
        elif op == "replace":
            rep.append((tuple(gold[i1:i2]), tuple(ours[j1:j2])))
    return NlComparison(equal=ours == gold, inserted=tuple(ins), deleted=tuple(dele), replaced=tuple(rep))
