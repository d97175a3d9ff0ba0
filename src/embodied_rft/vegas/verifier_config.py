"""The ``verifier:`` config section (``conf/vegas/paper.yaml``) as frozen, self-checking dataclasses: verifier
training (VeGAS §3.2, docs/vegas.md §4), its optional on-policy records (``verifier.policy_data``) and its optional
within-context pairwise objective (``verifier.objective: pairwise``, ``verifier.pairwise``).

Input: the composed ``verifier`` mapping, via ``config.build(VerifierConfig, cfg["verifier"], "verifier")``. Output:
the object ``vegas.verifier.run_verifier`` takes. Defaults are the paper's (the verifier initialised like the
policy, trained on synthesised failures only); the tiny CPU preset sizes them in ``conf/experiment/tiny.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import check
from ..generation.config import GenerationConfig
from ..models.config import ModelConfig
from ..train.sft.config import SFTConfig


@dataclass(frozen=True)
class PolicyDataConfig:
    """On-policy verification records (``vegas/policy_data.py``): the SFT policy plays training episodes greedily,
    at each planner call N candidates are sampled and every distinct first action is labelled by the world oracle.
    Not in the paper (its data hold only synthesised failures); the symbolic world can label any candidate."""

    # training episodes played (a seeded subsample of the split, minus the synth stage's held-out episodes);
    # 0 = none: the verifier trains on synthesised failures only, as the paper does
    episodes: int = 0
    split: str = "train"
    # candidates sampled per planner call, and their temperature (as Best-of-N samples them)
    n: int = 16
    temperature: float = 0.7
    # keep as many positives as negatives (seeded subsample of the larger class)
    balance: bool = True
    # contrast records: up to this many oracle-labelled alternatives per planner call, in the call's own state
    # (the planner's next action when no sample proposed it, then a sampled candidate's verb with another argument),
    # so that one context is seen with right and wrong candidates; 0 = none (not in the paper)
    contrast: int = 0
    # episodes stepped in lockstep (one generation batch per round)
    episodes_per_task: int = 8
    # the policy's generation (the fast sampler on CPU, vllm on GPU)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    seed: int = 0

    def __post_init__(self) -> None:
        check(self.episodes >= 0, "episodes", f"must be >= 0 (0 = none), got {self.episodes}")
        check(bool(self.split), "split", "must name an episode split, e.g. train")
        check(self.n >= 1, "n", f"must be >= 1, got {self.n}")
        check(self.contrast >= 0, "contrast", f"must be >= 0 (0 = none), got {self.contrast}")
        check(0.0 < self.temperature <= 5.0, "temperature", f"must be in (0, 5], got {self.temperature}")
        check(self.episodes_per_task >= 1, "episodes_per_task", f"must be >= 1, got {self.episodes_per_task}")


@dataclass(frozen=True)
class PairwiseConfig:
    """``verifier.objective: pairwise`` (``vegas/pairs.py``): a reward model trained with TRL's ``RewardTrainer`` on
    (oracle-correct, not correct) candidate pairs of one prompt context, so the loss compares candidates that share
    their context instead of fitting context-level priors. Not in the paper (its verifier is generative)."""

    # pairs drawn per prompt context (one planner call, or one synthesised step), a seeded draw from every
    # (correct, not correct) combination of the context; 0 = all of them
    max_pairs_per_context: int = 8
    # TRL RewardConfig.center_rewards_coefficient: a penalty on the rewards' squared mean, so the pairwise loss (blind
    # to a shared offset) keeps them centred on 0 and reward > 0 (P(yes) > 0.5) stays a usable verdict; 0 = off
    center_rewards: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        check(
            self.max_pairs_per_context >= 0,
            "max_pairs_per_context",
            f"must be >= 0 (0 = all), got {self.max_pairs_per_context}",
        )
        check(self.center_rewards >= 0, "center_rewards", f"must be >= 0 (0 = off), got {self.center_rewards}")


@dataclass(frozen=True)
class VerifierConfig:
    # where the verifier starts: random (the policy's base checkpoint, models/base: for the tiny policy random weights
    # with its tokenizer; the paper's "same base model as the policy") | sft (the SFT policy's weights) | pretrained
    # (the pretrained model `model` below, whatever the policy is: a verifier that reads paraphrases although the
    # tiny policy's base cannot; docs/vegas.md §4)
    init: Literal["random", "sft", "pretrained"] = "random"
    # the model verifier.init=pretrained starts from (a model-group entry, composed in conf/vegas/paper.yaml)
    model: ModelConfig = field(default_factory=ModelConfig)
    # what the verifier learns to write: cot = the chain of thought and the verdict line (the paper) | verdict = the
    # verdict line alone (every record's assistant turn cut to it), so the loss is not spread over templated sentences
    target: Literal["cot", "verdict"] = "cot"
    # how it is trained: sft = the generative verifier above (the paper: SFT on the verification, scored by P(yes)
    # of its verdict token) | pairwise = a reward model (the init checkpoint with a scalar head) trained with TRL's
    # RewardTrainer on correct-vs-wrong candidate pairs of one prompt context (`pairwise` below; `target` and the
    # SFT-only settings lora, group_by_length and val are not read), scored by sigmoid(reward)
    objective: Literal["sft", "pairwise"] = "sft"
    pairwise: PairwiseConfig = field(default_factory=PairwiseConfig)
    # the verifier's supervised fine-tuning (the project's SFT: TRL SFTTrainer, loss on the verification only)
    sft: SFTConfig = field(default_factory=SFTConfig)
    # on-policy verification records added to the synthesised ones (episodes: 0 = none, the paper's data)
    policy_data: PolicyDataConfig = field(default_factory=PolicyDataConfig)
    # held-out verification records scored after training (0 = all of the held-out file)
    eval_max_records: int = 0
    # records per scoring batch, and the new-token cap of a verification
    eval_batch_size: int = 32
    max_new_tokens: int = 128

    def __post_init__(self) -> None:
        check(
            self.init != "pretrained" or self.model.kind in ("gguf", "pretrained"),
            "model",
            f"verifier.init=pretrained starts from a pretrained model (kind gguf or pretrained), got kind {self.model.kind}",
        )
        check(self.eval_max_records >= 0, "eval_max_records", f"must be >= 0 (0 = all), got {self.eval_max_records}")
        check(self.eval_batch_size >= 1, "eval_batch_size", f"must be >= 1, got {self.eval_batch_size}")
        check(self.max_new_tokens >= 4, "max_new_tokens", f"must be >= 4, got {self.max_new_tokens}")
        check(
            self.objective != "pairwise" or not self.sft.lora.enabled,
            "sft.lora.enabled",
            "verifier.objective=pairwise trains every weight of the reward model; LoRA is the SFT objective's only",
        )


__all__ = ["PairwiseConfig", "PolicyDataConfig", "VerifierConfig"]
