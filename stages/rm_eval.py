"""DVC stage `rm_eval` (`make rm-bench`): every reward model of dna.eval.rms on the bench -> metrics/rm_eval.json
(τ, failure-as-success, per-frame agreement, cost; the bias dial), reports/rm_eval.md and the per-record scores
reports/rm_eval_scores.jsonl; the LLM reward models' answers cached in data/rm_cache. docs/dna.md §4."""

from pathlib import Path

from embodied_rft.config import build
from embodied_rft.dna.config import DnaConfig
from embodied_rft.dna.rm_eval import run_rm_eval
from embodied_rft.pipeline import stage_context
from embodied_rft.teacher.cache import ResponseCache
from embodied_rft.teacher.config import TeacherConfig
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "rm_eval")
    dcfg = build(DnaConfig, ctx.section("dna"), "dna")
    p = ctx.paths
    # the LLM reward models' endpoint (dna.llm.backend=openai) is the teacher's; the cache is a DVC output even
    # when no LLM model runs (persisted: no answer is asked twice)
    ResponseCache(p.rm_cache).close()
    run_rm_eval(
        dcfg.frames,
        dcfg.eval,
        p.rm_bench_dir,
        p.metrics("rm_eval"),
        Path(p.reports_dir) / "rm_eval.md",
        Path(p.reports_dir) / "rm_eval_scores.jsonl",
        llm=dcfg.llm,
        teacher=build(TeacherConfig, ctx.section("teacher"), "teacher"),
        cache_dir=p.rm_cache,
    )


if __name__ == "__main__":
    main()
