"""The ``synth:`` and ``verifier:`` config sections (``conf/vegas/paper.yaml``) as frozen, self-checking dataclasses:
failure synthesis and verifier training (VeGAS, arXiv 2605.12620; docs/vegas.md). ``bon:`` is in
:mod:`.bon_config` (it names a model and a generation config, which these two stages do not import).

Input: each section of the composed config, via ``config.build(SynthConfig, cfg["synth"], "synth")`` and so on.
Output: the objects ``vegas.synth.run_synth`` and ``vegas.verifier.run_verifier`` take.
Defaults are the paper's values where it states them (N = 16 candidates at T = 0.7, M = 5 verifications, one
failure trajectory per expert trajectory in three modes, the verifier initialised like the policy); the tiny CPU
preset sizes them down in ``conf/experiment/tiny.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import check
from ..train.sft.config import SFTConfig

MODES = ("wrong_object", "wrong_receptacle", "precondition")


@dataclass(frozen=True)
class SynthConfig:
    # episode split whose expert trajectories get failures (the paper: the policy's SFT trajectories)
    split: str = "train"
    # at most this many episodes, in file order (0 = all)
    max_episodes: int = 0
    # failure modes (each episode gets one failure trajectory, in the feasible mode used least so far)
    modes: tuple[str, ...] = MODES
    # share of the episodes held out (by episode) for the verifier's own validation (balanced accuracy, AUROC)
    val_fraction: float = 0.05
    # who writes the verification chains of thought: template (simulator facts, several wordings; offline) |
    # teacher (the OpenAI-compatible teacher of the `teacher:` section, cached like distillation)
    cot: Literal["template", "teacher"] = "template"
    # wording of the candidate's reasoning (the scripted teacher's, which the SFT policy imitates): full | brief
    reasoning: Literal["full", "brief"] = "full"
    # teacher CoTs: at most this many characters kept per chain of thought
    cot_max_chars: int = 600
    # seed of every draw (modes, injection steps, wrong objects, wordings, the held-out split)
    seed: int = 0

    def __post_init__(self) -> None:
        check(bool(self.split), "split", "must name an episode split, e.g. train")
        check(self.max_episodes >= 0, "max_episodes", f"must be >= 0 (0 = all), got {self.max_episodes}")
        check(len(self.modes) >= 1, "modes", f"name at least one of {list(MODES)}")
        bad = [m for m in self.modes if m not in MODES]
        check(not bad, "modes", f"unknown mode(s) {bad}; choose from {list(MODES)}")
        check(len(set(self.modes)) == len(self.modes), "modes", f"must be unique, got {list(self.modes)}")
        check(0.0 <= self.val_fraction < 1.0, "val_fraction", f"must be in [0, 1), got {self.val_fraction}")
        check(self.cot_max_chars >= 40, "cot_max_chars", f"must be >= 40, got {self.cot_max_chars}")


@dataclass(frozen=True)
class VerifierConfig:
    # where the verifier starts: random (the policy's untrained base: random weights, the policy's tokenizer;
    # the paper's "same base model as the policy") | sft (the SFT policy's weights)
    init: Literal["random", "sft"] = "random"
    # the verifier's supervised fine-tuning (the project's SFT: TRL SFTTrainer, loss on the verification only)
    sft: SFTConfig = field(default_factory=SFTConfig)
    # held-out verification records scored after training (0 = all of the held-out file)
    eval_max_records: int = 0
    # records per scoring batch, and the new-token cap of a verification
    eval_batch_size: int = 32
    max_new_tokens: int = 128

    def __post_init__(self) -> None:
        check(self.eval_max_records >= 0, "eval_max_records", f"must be >= 0 (0 = all), got {self.eval_max_records}")
        check(self.eval_batch_size >= 1, "eval_batch_size", f"must be >= 1, got {self.eval_batch_size}")
        check(self.max_new_tokens >= 4, "max_new_tokens", f"must be >= 4, got {self.max_new_tokens}")


__all__ = ["MODES", "SynthConfig", "VerifierConfig"]
