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

from embodied_rft.core.atomic import atomic_directory
from embodied_rft.core.metrics import write_metrics

from .config import ConfigError, build, to_plain


def run_prepare(data_cfg: Any, episodes_dir: str | Path, metrics_path: str | Path) -> dict:
    from .alfred import AlfredConfig, run_prepare_alfred
    from .world.generator import GeneratorConfig, run_prepare_generated

    data = dict(to_plain(data_cfg) or {})
    source = data.pop("source", None)
    gen_cfg = build(GeneratorConfig, data.pop("generator", {}), "data.generator")
    alfred_cfg = build(AlfredConfig, data, "data")
    if source not in ("generated", "alfred"):
        raise ConfigError(f"data.source: {source!r} is not one of ['generated', 'alfred']")
    # the whole folder is swapped in at the end (dvc.yaml keeps outputs in place until then: persist)
    with atomic_directory(episodes_dir) as tmp:
        if source == "generated":
            metrics = run_prepare_generated(gen_cfg, tmp)
        else:
            metrics = run_prepare_alfred(alfred_cfg, tmp)
    metrics = {**metrics, "source": source}
    write_metrics(metrics_path, metrics, {"source": True, "splits": {"*": {"episodes": True}}})
    return metrics
