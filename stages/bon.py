"""DVC stage `bon` (`make bon`, outside `make repro`): every Best-of-N selector on the same held-out episodes
-> metrics/bon.json (success, paired tests against greedy, cost, coverage, live AUROC), reports/bon.md,
plots/bon_success_by_selector.svg, reports/bon_calls.csv (the per-call table: within-call metrics)."""

from pathlib import Path

from embodied_rft.config import build
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.evaluate.stage import split_paths
from embodied_rft.pipeline import lineage, stage_context
from embodied_rft.vegas.bon import run_bon
from embodied_rft.vegas.bon_config import BonConfig
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "bon")
    bcfg = build(BonConfig, ctx.section("bon"), "bon")
    p = ctx.paths
    models = {"policy": getattr(p, f"{bcfg.policy}_model"), "sft": p.sft_model, "verifier": p.verifier_model}
    run_bon(
        bcfg,
        models,
        split_paths(bcfg, p.episodes_dir),
        p.metrics("bon"),
        Path(p.reports_dir) / "bon.md",
        p.plot("bon_success_by_selector.svg"),
        Path(p.work_dir) / "bon",
        prompt_cfg=build(PromptConfig, ctx.section("prompt"), "prompt"),
        extra={"lineage": lineage("dvc.lock", ctx.cfg, used=list(models.values()))},
        calls_path=Path(p.reports_dir) / "bon_calls.csv",
    )


if __name__ == "__main__":
    main()
