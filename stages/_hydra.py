"""Shared decorator for stage entry points.

Run by hand, a stage composes ``conf/`` (Hydra overrides and ``-m`` multirun work); under DVC, dvc.yaml passes
``--config-dir . --config-name params`` so Hydra loads the generated params.yaml (and ``dvc exp run -S`` reaches
the stage). ``version_base="1.3"``: Hydra does not change the working directory.

A bad setting or a bad input file ends the stage with one line on stderr (the dotted key or file:line and what
to change) and exit status 2, not a traceback; ``HYDRA_FULL_ERROR=1`` shows the traceback. A mistyped override
(``sft.max_step=3``) is caught before Hydra, whose own advice for it (append with ``+``) would mislead.
"""

import functools
import os
import sys

import hydra

from embodied_rft.config import ConfigError
from embodied_rft.data.jsonl import DataError


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def stage_main(fn):
    @functools.wraps(fn)
    def task(cfg) -> None:
        try:
            fn(cfg)
        except (ConfigError, DataError) as exc:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            _fail(str(exc))

    hydra_main = hydra.main(config_path="../conf", config_name="config", version_base="1.3")(task)

    @functools.wraps(fn)
    def main() -> None:
        from embodied_rft.params import unknown_override

        bad = unknown_override(sys.argv[1:])
        if bad:
            _fail(bad)
        hydra_main()

    return main
