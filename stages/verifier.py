"""DVC stage `verifier`: data/verify/train.jsonl + models/base (verifier.init=random) or models/sft (init=sft)
-> models/verifier (the project's SFT), metrics/verifier.json (held-out balanced accuracy, AUROC), plots/verifier_loss.csv."""

from pathlib import Path

from embodied_rft.config import build
from embodied_rft.pipeline import stage_context
from embodied_rft.vegas.config import VerifierConfig
from embodied_rft.vegas.verifier import run_verifier
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "verifier")
    vcfg = build(VerifierConfig, ctx.section("verifier"), "verifier")
    p = ctx.paths
    run_verifier(
        vcfg,
        p.base_model if vcfg.init == "random" else p.sft_model,
        p.verify_dir,
        p.verifier_model,
        p.metrics("verifier"),
        p.plot("verifier_loss.csv"),
        Path(p.work_dir) / "verifier",
    )


if __name__ == "__main__":
    main()
