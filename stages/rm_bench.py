"""DVC stage `rm_bench` (`make rm-bench`, outside `make repro`): episodes of dna.bench.split -> D&A's reward
benchmark, data/rm_bench/{bench,tasks}.jsonl (every kind of trajectory per task, under several instructions) and
metrics/rm_bench.json (counts, infeasible share, the bench's floors). docs/dna.md §3."""

from pathlib import Path

from embodied_rft.config import build
from embodied_rft.dna.bench import run_rm_bench
from embodied_rft.dna.config import DnaConfig
from embodied_rft.pipeline import stage_context
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "rm_bench")
    dcfg = build(DnaConfig, ctx.section("dna"), "dna")
    p = ctx.paths
    run_rm_bench(dcfg.bench, Path(p.episodes_dir) / f"{dcfg.bench.split}.jsonl", p.rm_bench_dir, p.metrics("rm_bench"))


if __name__ == "__main__":
    main()
