"""DVC stage `plots`: plots/{sft_loss.csv, grpo.csv, evaluate_success_by_subset.json} -> plots/*.svg, drawn once
each and rendered offline by `dvc plots show` (:mod:`embodied_rft.plots`)."""

from embodied_rft.pipeline import stage_context
from embodied_rft.plots import render_pipeline_plots
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    render_pipeline_plots(stage_context(cfg, "plots").paths.plots_dir)


if __name__ == "__main__":
    main()
