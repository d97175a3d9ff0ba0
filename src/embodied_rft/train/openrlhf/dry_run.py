"""``make grpo-cluster-dry``: the ``ray job submit`` command the ``grpo`` stage would run on a cluster, printed.

``conf/`` is composed as the stage gets it under ``grpo=openrlhf`` (the same composition as ``make params`` and
``dvc exp run -S``), with the paper's preset unless an ``experiment=`` override names another; the plan is
:func:`.cluster.plan_job`'s, so its paths, folder and checks are the stage's. Nothing is written or submitted.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from embodied_rft.config import ConfigError, build
from embodied_rft.core import plugins
from embodied_rft.data.jsonl import DataError, iter_jsonl
from embodied_rft.pipeline import Paths
from embodied_rft.reward import RewardConfig
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.openrlhf.cluster import plan_job

# The preset the CLI composes when no experiment= override is given: the cluster recipe, never the CPU preset's sizes.
CLUSTER_PRESET = "paper_qwen25vl_7b"


def compose_job_config(overrides: Sequence[str], config_dir: str | Path = "conf") -> dict:
    """The pipeline's config as the ``grpo`` stage would see it under ``grpo=openrlhf``: ``conf/`` composed by
    Hydra (the same composition as ``make params`` / ``dvc exp run -S``) with ``grpo=openrlhf`` first and then
    ``overrides``."""
    from embodied_rft.pipeline import compose

    return compose(config_dir, ["grpo=openrlhf", *overrides])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m embodied_rft.train.openrlhf.dry_run [overrides]``: print the ``ray job submit`` command the
    ``grpo`` stage would run for ``conf/`` composed with ``grpo=openrlhf``, ``experiment=paper_qwen25vl_7b`` unless
    an ``experiment=`` override says otherwise, and the overrides; the preset, its placement and sizes go to
    stderr. Nothing is written or submitted."""
    p = argparse.ArgumentParser(prog="python -m embodied_rft.train.openrlhf.dry_run", description=main.__doc__)
    p.add_argument("overrides", nargs="*", help="Hydra overrides of conf/ (e.g. grpo.group_size=16 experiment=tiny)")
    p.add_argument("--config-dir", default="conf", help="the Hydra config folder")
    args = p.parse_args(argv)
    overrides = list(args.overrides)
    if not any(o.startswith("experiment=") for o in overrides):
        overrides.insert(0, f"experiment={CLUSTER_PRESET}")
    preset = [o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")][-1]
    try:
        composed = compose_job_config(overrides, args.config_dir)
        plugins.use(composed.get("plugins"))  # as the stage's context does (an extension's reward variant)
        reward = build(RewardConfig, composed.get("reward") or {}, "reward")
        gcfg = build(GRPOConfig, composed["grpo"], "grpo")
        paths = Paths.from_config(composed.get("paths") or {})
        train = Path(paths.decomposed_dir) / "train.jsonl"
        if train.is_file():
            vision = any(rec.get("image") for _, rec in iter_jsonl(train))
        else:
            vision = (composed.get("prompt") or {}).get("observation") == "image"
        plan = plan_job(
            gcfg,
            reward,
            policy_dir=getattr(paths, f"{gcfg.init}_model"),
            policy_key=f"paths.{gcfg.init}_model",
            train_path=train,
            image_root=train.parent if vision else None,
            work_dir=paths.work_dir,
        )
    except (ConfigError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # Hydra / OmegaConf composition errors (an unknown key, a bad override)
        if type(exc).__module__.split(".")[0] not in ("hydra", "omegaconf"):
            raise
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    o = gcfg.openrlhf
    print(
        f"# experiment={preset} with grpo=openrlhf: {o.num_nodes} node(s) x {o.gpus_per_node} GPUs, "
        f"{o.vllm_num_engines} vLLM engines; G = {gcfg.group_size}, N_B = {gcfg.filter.buffer_size}, "
        f"lr {gcfg.lr:g}, {gcfg.max_new_tokens} new tokens; job folder {plan.layout.dir}"
        + (
            "; the stage adds its on-policy states to the prompts (and to the folder's key)"
            if gcfg.onpolicy.episodes
            else ""
        ),
        file=sys.stderr,
    )
    print(shlex.join(plan.submit))
    return 0


__all__ = ["CLUSTER_PRESET", "compose_job_config", "main"]


if __name__ == "__main__":
    sys.exit(main())
