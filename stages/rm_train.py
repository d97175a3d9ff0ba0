"""DVC stage `rm_train` (`make rm-tiny`, outside `make repro`): D&A's learned tiny reward models from the optimal
trajectories of dna.train.split -> models/rm_direct (instruction + key frames -> progress), models/rm_criterion
(instruction -> the criterion in the world's names), metrics/rm_train.json, plots/rm_*_loss.csv. docs/dna.md §2."""

from embodied_rft.config import build
from embodied_rft.dna.config import DnaConfig
from embodied_rft.dna.train import run_rm_train
from embodied_rft.pipeline import stage_context
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "rm_train")
    dcfg = build(DnaConfig, ctx.section("dna"), "dna")
    p = ctx.paths
    run_rm_train(
        dcfg.train,
        dcfg.frames.h,
        f"{p.episodes_dir}/{dcfg.train.split}.jsonl",
        p.sft_model if dcfg.train.init == "sft" else p.base_model,
        {"direct": p.rm_direct_model, "criterion": p.rm_criterion_model},
        p.metrics("rm_train"),
        p.plots_dir,
        p.work_dir,
    )


if __name__ == "__main__":
    main()
