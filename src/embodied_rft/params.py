"""Generate ``params.yaml`` from ``conf/`` — the one source of truth — and check it is not stale.

``python -m embodied_rft.params`` (``make params``) composes ``conf/config.yaml`` exactly as DVC's Hydra
integration does for ``dvc exp run`` (``dvc.utils.hydra.compose_and_dump``) and writes it with a
"generated, do not edit" header. ``--check`` exits 1 when the committed file differs from a fresh
composition, naming the first differing key (a test runs it), so a hand edit or a forgotten
``make params`` cannot silently drift.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from embodied_rft.core.atomic import write_text_atomic
from embodied_rft.pipeline import compose, compose_text

HEADER = (
    "# GENERATED from conf/ by `make params` (python -m embodied_rft.params) -- do not edit.\n"
    "# Edit conf/ instead; `dvc exp run -S key=value` recomposes this file through DVC's Hydra integration.\n"
)


def section_configs(cfg: dict[str, Any]) -> dict[str, Any]:
    """Build every stage's frozen config from a composed config, so a bad value fails at `make params` with
    its dotted key instead of minutes into `dvc repro`. Every extension the ``plugins:`` table names is imported
    first (core/plugins.py), so its sections are checked whether the config uses it or not, and a top-level section
    an extension contributes (VeGAS's ``synth``, ``verifier``, ``bon``) is built by its dataclass."""
    from .alfred import AlfredConfig
    from .config import build
    from .core import plugins
    from .data.decompose import DecomposeConfig
    from .data.prompt import PromptConfig
    from .evaluate.config import EvalConfig
    from .models import ModelConfig
    from .pipeline import Paths
    from .reward import RewardConfig
    from .teacher.config import TeacherConfig
    from .train.grpo.config import GRPOConfig
    from .train.sft.config import SFTConfig
    from .world.generator import GeneratorConfig

    plugins.load_all(cfg.get("plugins"))

    data = dict(cfg["data"])
    data.pop("source", None)
    out: dict[str, Any] = {
        "paths": Paths.from_config(cfg["paths"]),
        "data.generator": build(GeneratorConfig, data.pop("generator", {}), "data.generator"),
        "data": build(AlfredConfig, data, "data"),
    }
    for key, cls in (
        ("prompt", PromptConfig),
        ("decompose", DecomposeConfig),
        ("teacher", TeacherConfig),
        ("model", ModelConfig),
        ("sft", SFTConfig),
        ("grpo", GRPOConfig),
        ("reward", RewardConfig),
        ("evaluate", EvalConfig),
        *((key, cls) for key, cls in plugins.SECTIONS.items() if "." not in key and key in cfg),
    ):
        out[key] = build(cls, cfg[key], key)
    return out


def _first_diff(a: Any, b: Any, key: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{key}.{k}" if key else str(k)
            if k not in a:
                return f"{sub}: missing from params.yaml"
            if k not in b:
                return f"{sub}: in params.yaml but not in conf/"
            d = _first_diff(a[k], b[k], sub)
            if d:
                return d
        return None
    if a != b:
        return f"{key}: params.yaml has {a!r}, conf/ gives {b!r}"
    return None


def stale_reason(params_path: str | Path = "params.yaml", config_dir: str | Path = "conf") -> str | None:
    """None when params.yaml equals a fresh composition of conf/, else the first difference."""
    p = Path(params_path)
    if not p.exists():
        return f"{p}: missing; run `make params`"
    try:
        current = yaml.safe_load(p.read_text("utf-8"))
    except yaml.YAMLError as exc:
        return f"{p}: not valid YAML ({exc}); run `make params`"
    return _first_diff(current, compose(config_dir))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=paper_qwen25vl_7b")
    ap.add_argument("--out", default="params.yaml")
    ap.add_argument("--conf", default="conf")
    ap.add_argument("--check", action="store_true", help="exit 1 if --out is stale w.r.t. conf/")
    args = ap.parse_args(argv)
    if args.check:
        reason = stale_reason(args.out, args.conf)
        if reason:
            print(
                f"params.yaml is stale: {reason}\nRun `make params` (never edit params.yaml by hand).", file=sys.stderr
            )
            return 1
        print(f"{args.out} is up to date with {args.conf}/")
        return 0
    text = compose_text(args.conf, args.overrides)
    try:
        section_configs(yaml.safe_load(text))
    except (ValueError, KeyError) as exc:
        print(f"invalid config: {exc}", file=sys.stderr)
        return 2
    write_text_atomic(args.out, HEADER + text)
    print(f"wrote {args.out}")
    return 0


__all__ = ["HEADER", "compose", "compose_text", "main", "section_configs", "stale_reason"]


if __name__ == "__main__":
    sys.exit(main())
