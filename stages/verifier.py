"""DVC stage `verifier`: data/verify/train.jsonl (+ with verifier.policy_data the SFT policy's own oracle-labelled
candidates on training episodes) + models/base (verifier.init=random), models/sft (init=sft) or the pretrained
verifier.model (init=pretrained: converted into the work folder on each run, as the base stage converts a
policy) -> models/verifier (the project's SFT; with verifier.objective=pairwise a reward model trained with TRL's
RewardTrainer on correct-vs-wrong candidate pairs of one context), metrics/verifier.json (held-out balanced accuracy,
AUROC), plots/verifier_loss.csv."""

from pathlib import Path

from embodied_rft.config import build
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.pipeline import stage_context
from embodied_rft.vegas.config import SynthConfig
from embodied_rft.vegas.verifier import PolicySource, init_checkpoint, run_verifier
from embodied_rft.vegas.verifier_config import VerifierConfig
from stages._hydra import stage_main


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "verifier")
    vcfg = build(VerifierConfig, ctx.section("verifier"), "verifier")
    scfg = build(SynthConfig, ctx.section("synth"), "synth")
    p = ctx.paths
    run_verifier(
        vcfg,
        init_checkpoint(vcfg, p.base_model, p.sft_model, Path(p.work_dir) / "verifier"),
        p.verify_dir,
        p.verifier_model,
        p.metrics("verifier"),
        p.plot("verifier_loss.csv"),
        Path(p.work_dir) / "verifier",
        policy=PolicySource(
            p.sft_model,
            Path(p.episodes_dir) / f"{vcfg.policy_data.split}.jsonl",
            build(PromptConfig, ctx.section("prompt"), "prompt"),
            find_sentence=scfg.find_sentence,
            verdict=scfg.verdict,
            reasoning=scfg.reasoning,
        ),
    )


if __name__ == "__main__":
    main()
