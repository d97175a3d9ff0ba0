"""DVC stage `synth`: train episodes -> failures injected and executed, every step labelled by the world oracle
-> data/verify/{train,val}.jsonl (verification records), metrics/synth.json (mix per mode, silent vs loud, floors).
With synth.cot=teacher the chains of thought come from the OpenAI-compatible teacher (cache: paths.verify_cache)."""

from pathlib import Path

from embodied_rft.config import build
from embodied_rft.pipeline import stage_context
from embodied_rft.teacher.cache import ResponseCache
from embodied_rft.teacher.config import TeacherConfig
from embodied_rft.vegas.config import SynthConfig
from embodied_rft.vegas.synth import run_synth
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "synth")
    scfg = build(SynthConfig, ctx.section("synth"), "synth")
    # the cache is a DVC output (versioned, persisted): create it even when the templates write every CoT
    ResponseCache(ctx.paths.verify_cache).close()
    rewrite = None
    if scfg.cot == "teacher":
        from embodied_rft.vegas.cot import teacher_rewriter

        tcfg = build(TeacherConfig, ctx.section("teacher"), "teacher")
        rewrite = teacher_rewriter(tcfg, ctx.paths.verify_cache, scfg.cot_max_chars, verdict=scfg.verdict)
    run_synth(
        scfg,
        Path(ctx.paths.episodes_dir) / f"{scfg.split}.jsonl",
        ctx.paths.verify_dir,
        ctx.paths.metrics("synth"),
        rewrite_cots=rewrite,
    )


if __name__ == "__main__":
    main()
