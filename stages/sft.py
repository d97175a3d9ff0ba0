"""DVC stage `sft`: models/base + data/distilled/sft.jsonl -> models/sft, metrics/sft.json, plots/sft_loss.csv."""

from pathlib import Path

from embodied_rft.config import build
from embodied_rft.pipeline import stage_context
from embodied_rft.train.sft.config import SFTConfig
from embodied_rft.train.sft.trainer import run_sft
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "sft")
    run_sft(
        build(SFTConfig, ctx.section("sft"), "sft"),
        ctx.paths.base_model,
        ctx.paths.distilled,
        ctx.paths.sft_model,
        ctx.paths.metrics("sft"),
        ctx.paths.plot("sft_loss.csv"),
        val_data=Path(ctx.paths.decomposed_dir) / "val.jsonl",
        work_dir=Path(ctx.paths.work_dir) / "sft",
    )


if __name__ == "__main__":
    main()
