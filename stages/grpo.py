"""DVC stage `grpo`: models/sft + data/decomposed -> models/grpo, metrics/grpo.json, plots/grpo.csv
(:mod:`embodied_rft.train.grpo.stage`)."""

from embodied_rft.pipeline import stage_context
from embodied_rft.train.grpo.stage import run_grpo_stage
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    run_grpo_stage(stage_context(cfg, "grpo"))


if __name__ == "__main__":
    main()
