"""DVC stage `rm_eval_tiny` (`make rm-tiny`): the learned tiny reward models of rm_train and their gold-criterion
references (dna.tiny_rms) on the bench -> metrics/rm_eval_tiny.json, reports/rm_eval_tiny.md,
reports/rm_eval_tiny_scores.jsonl. docs/dna.md §4."""

import dataclasses
from pathlib import Path

from embodied_rft.config import build
from embodied_rft.dna.config import DnaConfig
from embodied_rft.dna.rm_eval import run_rm_eval
from embodied_rft.pipeline import stage_context
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "rm_eval_tiny")
    dcfg = build(DnaConfig, ctx.section("dna"), "dna")
    p = ctx.paths
    run_rm_eval(
        dcfg.frames,
        dataclasses.replace(dcfg.eval, rms=dcfg.tiny_rms),
        p.rm_bench_dir,
        p.metrics("rm_eval_tiny"),
        Path(p.reports_dir) / "rm_eval_tiny.md",
        Path(p.reports_dir) / "rm_eval_tiny_scores.jsonl",
        tiny={"direct": p.rm_direct_model, "criterion": p.rm_criterion_model, "retries": dcfg.train.retries},
    )


if __name__ == "__main__":
    main()
