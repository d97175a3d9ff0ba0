"""DVC stage `distill`: decomposed train prompts -> teacher answers (cached) -> data/distilled/sft.jsonl."""

from pathlib import Path

from embodied_rft.config import build
from embodied_rft.pipeline import stage_context
from embodied_rft.teacher.cache import ResponseCache
from embodied_rft.teacher.config import TeacherConfig
from embodied_rft.teacher.distill import run_distill
from embodied_rft.world.episode import read_episodes
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "distill")
    tcfg = build(TeacherConfig, ctx.section("teacher"), "teacher")
    train_split = ctx.section("decompose")["train_split"]
    episodes = None
    if tcfg.validate == "simulate":
        episodes = {e["episode_id"]: e for e in read_episodes(Path(ctx.paths.episodes_dir) / f"{train_split}.jsonl")}
    # the cache is a DVC output (versioned, persisted): create it even for the uncached scripted teacher
    ResponseCache(ctx.paths.teacher_cache).close()
    run_distill(
        tcfg,
        Path(ctx.paths.decomposed_dir) / "train.jsonl",
        ctx.paths.distilled,
        ctx.paths.teacher_cache,
        ctx.paths.metrics("distill"),
        episodes_by_id=episodes,
    )


if __name__ == "__main__":
    main()
