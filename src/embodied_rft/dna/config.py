"""The ``dna:`` config section (``conf/dna/default.yaml``) as frozen, self-checking dataclasses (docs/dna.md).

Input: ``config.build(DnaConfig, cfg["dna"], "dna")``. Output: what :mod:`.bench`, :mod:`.rms`, :mod:`.evaluate`
and :mod:`.advantages` take. Defaults are D&A's where its code states them (H = 8 key frames, linspace, progress
in [0, 1]); the rest are this project's, named as such in docs/dna.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..config import check
from ..models.config import ModelConfig
from ..train.sft.config import SFTConfig

KINDS = ("optimal", "suboptimal", "wrong_object", "wrong_receptacle", "incomplete", "regress")
# rank levels of the bench's kinds: success > suboptimal (detours that still succeed) > failure
LEVELS = {"optimal": 2, "suboptimal": 1, "wrong_object": 0, "wrong_receptacle": 0, "incomplete": 0, "regress": 0}


@dataclass(frozen=True)
class FramesConfig:
    # key frames per trajectory (D&A: 8), at np.linspace(0, T, h) rounded over the T + 1 states; a shorter
    # trajectory uses each of its states once
    h: int = 8

    def __post_init__(self) -> None:
        check(self.h >= 2, "h", f"must be >= 2 (the first and the last state), got {self.h}")


@dataclass(frozen=True)
class BenchConfig:
    # the split whose episodes give the bench's tasks (never the split learned reward models train on)
    split: str = "valid_unseen"
    # tasks per goal object type (each task: every kind, `paraphrases` instructions)
    tasks_per_target: int = 1
    # instruction paraphrases per task (drawn with the generator's instruction writer, distinct)
    paraphrases: int = 10
    # the kinds built (each a trajectory per task; a task where one is infeasible is skipped and counted)
    kinds: tuple[str, ...] = KINDS
    # detours (`find a` of an object the task does not need, before one of the plan's `find a` steps) per
    # suboptimal trajectory
    detours: int = 2
    # seed of every draw (tasks, paraphrases, substitutes, cut points, detours)
    seed: int = 0

    def __post_init__(self) -> None:
        check(bool(self.split), "split", "must name an episode split, e.g. valid_unseen")
        check(self.tasks_per_target >= 1, "tasks_per_target", f"must be >= 1, got {self.tasks_per_target}")
        check(self.paraphrases >= 1, "paraphrases", f"must be >= 1, got {self.paraphrases}")
        bad = [k for k in self.kinds if k not in KINDS]
        check(not bad, "kinds", f"unknown kind(s) {bad}; choose from {list(KINDS)}")
        check("optimal" in self.kinds, "kinds", "must include optimal (every group is ranked against it)")
        check(len(set(self.kinds)) == len(self.kinds), "kinds", f"must be unique, got {list(self.kinds)}")
        check(self.detours >= 1, "detours", f"must be >= 1, got {self.detours}")


@dataclass(frozen=True)
class EvalConfig:
    # reward models scored on the bench: gt | planner | biased:<eps> | naive_llm | dna_llm | dna_feedback_llm
    # (docs/dna.md §2)
    rms: tuple[str, ...] = ("gt", "planner", "biased:0", "biased:0.25", "biased:0.5", "biased:1")
    # a failure trajectory whose final reward reaches this counts as failure-as-success
    success_threshold: float = 0.95
    # a trajectory a model answers nothing valid for (after its retries) scores 0 everywhere and is counted; more
    # than this share of them fails the stage
    max_failed_share: float = 0.1

    def __post_init__(self) -> None:
        check(len(self.rms) >= 1, "rms", "name at least one reward model")
        check(len(set(self.rms)) == len(self.rms), "rms", f"must be unique, got {list(self.rms)}")
        check(0.0 < self.success_threshold <= 1.0, "success_threshold", "must be in (0, 1]")
        check(0.0 <= self.max_failed_share <= 1.0, "max_failed_share", "must be in [0, 1]")


@dataclass(frozen=True)
class AdvantageConfig:
    # A_t = r_{min(t+C, T)} - r_t with C = `chunk` actions (0 = the planner call's own actions)
    chunk: int = 0
    # AWR weights exp(clip(A / beta, -clip, clip))
    awr_beta: float = 2.0
    awr_clip: float = 5.0
    # quantile filtering: keep the samples whose advantage is above this quantile of the corpus's
    filter_quantile: float = 0.5

    def __post_init__(self) -> None:
        check(self.chunk >= 0, "chunk", f"must be >= 0 (0 = one planner call), got {self.chunk}")
        check(self.awr_beta > 0, "awr_beta", f"must be > 0, got {self.awr_beta}")
        check(self.awr_clip > 0, "awr_clip", f"must be > 0, got {self.awr_clip}")
        check(0.0 <= self.filter_quantile < 1.0, "filter_quantile", "must be in [0, 1)")


@dataclass(frozen=True)
class LLMConfig:
    # who answers the LLM reward models: hf (a local model, `model`, on the project's generators) | openai (the
    # teacher's OpenAI-compatible endpoint: teacher.openai and teacher.retry; the key from its environment variable)
    backend: Literal["hf", "openai"] = "hf"
    # the local model (conf: SmolLM2-135M-Instruct, the model group's own entry)
    model: ModelConfig = field(default_factory=ModelConfig)
    # the local model's generator: fast (Qwen2 / Llama text) | hf (transformers)
    generation: Literal["fast", "hf"] = "fast"
    temperature: float = 0.7
    max_new_tokens: int = 512
    # attempts of the whole pipeline per sample before the trajectory fails (the seed's DNA: 3)
    retries: int = 3
    # independent samples averaged (the seed: 1)
    n_samples: int = 1
    # the LLM reward models score this many (task, instruction) groups of the bench, a seeded draw (0 = all)
    groups: int = 24
    seed: int = 0

    def __post_init__(self) -> None:
        check(self.retries >= 1, "retries", f"must be >= 1, got {self.retries}")
        check(self.n_samples >= 1, "n_samples", f"must be >= 1, got {self.n_samples}")
        check(self.max_new_tokens >= 16, "max_new_tokens", f"must be >= 16, got {self.max_new_tokens}")
        check(0.0 <= self.temperature <= 2.0, "temperature", f"must be in [0, 2], got {self.temperature}")
        check(self.groups >= 0, "groups", f"must be >= 0 (0 = all), got {self.groups}")


def _tiny_sft(max_steps: int, batch_size: int, max_len: int) -> SFTConfig:
    return SFTConfig(
        lr=1e-3,
        max_steps=max_steps,
        batch_size=batch_size,
        grad_accum=1,
        warmup_ratio=0.05,
        max_len=max_len,
        save_steps=50,
        num_threads=2,
        logging_steps=10,
    )


@dataclass(frozen=True)
class TrainConfig:
    # the split whose optimal trajectories teach the learned reward models (never the bench's)
    split: str = "train"
    # episodes used (0 = all), in file order
    episodes: int = 1500
    # seeded prefixes of each optimal trajectory beside the whole one (direct_tiny's records)
    prefixes: int = 2
    # the checkpoint both start from: sft (the SFT policy: knows the world's words) | base
    init: Literal["sft", "base"] = "sft"
    # direct_tiny: instruction + key frames -> progress per frame
    direct_sft: SFTConfig = field(default_factory=lambda: _tiny_sft(600, 8, 1024))
    # criterion_tiny: instruction -> the criterion in the world's names
    criterion_sft: SFTConfig = field(default_factory=lambda: _tiny_sft(300, 16, 256))
    # answers read per trajectory before it fails (the first greedy, the others sampled at T = 0.7)
    retries: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        check(bool(self.split), "split", "must name an episode split, e.g. train")
        check(self.episodes >= 0, "episodes", f"must be >= 0 (0 = all), got {self.episodes}")
        check(self.prefixes >= 0, "prefixes", f"must be >= 0, got {self.prefixes}")
        check(self.retries >= 1, "retries", f"must be >= 1, got {self.retries}")


@dataclass(frozen=True)
class DnaConfig:
    frames: FramesConfig = field(default_factory=FramesConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    # the reward models of stage rm_eval_tiny (the learned ones: rm_train's models; and their gold-criterion
    # references)
    tiny_rms: tuple[str, ...] = (
        "planner",
        "direct_tiny",
        "criterion_tiny",
        "criterion_tiny_ungrounded",
        "criterion_gold",
        "criterion_gold_ungrounded",
    )
