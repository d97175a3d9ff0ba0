"""Shared decorator for stage entry points.

Run by hand, a stage composes ``conf/`` (Hydra overrides and ``-m`` multirun work); under DVC, dvc.yaml passes
``--config-dir . --config-name params`` so Hydra loads the generated params.yaml (and ``dvc exp run -S`` reaches
the stage). ``version_base="1.3"``: Hydra does not change the working directory.

A bad setting or a bad input file ends the stage with one line on stderr (the dotted key or file:line and what
to change) and exit status 2, not a traceback, as does a failed job outside the stage (``StageFailed``: which job,
its error, the outputs left unchanged); ``HYDRA_FULL_ERROR=1`` shows the traceback. A mistyped override
(``sft.max_step=3``) is caught before Hydra, whose own advice for it (append with ``+``) would mislead.
"""

import difflib
import functools
import os
import sys
from pathlib import Path

import hydra

from embodied_rft.config import ConfigError, StageFailed
from embodied_rft.data.jsonl import DataError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def _config_source(argv: list[str]) -> tuple[Path, str]:
    """The primary config Hydra will load: ``--config-dir``/``-cd`` and ``--config-name``/``-cn``, else conf/config."""
    cdir, name = CONF_DIR, "config"
    for i, a in enumerate(argv):
        for flags, set_ in ((("--config-dir", "-cd"), "dir"), (("--config-name", "-cn"), "name")):
            for f in flags:
                val = (
                    a[len(f) + 1 :] if a.startswith(f + "=") else argv[i + 1] if a == f and i + 1 < len(argv) else None
                )
                if val is not None:
                    if set_ == "dir":
                        cdir = Path(val).resolve()
                    else:
                        name = val
    return cdir, name


def unknown_override(argv: list[str]) -> str | None:
    """The first ``a.b.c=value`` override whose key the composed config lacks, as one line with the closest key
    (``sft.max_step: unknown key; did you mean 'max_steps'?``); None when every key exists. Group choices
    (``grpo=openrlhf``), appends (``+key``), deletions (``~key``) and ``hydra.*`` are left to Hydra."""
    dotted = [
        a
        for a in argv
        if "=" in a
        and not a.startswith(("-", "+", "~", "hydra.", "hydra/"))
        and "." in a.split("=", 1)[0]
        and "@" not in a.split("=", 1)[0]
    ]
    if not dotted:
        return None
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import DictConfig

    groups = [a for a in argv if "=" in a and "." not in a.split("=", 1)[0] and not a.startswith(("-", "+", "~"))]
    cdir, name = _config_source(argv)
    try:
        with initialize_config_dir(config_dir=str(cdir), version_base="1.3"):
            cfg = compose(config_name=name, overrides=groups)
    except Exception:  # noqa: BLE001 - a composition problem is Hydra's to report, with its own message
        return None
    finally:
        GlobalHydra.instance().clear()
    for ov in dotted:
        node, where = cfg, []
        for part in ov.split("=", 1)[0].split("."):
            if not isinstance(node, DictConfig):
                break
            if part not in node:
                keys = [str(k) for k in node.keys()]
                close = difflib.get_close_matches(part, keys, n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {sorted(keys)}"
                return f"{'.'.join([*where, part])}: unknown key; {hint}"
            node, where = node[part], [*where, part]
    return None


def stage_main(fn):
    @functools.wraps(fn)
    def task(cfg) -> None:
        try:
            fn(cfg)
        except (ConfigError, DataError, StageFailed) as exc:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            _fail(str(exc))

    hydra_main = hydra.main(config_path="../conf", config_name="config", version_base="1.3")(task)

    @functools.wraps(fn)
    def main() -> None:
        bad = unknown_override(sys.argv[1:])
        if bad:
            _fail(bad)
        hydra_main()

    return main
