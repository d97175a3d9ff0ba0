"""The ``grpo:`` config section, shared by both GRPO engines (``backend=local`` and ``backend=openrlhf``).

Input: the ``grpo`` mapping of the composed config (``conf/grpo/<backend>.yaml``), read with
``config.build(GRPOConfig, section, "grpo")``. Output: a frozen, self-checking :class:`GRPOConfig`.

Defaults are the paper's settings where the paper (or its RR code, an OpenRLHF 0.6 fork; docs/facts.md §1.5) states
them, so a field left out of a YAML file means "as the paper did"; ``conf/grpo/local.yaml`` overrides them
for the tiny CPU run. Units: tokens for lengths, sequences (= responses) for ``train_batch_size`` and
``micro_batch_size``, prompts (= groups) for ``rollout_batch_size`` and ``filter.buffer_size``.

One optimiser *update* = one AdamW step over ``train_batch_size`` sequences of the buffer. A full buffer of
N_B groups holds N_B·G sequences; K_2 = ``filter.updates_per_buffer`` updates run on it, walking it in
shuffled minibatches (a new shuffle each pass). OpenRLHF expresses the same as
K_2 = max_epochs × N_B·G / train_batch_size (docs/facts.md §5.5); :meth:`GRPOConfig.openrlhf_epochs` does the division.

Plug-in points of the local engine (core/plugins.py): :data:`GROUP_MEMBERS` (``grpo.anchors``: constructed members
of a group) and :data:`METERS` (per-response measures logged beside the reward); ReGRPO registers both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from embodied_rft.config import ConfigError, check
from embodied_rft.core import plugins
from embodied_rft.filtering import FilterConfig
from embodied_rft.train.grpo.onpolicy import OnPolicyConfig

# grpo.anchors, by the option's name: ``members(kinds)`` checks the kinds; ``members(kinds, ctx, cfg)`` (the stage's
# context and this config) returns the writer whose ``applies(sample)`` and ``answers(sample) -> [(kind, text)]`` the
# engine asks for a group's constructed members
GROUP_MEMBERS = plugins.Registry("group member writer")
# measures of each sampled response for the rollout rows (their reflection tokens, clean and silent calls), by the
# reward variant or a sample field that turns them on: ``meter(count_tokens) -> fn(sample, text) -> (tokens, clean,
# silent)``, ``count_tokens`` the policy tokenizer's count (train/grpo/log.py RolloutStats)
METERS = plugins.Registry("rollout meter")


def _paper_filter() -> FilterConfig:
    # RR code: 128 prompts per rollout, K_2 = 1 epoch x 128 x 8 / 128 = 8 (inferred; docs/facts.md §1.6, §5.5).
    return FilterConfig(buffer_size=128, updates_per_buffer=8)


@dataclass(frozen=True)
class OpenRLHFConfig:
    """Cluster-only settings of ``backend=openrlhf`` (ignored by the local engine)."""

    # Ray job server for `ray job submit` ("" = $RAY_ADDRESS, else the local head's http://127.0.0.1:8265).
    ray_address: str = ""
    # Nodes and GPUs per node for the actor (the reference shares them when kl_coef > 0). RR: 1 × 8.
    num_nodes: int = 1
    gpus_per_node: int = 8
    # vLLM rollout engines and their tensor-parallel size. RR: 8 engines, TP 1 (colocated).
    vllm_num_engines: int = 8
    vllm_tensor_parallel_size: int = 1
    # Fraction of GPU memory vLLM may take when colocated with training.
    vllm_gpu_memory_utilization: float = 0.5
    # Colocate actor, reference and vLLM on the same GPUs (with vLLM sleep mode). RR: colocated.
    colocate_all: bool = True
    # DeepSpeed ZeRO stage. Paper/RR: ZeRO-3.
    zero_stage: int = 3
    # Parameter dtype. Paper/RR: bf16.
    param_dtype: Literal["bf16", "fp16"] = "bf16"
    # Attention kernel; flash_attention_2 needs flash-attn (GPU only).
    attn_implementation: str = "flash_attention_2"
    # Gradient checkpointing in the actor (needed for a 7B VLM at 4096 new tokens on 40 GB cards).
    gradient_checkpointing: bool = True
    # Sequences per forward/backward in the actor and per forward in experience making (per GPU).
    micro_train_batch_size: int = 1
    micro_rollout_batch_size: int = 2
    # Images per prompt for vLLM (0 = text-only model). EB-ALFRED prompts carry one frame.
    max_images_per_prompt: int = 1
    # A folder every Ray node mounts at the same path (the cluster's shared filesystem), where the stage puts what
    # the job reads and writes (prompts, checkpoints, the trained model, the reward records). "" = the DVC
    # workspace itself, which is right when the workspace lives on the shared filesystem (and on a local Ray head).
    # The job's inputs (the policy, image folders) must be under it; see ``copy_inputs``.
    shared_root: str = ""
    # Copy an input that is not under ``shared_root`` into the job's folder there (the policy checkpoint: a 7B
    # model is ~16 GB), instead of refusing to submit.
    copy_inputs: bool = False
    # The trainer module the job runs (``python3 -m <trainer>``). OpenRLHF's; the tests name a CPU stand-in.
    trainer: str = "openrlhf.cli.train_ppo_ray"
    # Save a DeepSpeed checkpoint every N updates (-1 = never); a resubmitted job resumes from it
    # (--ckpt.load_enable; the stage keeps the checkpoint folder across attempts with the same inputs).
    save_steps: int = 20
    # Environment variables for the job (names and non-secret values only; secrets come from the cluster). The
    # keys OpenRLHF's own ray.init sets (DRIVER_ENV) go to the trainer's driver process, which hands them on;
    # every other key goes to every Ray worker of the job through its runtime env.
    env: dict[str, str] = field(default_factory=lambda: {"TOKENIZERS_PARALLELISM": "false", "NCCL_DEBUG": "WARN"})
    # W&B project for OpenRLHF's own logger (the key comes from WANDB_API_KEY on the cluster; "" = off).
    wandb_project: str = ""

    def __post_init__(self) -> None:
        check(self.num_nodes >= 1, "grpo.openrlhf.num_nodes", f"must be >= 1, got {self.num_nodes}")
        check(self.gpus_per_node >= 1, "grpo.openrlhf.gpus_per_node", f"must be >= 1, got {self.gpus_per_node}")
        check(
            self.vllm_num_engines >= 1,
            "grpo.openrlhf.vllm_num_engines",
            "must be >= 1 (rewards from a file need vLLM rollouts)",
        )
        check(self.vllm_tensor_parallel_size >= 1, "grpo.openrlhf.vllm_tensor_parallel_size", "must be >= 1")
        check(
            0 < self.vllm_gpu_memory_utilization <= 1, "grpo.openrlhf.vllm_gpu_memory_utilization", "must be in (0, 1]"
        )
        check(self.zero_stage in (0, 1, 2, 3), "grpo.openrlhf.zero_stage", f"must be 0..3, got {self.zero_stage}")
        check(self.micro_train_batch_size >= 1, "grpo.openrlhf.micro_train_batch_size", "must be >= 1")
        check(self.micro_rollout_batch_size >= 1, "grpo.openrlhf.micro_rollout_batch_size", "must be >= 1")
        check(self.max_images_per_prompt >= 0, "grpo.openrlhf.max_images_per_prompt", "must be >= 0")
        check(bool(self.trainer.strip()), "grpo.openrlhf.trainer", "must name a module (openrlhf.cli.train_ppo_ray)")
        check(
            not self.shared_root or self.shared_root.startswith("/"),
            "grpo.openrlhf.shared_root",
            f'must be an absolute path every Ray node mounts at the same place, or "" for the workspace; got '
            f"{self.shared_root!r}",
        )
        for k in self.env:
            if set(k.upper().split("_")) & {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIALS"}:
                raise ConfigError(
                    f"grpo.openrlhf.env.{k}: looks like a secret; secrets must come from the cluster environment, "
                    "never from the config (it is committed and sent with the job)"
                )
        if self.colocate_all:
            n = self.num_nodes * self.gpus_per_node
            check(
                n == self.vllm_num_engines * self.vllm_tensor_parallel_size,
                "grpo.openrlhf.vllm_num_engines",
                f"with colocate_all, vllm_num_engines × vllm_tensor_parallel_size must equal num_nodes × gpus_per_node "
                f"({n}); got {self.vllm_num_engines} × {self.vllm_tensor_parallel_size}",
            )

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True)
class GRPOConfig:
    """GRPO settings (paper §3.2, docs/facts.md §1.5-1.6). Defaults = the paper's; see the module docstring."""

    # Engine: local (torch, CPU or one GPU; the embedded default) | openrlhf (Ray job on a GPU cluster).
    backend: Literal["local", "openrlhf"] = "local"
    # Policy GRPO starts from: sft (the paper: SFT then RFT) | base (the paper's ablation: RFT without SFT).
    init: Literal["sft", "base"] = "sft"
    # G: responses sampled per prompt. Paper: 8.
    group_size: int = 8
    # Sampling temperature of the rollouts. Paper: 1.0.
    temperature: float = 1.0
    # Nucleus mass of the rollouts (1.0 = off). Paper: 1.0 (OpenRLHF default).
    top_p: float = 1.0
    # New-token cap per response (tokens). Paper: 4096.
    max_new_tokens: int = 4096
    # Prompt cap (tokens); longer prompts are cut from the left (OpenRLHF's behaviour). Paper: 3000.
    max_prompt_tokens: int = 3000
    # Prompts sampled per generation call (local) / per rollout micro-batch. Not in the paper (engine detail).
    rollout_batch_size: int = 4
    # Local engine: size each generation call to fill the buffer — the groups still missing divided by the
    # filter's acceptance rate so far ((accepted + 1) / (seen + 2)), at least rollout_batch_size and at most
    # 8 x filter.buffer_size prompts. Larger calls decode larger batches (the sampler's per-step costs and
    # its tail of long answers are paid once per call, not once per rollout_batch_size prompts); the groups
    # of a call that the buffer cannot take wait for the next buffer, as with fixed-size calls.
    rollout_fill: bool = False
    # Peak learning rate (AdamW). Paper: actor lr 1e-6.
    lr: float = 1e-6
    # LR schedule (transformers' get_scheduler, as OpenRLHF builds it): cosine_with_min_lr (OpenRLHF's
    # default, so the RR code's) | constant_with_warmup. Planned length: max_updates, else the updates
    # num_episodes would take if every group passed the filter.
    lr_scheduler: Literal["cosine_with_min_lr", "constant_with_warmup"] = "cosine_with_min_lr"
    # Warmup, as a fraction of the planned updates. OpenRLHF default (RR): 0.03.
    warmup_ratio: float = 0.03
    # Floor of the cosine schedule, as a fraction of lr. OpenRLHF default (RR): 0.1.
    min_lr_ratio: float = 0.1
    # AdamW weight decay and betas. OpenRLHF defaults (the RR code did not change them): 0.0, (0.9, 0.95).
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.95)
    # β: coefficient of the k3 KL loss to the frozen reference; 0 = no reference model at all. Paper: 0.0.
    kl_coef: float = 0.0
    # ε: PPO clip range of the ratio. Paper: 0.2 (OpenRLHF default).
    eps_clip: float = 0.2
    # ε in A = (r − mean)/(std + ε). OpenRLHF: 1e-9; TRL: 1e-4. Small enough not to matter for std > 0.
    adv_eps: float = 1e-6
    # group advantage: group_norm = (r − mean)/(std + ε), the paper's GRPO | dr_grpo = r − mean (Dr. GRPO; OpenRLHF's
    # --algo.advantage.estimator of the same names)
    advantage: Literal["group_norm", "dr_grpo"] = "group_norm"
    # The online accuracy filter, N_B (filter.buffer_size, groups) and K_2 (filter.updates_per_buffer).
    # Paper: lower 1, upper G − 1 (RR: group-mean accuracy in [0.1, 0.9]); N_B 128, K_2 8 (inferred).
    filter: FilterConfig = field(default_factory=_paper_filter)
    # Sequences per optimiser update; 0 = the whole buffer (N_B × G). Paper/RR: 128.
    train_batch_size: int = 128
    # Sequences per forward/backward pass (gradient accumulation up to train_batch_size). Engine detail.
    micro_batch_size: int = 4
    # How a pass over the buffer is cut into minibatches: rows (every (group, response) pair shuffled; OpenRLHF's
    # replay buffer) | groups (whole groups in shuffled order, train_batch_size / G of them per update, as TRL's
    # repeat sampler batches them). With groups an update's advantages sum to zero and it computes fewer distinct
    # prompts (the shared-prompt forward's cost per prompt). Needs train_batch_size to be a multiple of G.
    minibatch: Literal["rows", "groups"] = "rows"
    # Token-loss aggregation: token_mean (every response token of an update weighs the same; OpenRLHF
    # default, which the RR code used) | seq_mean_token_mean (the GRPO paper's 1/G Σ 1/|o| Σ_t).
    loss_agg: Literal["token_mean", "seq_mean_token_mean"] = "token_mean"
    # Gradient-norm clip. OpenRLHF default: 1.0.
    max_grad_norm: float = 1.0
    # Stop after this many optimiser updates (0 = no cap; then num_episodes decides).
    max_updates: int = 0
    # Passes over the training prompts. Paper: 10 episodes.
    num_episodes: int = 10
    # Use at most this many training prompts, a fixed-seed subset (0 = all; paper: all 43,898).
    max_train_prompts: int = 0
    # Random seed for prompt order, sampling and minibatch shuffles. The paper does not report one.
    seed: int = 0
    # Checkpoint into work_dir every N updates (at the end of the buffer that crosses it); 0 = never.
    save_every: int = 20
    # Rollout generation in this many Ray actors, each holding a policy copy refreshed after every buffer
    # (0 = generate in the training process). The paper's OpenRLHF used vLLM engines instead.
    num_rollout_workers: int = 0
    # Rollouts (and the held-out greedy check) in this many single-thread processes that read the trainer's
    # parameters from shared memory (train/grpo/workers.py; CPU, fast-sampler models); 0 = in the training process.
    # Two such processes decode faster than one two-thread process on 2 cores (bench/bench_sampler.py).
    rollout_processes: int = 0
    # Rollout and held-out sampler: fast (the project's sampler for Qwen2/Llama text models: one prefill per
    # prompt for its G samples, in-place K/V cache, finished rows dropped, sampled-token log-probs returned so
    # no old-log-prob pass runs) | hf (transformers' generate, then a log-prob pass) | auto (fast where the
    # model qualifies, else hf; VLMs take hf). The paper's OpenRLHF samples with vLLM (backend=openrlhf).
    sampler: Literal["auto", "fast", "hf"] = "auto"
    # Fast sampler only: live rows per sampler at most (continuous batching: a call's other prompts wait and are
    # admitted, G rows each, as rows finish); None = every row of a call at once. For memory-bound models and
    # calls; on the tiny default all-at-once measured faster (bench/bench_sampler.py).
    sampler_max_rows: int | None = None
    # Forward of the update step: shared_prompt (each distinct prompt of a micro-batch computed once, its
    # responses attending to its keys/values; micro-batches cut from the minibatch sorted by response length)
    # | padded (prompt + response rows, left/right padded, each prompt recomputed per response) | auto
    # (shared_prompt where the fast sampler's model check passes, else padded). Same loss and gradient (tested).
    update_forward: Literal["auto", "shared_prompt", "padded"] = "auto"
    # CPUs Ray may use when it starts a local cluster for the rollout workers.
    ray_num_cpus: int = 2
    # Trackers besides DVC's metrics/plots: "wandb" (offline unless wandb_mode says otherwise).
    report_to: tuple[str, ...] = ("wandb",)
    # W&B mode and project: offline (default; sync later with `wandb sync`) | online | disabled.
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    wandb_project: str = "embodied_rft"
    # Held-out greedy evaluation before and after GRPO on at most this many val samples (0 = skip).
    eval_max_samples: int = 64
    # New-token cap of the held-out evaluation (0 = max_new_tokens).
    eval_max_new_tokens: int = 0
    # Prompts per evaluation batch.
    eval_batch_size: int = 8
    # Weights dtype for training: float32 (CPU default) | bfloat16 (paper: bf16).
    dtype: Literal["float32", "bfloat16"] = "float32"
    # auto = cuda when available, else cpu.
    device: str = "auto"
    # CPU threads for torch in this process (0 = torch's default, one per core). Tiny models gain nothing
    # from intra-op threads and lose a lot when cores are shared (docs/performance.md).
    num_threads: int = 0
    # torch.use_deterministic_algorithms for the run: with more than one intra-op thread, backward passes
    # otherwise sum in a varying order and two runs of the same config drift apart from the third update on
    # (measured: same weights with it, different without; no measurable cost on CPU). On GPU, ops without a
    # deterministic kernel warn instead of failing.
    deterministic: bool = True
    # Gradient checkpointing (saves memory on long responses; costs about one extra forward).
    gradient_checkpointing: bool = False
    # Vision models: keep the vision tower and projector frozen. Paper: frozen.
    freeze_vision: bool = True
    # Cluster settings for backend=openrlhf.
    openrlhf: OpenRLHFConfig = field(default_factory=OpenRLHFConfig)
    # On-policy prompts: states the initial policy reaches in training episodes (train/grpo/onpolicy.py).
    # Off (episodes 0) in the paper, which trains on the offline decomposed prompts only.
    onpolicy: OnPolicyConfig = field(default_factory=OnPolicyConfig)
    # Which decomposed train samples are prompts: all (the paper) | recovery (only those after a mistaken action:
    # with decompose.rot, ReGRPO's RoT states; docs/regrpo.md §5).
    decomposed_prompts: Literal["all", "recovery"] = "all"
    # constructed group members (GROUP_MEMBERS), e.g. ReGRPO's (regrpo/anchors.py; the released trainer's groups, not
    # the paper's): for a RoT state, the last len(anchors) of its G samples are replaced by these answers — correct |
    # reflect | failed | corrupted — scored by the same reward. [] (default) = sampled groups only. Local engine only.
    anchors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        g = self.group_size
        check(g >= 2, "grpo.group_size", f"G must be >= 2 for group-normalised advantages; got {g}")
        check(
            0.0 < self.temperature <= 5.0,
            "grpo.temperature",
            f"must be in (0, 5] (rollouts sample); got {self.temperature}",
        )
        check(0.0 < self.top_p <= 1.0, "grpo.top_p", f"must be in (0, 1]; got {self.top_p}")
        check(self.max_new_tokens >= 1, "grpo.max_new_tokens", f"must be >= 1; got {self.max_new_tokens}")
        check(self.max_prompt_tokens >= 8, "grpo.max_prompt_tokens", f"must be >= 8; got {self.max_prompt_tokens}")
        check(self.rollout_batch_size >= 1, "grpo.rollout_batch_size", f"must be >= 1; got {self.rollout_batch_size}")
        check(self.lr > 0, "grpo.lr", f"must be > 0; got {self.lr}")
        check(0.0 <= self.warmup_ratio < 1.0, "grpo.warmup_ratio", f"must be in [0, 1); got {self.warmup_ratio}")
        check(0.0 <= self.min_lr_ratio <= 1.0, "grpo.min_lr_ratio", f"must be in [0, 1]; got {self.min_lr_ratio}")
        check(self.weight_decay >= 0, "grpo.weight_decay", f"must be >= 0; got {self.weight_decay}")
        check(all(0 <= b < 1 for b in self.adam_betas), "grpo.adam_betas", f"must be in [0, 1); got {self.adam_betas}")
        check(self.kl_coef >= 0, "grpo.kl_coef", f"β must be >= 0; got {self.kl_coef}")
        check(0 < self.eps_clip < 1, "grpo.eps_clip", f"ε must be in (0, 1); got {self.eps_clip}")
        check(self.adv_eps > 0, "grpo.adv_eps", f"must be > 0; got {self.adv_eps}")
        check(
            self.advantage in ("group_norm", "dr_grpo"),
            "grpo.advantage",
            f"group_norm | dr_grpo; got {self.advantage!r}",
        )
        self.filter.bounds(g)  # raises when lower/upper cannot fit G
        check(
            self.train_batch_size >= 0,
            "grpo.train_batch_size",
            f"must be >= 0 (0 = whole buffer); got {self.train_batch_size}",
        )
        n_seq = self.filter.buffer_size * g
        check(
            self.train_batch_size <= n_seq,
            "grpo.train_batch_size",
            f"{self.train_batch_size} sequences exceed one full buffer (filter.buffer_size × group_size = {n_seq})",
        )
        check(self.micro_batch_size >= 1, "grpo.micro_batch_size", f"must be >= 1; got {self.micro_batch_size}")
        check(self.minibatch in ("rows", "groups"), "grpo.minibatch", f"rows | groups; got {self.minibatch!r}")
        check(
            self.minibatch == "rows" or self.update_batch % self.group_size == 0,
            "grpo.minibatch",
            f"groups needs train_batch_size ({self.update_batch}) to be a multiple of group_size ({self.group_size})",
        )
        check(self.max_grad_norm > 0, "grpo.max_grad_norm", f"must be > 0; got {self.max_grad_norm}")
        check(self.max_updates >= 0, "grpo.max_updates", f"must be >= 0 (0 = no cap); got {self.max_updates}")
        check(self.num_episodes >= 1, "grpo.num_episodes", f"must be >= 1; got {self.num_episodes}")
        check(self.max_train_prompts >= 0, "grpo.max_train_prompts", "must be >= 0 (0 = all)")
        check(self.save_every >= 0, "grpo.save_every", "must be >= 0 (0 = never)")
        check(self.num_rollout_workers >= 0, "grpo.num_rollout_workers", "must be >= 0 (0 = in-process)")
        check(self.ray_num_cpus >= 1, "grpo.ray_num_cpus", "must be >= 1")
        check(
            self.sampler_max_rows is None or self.sampler_max_rows >= self.group_size,
            "grpo.sampler_max_rows",
            f"must be null or >= group_size ({self.group_size}); got {self.sampler_max_rows}",
        )
        check(self.rollout_processes >= 0, "grpo.rollout_processes", "must be >= 0 (0 = in-process)")
        if self.anchors:
            GROUP_MEMBERS.lookup("anchors", "grpo.anchors")(self.anchors)
        check(
            len(self.anchors) < g,
            "grpo.anchors",
            f"{len(self.anchors)} constructed members leave no sampled response in a group of {g}",
        )
        check(
            not self.anchors or self.backend == "local",
            "grpo.anchors",
            "constructed group members are the local engine's (grpo.backend=local)",
        )
        check(
            not (self.rollout_processes and self.num_rollout_workers),
            "grpo.rollout_processes",
            "cannot be combined with grpo.num_rollout_workers (Ray actors); set one of them to 0",
        )
        check(
            not (self.rollout_processes and self.sampler == "hf"),
            "grpo.rollout_processes",
            "the worker processes run the fast sampler; grpo.sampler=hf needs rollout_processes=0",
        )
        check(self.sampler in ("auto", "fast", "hf"), "grpo.sampler", f"must be auto, fast or hf; got {self.sampler!r}")
        check(
            self.update_forward in ("auto", "shared_prompt", "padded"),
            "grpo.update_forward",
            f"must be auto, shared_prompt or padded; got {self.update_forward!r}",
        )
        for i, r in enumerate(self.report_to):
            check(
                r in ("wandb",), f"grpo.report_to[{i}]", f"unknown tracker {r!r}; supported: wandb (or an empty list)"
            )
        check(self.eval_max_samples >= 0, "grpo.eval_max_samples", "must be >= 0 (0 = skip)")
        check(self.eval_max_new_tokens >= 0, "grpo.eval_max_new_tokens", "must be >= 0 (0 = max_new_tokens)")
        check(self.eval_batch_size >= 1, "grpo.eval_batch_size", "must be >= 1")
        check(self.num_threads >= 0, "grpo.num_threads", "must be >= 0 (0 = torch's default)")

    @property
    def sequences_per_buffer(self) -> int:
        """N_B × G: the responses one full buffer holds."""
        return self.filter.buffer_size * self.group_size

    @property
    def update_batch(self) -> int:
        """Sequences per optimiser update (train_batch_size, or the whole buffer when it is 0)."""
        return self.train_batch_size or self.sequences_per_buffer

    def openrlhf_epochs(self) -> int:
        """OpenRLHF's ``--train.max_epochs`` for K_2 updates per buffer; ConfigError when it is not whole.

        OpenRLHF runs ``max_epochs`` passes over the N_B·G sequences of a rollout in minibatches of
        ``train_batch_size``: K_2 = max_epochs × N_B·G / train_batch_size.
        """
        n_seq, tb, k2 = self.sequences_per_buffer, self.update_batch, self.filter.updates_per_buffer
        if n_seq % tb:
            raise ConfigError(
                f"grpo.train_batch_size: {tb} must divide filter.buffer_size × group_size = {n_seq} for OpenRLHF "
                f"(it drops a ragged last minibatch); try {_divisors_near(n_seq, tb)}"
            )
        per_epoch = n_seq // tb
        if k2 % per_epoch:
            raise ConfigError(
                f"filter.updates_per_buffer: K_2 = {k2} is not a whole number of OpenRLHF epochs; one epoch over the "
                f"buffer is {n_seq}/{tb} = {per_epoch} updates, so K_2 must be a multiple of {per_epoch} "
                f"(or change train_batch_size to {n_seq // k2 if n_seq % k2 == 0 else 'a divisor of ' + str(n_seq)})"
            )
        return k2 // per_epoch

    def replace(self, **changes: object) -> GRPOConfig:
        return dataclasses.replace(self, **changes)


def _divisors_near(n: int, x: int) -> list[int]:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    return sorted(divs, key=lambda d: abs(d - x))[:3]


__all__ = ["GRPOConfig", "OpenRLHFConfig"]
