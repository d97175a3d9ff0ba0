"""The `prepare` stage's library entry: normalised episodes from the configured source.

Inputs: the ``data`` config section — ``source: generated`` uses ``data.generator`` (the symbolic world's
seeded task generator); ``source: alfred`` uses the flat ALFRED keys (``data.alfred_dir``, ``data.on_error``,
``data.eb_split_file`` ...). Both halves are validated whatever the source, so a typo fails fast.
Outputs: ``<episodes_dir>/<split>.jsonl`` written atomically and ``metrics/prepare.json`` with counts per split,
task type and subset (for ALFRED also the replay success rate of the converted plans, failures by reason).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embodied_rft.core.atomic import write_json_atomic

from .config import ConfigError, build, to_plain


def run_prepare(data_cfg: Any, episodes_dir: str | Path, metrics_path: str | Path) -> dict:
    from .alfred import AlfredConfig, run_prepare_alfred
    from .world.generator import GeneratorConfig, run_prepare_generated

    data = dict(to_plain(data_cfg) or {})
    source = data.pop("source", None)
    gen_cfg = build(GeneratorConfig, data.pop("generator", {}), "data.generator")
    alfred_cfg = build(AlfredConfig, data, "data")
    if source == "generated":
        metrics = run_prepare_generated(gen_cfg, episodes_dir)
    elif source == "alfred":
        metrics = run_prepare_alfred(alfred_cfg, episodes_dir)
    else:
        raise ConfigError(f"data.source: {source!r} is not one of ['generated', 'alfred']")
    metrics = {**metrics, "source": source}
    write_json_atomic(metrics_path, metrics)
    return metrics
