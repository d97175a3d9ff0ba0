"""Metrics files that hold headline numbers only, with the complete record beside them.

A stage's ``metrics/<stage>.json`` is what ``dvc metrics show`` and ``dvc metrics diff`` print: success by model
and subset, paired tests, reward and accuracy before and after, losses, throughput. Configs, lineage, per-update
history and per-episode results make those tables unreadable (thousands of columns), so :func:`write_metrics`
writes the complete record to ``metrics/<stage>.details.json`` (a plain DVC output, not a metric) and the
headline, picked from it by a :data:`Spec`, to the metrics file. Both are written atomically.

A spec is a nested mapping: ``True`` keeps a value whole, a mapping keeps the listed keys of a mapping, and
``"*"`` applies one spec to every key (``{"models": {"*": {"interactive": {"overall": ...}}}}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from embodied_rft.core.atomic import write_json_atomic

Spec = bool | Mapping[str, "Spec"]


def details_path(metrics_path: str | Path) -> Path:
    """``metrics/grpo.json`` -> ``metrics/grpo.details.json``."""
    p = Path(metrics_path)
    return p.with_name(f"{p.stem}.details{p.suffix}")


def pick(record: Any, spec: Spec) -> Any:
    """The part of ``record`` that ``spec`` names (keys absent from the record are skipped)."""
    if spec is True or not isinstance(record, Mapping):
        return record
    out: dict[str, Any] = {}
    if "*" in spec:
        for k, v in record.items():
            out[k] = pick(v, spec["*"])
        return out
    for k, sub in spec.items():
        if k in record and sub:
            out[k] = pick(record[k], sub)
    return out


def write_metrics(metrics_path: str | Path, record: Mapping[str, Any], headline: Spec) -> dict:
    """Write ``record`` whole to :func:`details_path` and its ``headline`` part to ``metrics_path``; returns the
    headline."""
    write_json_atomic(details_path(metrics_path), record)
    head = pick(record, headline)
    write_json_atomic(metrics_path, head)
    return head


__all__ = ["Spec", "details_path", "pick", "write_metrics"]
