"""The ``bon:`` config section (``conf/vegas/paper.yaml``): verifier-guided Best-of-N selection (VeGAS §3.3,
docs/vegas.md §5) as a frozen, self-checking dataclass.

Input: the composed ``bon`` mapping, via ``config.build(BonConfig, cfg["bon"], "bon")``. Output: the object
``vegas.bon.run_bon`` and ``vegas.select.BonPolicy`` take. Defaults are the paper's (N = 16 candidates at T = 0.7,
M = 5 verifications); the tiny CPU preset sizes them down in ``conf/experiment/tiny.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import check
from ..generation.config import GenerationConfig
from ..models.config import ModelConfig

SELECTORS = ("greedy", "sample", "sc", "bon_zs", "bon_zs_smollm2", "bon_ft", "bon_oracle")
# the selectors that ask a verifier model
VERIFIED_SELECTORS = ("bon_zs", "bon_zs_smollm2", "bon_ft")


@dataclass(frozen=True)
class BonConfig:
    # the policy whose candidates are chosen among (paths.<policy>_model)
    policy: Literal["sft", "grpo"] = "sft"
    # episode splits played (data/episodes/<split>.jsonl); choose recipes on valid_seen, report valid_unseen
    splits: tuple[str, ...] = ("valid_unseen",)
    # at most this many episodes per split, balanced across subsets (0 = all)
    max_episodes: int = 0
    # fewer episodes for a costly selector, e.g. {bon_zs_smollm2: 48} (paired tests use the shared episodes)
    max_episodes_by_selector: dict[str, int] = field(default_factory=dict)
    # selectors, each played on the same episodes: greedy | sample (one draw at T) | sc (majority first action) |
    # bon_zs (the SFT policy prompted as verifier) | bon_zs_smollm2 (SmolLM2-135M-Instruct as verifier) |
    # bon_ft (the trained verifier) | bon_oracle (the world oracle's label: the ceiling of the candidate set)
    selectors: tuple[str, ...] = SELECTORS
    # candidates per planner call and their sampling (paper: 16 at T = 0.7)
    n: int = 16
    temperature: float = 0.7
    top_p: float = 1.0
    # verifications per distinct candidate first action, sampled from the verifier (paper: 5)
    m: int = 5
    verifier_temperature: float = 0.7
    # a first action's score: sample (the paper's: the mean verdict of its m sampled verifications) | prob (the
    # verifier's P(yes) itself, docs/vegas.md §5: what that mean estimates, without its sampling noise; one greedy
    # verification per first action, m and verifier_temperature unused)
    score: Literal["sample", "prob"] = "sample"
    # the policy's prior in the score (not the paper's; 0 = off): a first action's score becomes the log-odds of its
    # verifier score plus prior_weight times the log of the share of the N samples starting with it
    # (vegas/calls.py combined_score); chosen on valid_seen's per-call table (tools/bon_calls.py)
    prior_weight: float = 0.0
    # which planner calls select among candidates: always (the paper) | replan (an episode's first call is answered
    # greedily, EB's one-shot plan; Best-of-N selects on the replanning calls after it, docs/vegas.md §5)
    trigger: Literal["always", "replan"] = "always"
    # new-token cap of one verification (chain of thought + verdict)
    verifier_max_new_tokens: int = 128
    # the verifiers' generation backend: fast (Qwen2 / Llama text models) | hf (any, e.g. a vision-language model)
    verifier_backend: Literal["fast", "hf"] = "fast"
    # what is verified and executed: first (the candidate plan's first action is verified, the chosen plan is
    # executed as EB does) | single (plans are cut to their first action: the policy replans after each step)
    unit: Literal["first", "single"] = "first"
    # coverage@k reported for these k (those <= n): share of planner calls with an oracle-correct first action
    # among the first k candidates
    coverage_k: tuple[int, ...] = (1, 2, 4, 8, 16)
    # live candidates (the greedy run's states, oracle-labelled) scored per verifier for AUROC (0 = all), and a
    # smaller cap for a costly verifier, e.g. {bon_zs_smollm2: 100} (a seeded subsample of the same candidates)
    live_max: int = 0
    live_max_by_selector: dict[str, int] = field(default_factory=dict)
    # verifiers scored on those live candidates without being played as selectors, e.g. [bon_ft] with
    # selectors [greedy]: a verifier's live AUROC for the price of the greedy run (how verifier recipes are chosen
    # on valid_seen); the played verified selectors are always scored
    live_verifiers: tuple[str, ...] = ()
    # the zero-shot SmolLM2 verifier (conf/model/smollm2_135m.yaml, composed here)
    zs_model: ModelConfig = field(default_factory=ModelConfig)
    # the policy's generation (the fast backend samples the N candidates; vllm on GPU)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    # episodes stepped in lockstep (one generation batch per round)
    episodes_per_task: int = 8
    # EmbodiedBench's episode limits (docs/facts.md §4.3)
    max_env_steps: int = 30
    max_invalid_actions: int = 10
    max_planner_calls: int = 40
    # torch CPU threads (0 = torch's default); on a shared machine, fewer threads than cores avoid oversubscription
    num_threads: int = 0
    # skip episodes already in the work dir's results for the same selector and settings
    resume: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        check(len(self.splits) >= 1, "splits", "name at least one episode split, e.g. [valid_unseen]")
        check(self.max_episodes >= 0, "max_episodes", f"must be >= 0 (0 = all), got {self.max_episodes}")
        bad = [s for s in self.selectors if s not in SELECTORS]
        check(not bad, "selectors", f"unknown selector(s) {bad}; choose from {list(SELECTORS)}")
        check(len(self.selectors) >= 1, "selectors", f"name at least one of {list(SELECTORS)}")
        check(len(set(self.selectors)) == len(self.selectors), "selectors", "must be unique")
        for s, k in self.max_episodes_by_selector.items():
            check(s in SELECTORS, f"max_episodes_by_selector.{s}", f"is not a selector; choose from {list(SELECTORS)}")
            check(k >= 1, f"max_episodes_by_selector.{s}", f"must be >= 1, got {k}")
        check(self.n >= 1, "n", f"must be >= 1 (paper: 16), got {self.n}")
        check(0.0 < self.temperature <= 5.0, "temperature", f"must be in (0, 5] (paper: 0.7), got {self.temperature}")
        check(0.0 < self.top_p <= 1.0, "top_p", f"must be in (0, 1], got {self.top_p}")
        check(self.m >= 1, "m", f"must be >= 1 (paper: 5), got {self.m}")
        check(
            0.0 < self.verifier_temperature <= 5.0,
            "verifier_temperature",
            f"must be in (0, 5] (verifications are sampled), got {self.verifier_temperature}",
        )
        check(
            0.0 <= self.prior_weight <= 100.0,
            "prior_weight",
            f"must be in [0, 100] (0 = the verifier alone), got {self.prior_weight}",
        )
        check(self.verifier_max_new_tokens >= 4, "verifier_max_new_tokens", "must be >= 4")
        check(all(k >= 1 for k in self.coverage_k), "coverage_k", f"each k must be >= 1, got {list(self.coverage_k)}")
        bad = [s for s in self.live_verifiers if s not in VERIFIED_SELECTORS]
        check(not bad, "live_verifiers", f"unknown verifier(s) {bad}; choose from {list(VERIFIED_SELECTORS)}")
        check(
            not self.live_verifiers or "greedy" in self.selectors,
            "live_verifiers",
            "scores the greedy run's live candidates: add greedy to bon.selectors",
        )
        check(self.live_max >= 0, "live_max", f"must be >= 0 (0 = all), got {self.live_max}")
        for s, k in self.live_max_by_selector.items():
            check(s in SELECTORS, f"live_max_by_selector.{s}", f"is not a selector; choose from {list(SELECTORS)}")
            check(k >= 1, f"live_max_by_selector.{s}", f"must be >= 1, got {k}")
        check(self.episodes_per_task >= 1, "episodes_per_task", f"must be >= 1, got {self.episodes_per_task}")
        check(self.max_env_steps >= 1, "max_env_steps", f"must be >= 1 (EB: 30), got {self.max_env_steps}")
        check(self.max_invalid_actions >= 1, "max_invalid_actions", "must be >= 1 (EB: 10)")
        check(self.max_planner_calls >= 1, "max_planner_calls", f"must be >= 1, got {self.max_planner_calls}")
        check(self.num_threads >= 0, "num_threads", f"must be >= 0 (0 = torch default), got {self.num_threads}")


__all__ = ["SELECTORS", "VERIFIED_SELECTORS", "BonConfig"]
