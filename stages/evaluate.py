"""DVC stage `evaluate`: base, SFT and GRPO models play the same held-out episodes in the simulator
-> metrics/eval.json (with lineage from dvc.lock), reports/eval.md (Table-1 layout), plots/eval_*.json."""

from pathlib import Path

from embodied_rft.config import build
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.evaluate.config import EvalConfig
from embodied_rft.evaluate.stage import run_evaluate, split_paths
from embodied_rft.pipeline import lineage, stage_context
from embodied_rft.reward import RewardConfig
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "evaluate")
    ecfg = build(EvalConfig, ctx.section("evaluate"), "evaluate")
    p = ctx.paths
    run_evaluate(
        ecfg,
        {m: getattr(p, f"{m}_model") for m in ecfg.models},
        split_paths(ecfg, p.episodes_dir),
        Path(p.decomposed_dir) / "val.jsonl",
        p.metrics("eval"),
        Path(p.reports_dir) / "eval.md",
        p.plots_dir,
        Path(p.work_dir) / "evaluate",
        prompt_cfg=build(PromptConfig, ctx.section("prompt"), "prompt"),
        reward_cfg=build(RewardConfig, ctx.section("reward"), "reward"),
        # lineage: the data, teacher cache, checkpoints and params hashes every number here came from
        extra={"lineage": lineage("dvc.lock", ctx.cfg, used=[getattr(p, f"{m}_model") for m in ecfg.models])},
    )


if __name__ == "__main__":
    main()
