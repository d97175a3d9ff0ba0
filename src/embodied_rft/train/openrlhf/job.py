"""The cluster GRPO engine (``grpo.backend=openrlhf``): the OpenRLHF 0.11.2 command for our GRPO config.

Inputs: a :class:`GRPOConfig` (the same section the local engine reads), the policy path as the cluster
sees it, decomposed train samples. Outputs: OpenRLHF's prompt data (JSONL: ``prompt`` chat messages,
``label``, ``images`` = [path] for a VLM), the ``python3 -m openrlhf.cli.train_ppo_ray`` argv (dotted flags,
docs/facts.md §5.1) and the ``ray job submit`` argv with its runtime env (working dir, non-secret env vars). Nothing
here imports OpenRLHF: the argv is checked against the installed OpenRLHF parser by the contract tests.

The mapping (paper §3.2-3.3 → OpenRLHF):
* G → ``--rollout.n_samples_per_prompt``; the group advantage (``grpo.advantage``: ``group_norm``, the paper's, or
  ``dr_grpo``, r − mean, neither whitened over the batch by OpenRLHF) → ``--algo.advantage.estimator``;
  ε → ``--actor.eps_clip``; β → ``--algo.kl.init_coef`` (with ``--algo.kl.use_loss --algo.kl.estimator k3``
  when β > 0; at β = 0 OpenRLHF builds no reference model);
* the accuracy filter lower ≤ C_x ≤ upper → ``--algo.dynamic_filtering_enable --algo.dynamic_filtering_range
  LO HI`` with LO = (lower − 0.5)/G, HI = (upper + 0.5)/G over the reward file's ``scores`` = accuracy_full
  (``filtering.openrlhf_range``; OpenRLHF keeps a group iff LO < mean(scores) < HI and replaces rejected
  prompts until N_B are accepted);
* N_B → ``--rollout.batch_size`` (prompts per rollout); K_2 = max_epochs × N_B·G / train_batch_size →
  ``--train.max_epochs`` = K_2 / (N_B·G / ``--train.batch_size``) (``GRPOConfig.openrlhf_epochs`` checks it
  is whole);
* the reward → ``--reward.remote_url src/embodied_rft/train/openrlhf/reward.py`` (``reward``), the
  variant passed as ``EMBODIED_RFT_REWARD_VARIANT`` in the job's env.

Not expressible in OpenRLHF (the local engine's extras): ``minibatch: groups`` (OpenRLHF's replay buffer
shuffles single samples: ``rows``), ``filter.drop_zero_variance`` (OpenRLHF trains
on equal-reward groups, which carry zero advantage), ``filter.on_stall``/``max_consecutive_rejects``
(OpenRLHF keeps replacing prompts until the data runs out). Its logged filter pass rate is G× too high
(an upstream bug, docs/facts.md §5.4).

Every path the job reads or writes is absolute, in the job's folder under ``grpo.openrlhf.shared_root``
(:class:`JobLayout`; the stage puts it there, :mod:`.cluster`), because Ray runs the entrypoint in an uploaded copy
of the repository that holds no models, no caches and no git-ignored (DVC) files. The entrypoint is
:mod:`.entry` wrapping the trainer: it checks every input from where the job runs before any training, records the
job (host, OpenRLHF's version) and the trainer's log in the job's folder, and checks the model it wrote.

``python -m embodied_rft.train.openrlhf.dry_run [overrides]`` (``make grpo-cluster-dry``) prints the command the
``grpo`` stage would submit; submitting is the stage's (``dvc repro grpo``, ``make grpo-cluster``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rft.config import check
from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.jsonl import DataError, iter_jsonl
from embodied_rft.train.grpo.config import GRPOConfig

log = logging.getLogger(__name__)

# The reward file OpenRLHF loads by path in the job: this module's file, relative to the job's working_dir (the
# repository root uploaded by `ray job submit`; git-tracked, so Ray uploads it).
REWARD_MODULE = "embodied_rft.train.openrlhf.reward"
REWARD_FILE = "src/" + REWARD_MODULE.replace(".", "/") + ".py"
# The environment variables OpenRLHF's train_ppo_ray sets in its own ray.init(runtime_env=...): Ray refuses to merge
# a job runtime env that sets any of them too ("Failed to merge the Job's runtime env"), so they go to the trainer's
# driver process instead, whose values OpenRLHF hands on to its workers.
DRIVER_ENV = ("TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS")
# The job-side wrapper around the trainer (train/openrlhf/entry.py).
ENTRY = "embodied_rft.train.openrlhf.entry"
# Uploading these would be slow or useless: environments, caches, local models and DVC's cache.
DEFAULT_EXCLUDES = (
    ".git",
    ".venv",
    ".venv-*",
    ".dvc/cache",
    ".dvc/tmp",
    ".cache",
    "models",
    "multirun",
    "outputs",
    "wandb",
)


@dataclass(frozen=True)
class JobLayout:
    """The job's folder on the shared filesystem and what goes in it; every path absolute. The stage writes
    ``prompts`` (and ``inputs/`` when it copies inputs there); the job writes ``record`` and ``log`` (:mod:`.entry`),
    ``model`` (``--ckpt.output_dir``), ``ckpt`` (``--ckpt.path``, kept across attempts so a resubmitted job
    resumes) and ``rewards`` (one JSONL file per rewarding process, the reward file's records)."""

    dir: Path

    @classmethod
    def under(cls, root: str | Path, work_dir: str, key: str) -> JobLayout:
        """``<root>/<work_dir>/openrlhf/<key>``: one folder per job inputs (config, policy, prompts)."""
        return cls(Path(root).absolute() / work_dir / "openrlhf" / key)

    @property
    def prompts(self) -> Path:
        return self.dir / "prompts.jsonl"

    @property
    def model(self) -> Path:
        return self.dir / "model"

    @property
    def ckpt(self) -> Path:
        return self.dir / "ckpt"

    @property
    def rewards(self) -> Path:
        return self.dir / "rewards"

    @property
    def record(self) -> Path:
        return self.dir / "job.json"

    @property
    def log(self) -> Path:
        return self.dir / "trainer.log"

    @property
    def inputs(self) -> Path:
        return self.dir / "inputs"


def filter_flags(cfg: GRPOConfig) -> list[str]:
    """The dynamic-filtering flags that keep exactly the groups the paper's filter keeps."""
    f = cfg.filter
    if not f.enabled:
        if f.drop_zero_variance:
            log.warning(
                "grpo.filter.drop_zero_variance has no OpenRLHF equivalent; equal-reward groups will be trained on"
            )
        return []
    lo, hi = f.openrlhf_range(cfg.group_size)
    return ["--algo.dynamic_filtering_enable", "--algo.dynamic_filtering_range", repr(lo), repr(hi)]


def check_batches(cfg: GRPOConfig) -> int:
    """Validate OpenRLHF's batch arithmetic for ``cfg``; returns ``--train.max_epochs``."""
    o = cfg.openrlhf
    epochs = cfg.openrlhf_epochs()
    tb, dp = cfg.update_batch, o.world_size
    check(
        tb % (o.micro_train_batch_size * dp) == 0,
        "grpo.train_batch_size",
        f"{tb} must be a multiple of openrlhf.micro_train_batch_size × GPUs = {o.micro_train_batch_size} × {dp} "
        "(DeepSpeed splits each update into equal micro-batches per GPU)",
    )
    check(
        cfg.sequences_per_buffer // o.micro_rollout_batch_size >= dp,
        "grpo.openrlhf.micro_rollout_batch_size",
        f"N_B × G / micro_rollout_batch_size = {cfg.sequences_per_buffer} / {o.micro_rollout_batch_size} must be >= the "
        f"number of actor GPUs ({dp})",
    )
    return epochs


def openrlhf_args(
    cfg: GRPOConfig,
    *,
    policy_path: str,
    prompt_data: str,
    layout: JobLayout,
    vision: bool = False,
    reward_file: str = REWARD_FILE,
    eval_data: str | None = None,
    max_samples: int | None = None,
) -> list[str]:
    """The flags of ``openrlhf.cli.train_ppo_ray`` for ``cfg`` (see the module docstring's mapping); checkpoints and
    the final model go to ``layout``'s folders."""
    o = cfg.openrlhf
    epochs = check_batches(cfg)
    agg = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean"}[cfg.loss_agg]
    a: list[str] = [
        # models and placement
        "--actor.model_name_or_path",
        policy_path,
        "--actor.num_nodes",
        str(o.num_nodes),
        "--actor.num_gpus_per_node",
        str(o.gpus_per_node),
        "--vllm.num_engines",
        str(o.vllm_num_engines),
        "--vllm.tensor_parallel_size",
        str(o.vllm_tensor_parallel_size),
        "--vllm.gpu_memory_utilization",
        repr(o.vllm_gpu_memory_utilization),
        # GRPO
        "--algo.advantage.estimator",
        cfg.advantage,
        "--rollout.n_samples_per_prompt",
        str(cfg.group_size),
        "--rollout.batch_size",
        str(cfg.filter.buffer_size),
        "--rollout.micro_batch_size",
        str(o.micro_rollout_batch_size),
        "--rollout.temperature",
        repr(cfg.temperature),
        "--rollout.top_p",
        repr(cfg.top_p),
        "--rollout.max_new_tokens",
        str(cfg.max_new_tokens),
        "--data.max_len",
        str(cfg.max_prompt_tokens + cfg.max_new_tokens),
        "--train.batch_size",
        str(cfg.update_batch),
        "--train.micro_batch_size",
        str(o.micro_train_batch_size),
        "--train.max_epochs",
        str(epochs),
        "--train.num_episodes",
        str(cfg.num_episodes),
        "--train.seed",
        str(cfg.seed),
        "--actor.eps_clip",
        repr(cfg.eps_clip),
        "--actor.loss_agg_mode",
        agg,
        "--algo.kl.init_coef",
        repr(cfg.kl_coef),
        # optimiser
        "--actor.adam.lr",
        repr(cfg.lr),
        "--actor.adam.betas",
        repr(cfg.adam_betas[0]),
        repr(cfg.adam_betas[1]),
        "--actor.adam.weight_decay",
        repr(cfg.weight_decay),
        "--actor.lr_scheduler",
        cfg.lr_scheduler,
        "--actor.lr_warmup_ratio",
        repr(cfg.warmup_ratio),
        "--actor.min_lr_ratio",
        repr(cfg.min_lr_ratio),
        "--actor.max_norm",
        repr(cfg.max_grad_norm),
        # reward and data
        "--reward.remote_url",
        reward_file,
        "--data.prompt_dataset",
        prompt_data,
        "--data.input_key",
        "prompt",
        "--data.label_key",
        "label",
        "--data.image_key",
        "images",
        "--data.apply_chat_template",
        # DeepSpeed
        "--ds.zero_stage",
        str(o.zero_stage),
        "--ds.param_dtype",
        o.param_dtype,
        "--ds.attn_implementation",
        o.attn_implementation,
        # checkpoints and logging
        "--ckpt.path",
        str(layout.ckpt),
        "--ckpt.output_dir",
        str(layout.model),
        "--ckpt.save_steps",
        str(o.save_steps),
        "--ckpt.save_hf",
        "--ckpt.load_enable",
        "--logger.logging_steps",
        "1",
    ]
    if cfg.kl_coef > 0:
        a += ["--algo.kl.use_loss", "--algo.kl.estimator", "k3"]
    a += filter_flags(cfg)
    if o.colocate_all:
        a += ["--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep"]
    if o.gradient_checkpointing:
        a += ["--actor.gradient_checkpointing_enable"]
    if vision:
        a += ["--data.max_images_per_prompt", str(max(1, o.max_images_per_prompt))]
        if cfg.freeze_vision:
            a += ["--actor.freeze_visual_encoder"]
    limit = max_samples if max_samples is not None else cfg.max_train_prompts
    if limit:
        a += ["--data.max_samples", str(limit)]
    if eval_data:
        a += [
            "--eval.dataset",
            eval_data,
            "--eval.steps",
            str(max(1, o.save_steps)),
            "--eval.n_samples_per_prompt",
            "1",
            "--eval.temperature",
            "0.0",
        ]
    if o.wandb_project:
        # OpenRLHF turns its W&B logger on when this flag is set; the key itself is read from WANDB_API_KEY on
        # the cluster (wandb.login is skipped when the environment already has one), never from the argv.
        a += ["--logger.wandb.key", "WANDB_API_KEY", "--logger.wandb.project", o.wandb_project]
    return a


def ray_address(cfg: GRPOConfig) -> str:
    """The job server ``ray job submit`` talks to: ``grpo.openrlhf.ray_address``, else ``$RAY_ADDRESS``, else the
    local head's default."""
    return cfg.openrlhf.ray_address or os.environ.get("RAY_ADDRESS") or "http://127.0.0.1:8265"


def runtime_env(
    cfg: GRPOConfig,
    reward_variant: str,
    layout: JobLayout,
    working_dir: str = ".",
    excludes: Sequence[str] = DEFAULT_EXCLUDES,
    reward_options: dict | None = None,
    tokenizer: str | None = None,
    reward_plugin: str | None = None,
) -> dict:
    """The job's Ray runtime env: the uploaded repository and the non-secret env vars every worker of the job gets
    (``grpo.openrlhf.env`` less :data:`DRIVER_ENV`; the reward variant and, for an extension's (``reward_plugin``,
    its module: core/plugins.py), that module in ``EMBODIED_RFT_REWARD_PLUGIN``, its options as JSON in
    ``EMBODIED_RFT_REWARD_OPTIONS`` and the policy's tokenizer, e.g. for regrpo's reflection cost; where the reward
    file appends its records, ``EMBODIED_RFT_REWARD_LOG``)."""
    env = {k: v for k, v in cfg.openrlhf.env.items() if k not in DRIVER_ENV}
    env["EMBODIED_RFT_REWARD_VARIANT"] = reward_variant
    env["EMBODIED_RFT_REWARD_LOG"] = str(layout.rewards)
    if reward_options:
        env["EMBODIED_RFT_REWARD_OPTIONS"] = json.dumps(reward_options, sort_keys=True)
    if reward_plugin:
        env["EMBODIED_RFT_REWARD_PLUGIN"] = reward_plugin
        if tokenizer:
            env["EMBODIED_RFT_TOKENIZER"] = tokenizer
    return {"working_dir": working_dir, "excludes": list(excludes), "env_vars": env}


def job_entrypoint(
    cfg: GRPOConfig, train: Sequence[str], layout: JobLayout, inputs: Mapping[str, str], submission_id: str
) -> list[str]:
    """The job's entrypoint: :mod:`.entry` (checks ``inputs`` from where the job runs, records the job, keeps the
    trainer's log) around the trainer argv ``train``; :data:`DRIVER_ENV` keys of ``grpo.openrlhf.env`` go to the
    trainer's process with ``--env``."""
    a = ["python3", "-m", ENTRY, "--job-dir", str(layout.dir), "--submission-id", submission_id]
    for name, path in inputs.items():
        a += ["--input", f"{name}={path}"]
    for k, v in cfg.openrlhf.env.items():
        if k in DRIVER_ENV:
            a += ["--env", f"{k}={v}"]
    return [*a, "--", *train]


def build_openrlhf_job(
    cfg: GRPOConfig,
    *,
    policy_path: str,
    prompt_data: str,
    layout: JobLayout,
    submission_id: str,
    inputs: Mapping[str, str] | None = None,
    reward_variant: str = "paper",
    vision: bool = False,
    working_dir: str = ".",
    eval_data: str | None = None,
    reward_file: str = REWARD_FILE,
    reward_options: dict | None = None,
    reward_plugin: str | None = None,
) -> tuple[list[str], list[str]]:
    """(the trainer argv, the ``ray job submit`` argv that runs it, wrapped in :func:`job_entrypoint`, on
    :func:`ray_address` as job ``submission_id``). ``inputs`` (name → absolute path) are what the entrypoint checks
    before training; default: the policy and the prompt data."""
    check(cfg.backend == "openrlhf", "grpo.backend", f"is {cfg.backend!r}; the OpenRLHF job needs grpo=openrlhf")
    check(
        cfg.minibatch == "rows",
        "grpo.minibatch",
        "groups is a local-engine option; OpenRLHF's replay buffer shuffles single samples (set rows)",
    )
    train = ["python3", "-m", cfg.openrlhf.trainer] + openrlhf_args(
        cfg,
        policy_path=policy_path,
        prompt_data=prompt_data,
        layout=layout,
        vision=vision,
        reward_file=reward_file,
        eval_data=eval_data,
    )
    inputs = dict(inputs) if inputs is not None else {"policy": policy_path, "prompts": prompt_data}
    env = runtime_env(
        cfg,
        reward_variant,
        layout,
        working_dir,
        reward_options=reward_options,
        tokenizer=policy_path,
        reward_plugin=reward_plugin,
    )
    submit = [
        "ray",
        "job",
        "submit",
        "--address",
        ray_address(cfg),
        "--submission-id",
        submission_id,
        "--runtime-env-json",
        json.dumps(env, sort_keys=True),
        "--",
        *job_entrypoint(cfg, train, layout, inputs, submission_id),
    ]
    return train, submit


def write_prompt_data(
    samples_path: str | Path, out_path: str | Path, image_prefix: str | None = None
) -> tuple[int, bool]:
    """Decomposed samples → OpenRLHF prompt JSONL (``prompt``, ``label``, ``images`` for image samples).

    Image paths are written as ``image_prefix/<sample image>`` (default: the samples file's folder as
    given), i.e. relative to the job's working dir. Returns (records written, whether any has an image).
    """
    samples_path = Path(samples_path)
    prefix = Path(image_prefix) if image_prefix is not None else samples_path.parent
    records: list[dict[str, Any]] = []
    any_image = False
    for lineno, rec in iter_jsonl(samples_path):
        where = f"{samples_path}:{lineno}"
        if not isinstance(rec.get("prompt"), list) or not isinstance(rec.get("label"), str):
            raise DataError(f"{where}: a decomposed sample needs 'prompt' (messages) and 'label' (JSON string)")
        out = {"prompt": rec["prompt"], "label": rec["label"], "datasource": rec.get("subset", "eb_alfred")}
        if rec.get("image"):
            out["images"] = [str(prefix / rec["image"])]
            any_image = True
        records.append(out)
    if not records:
        raise DataError(f"{samples_path}: no samples")
    write_jsonl_atomic(out_path, records)
    return len(records), any_image


__all__ = [
    "DRIVER_ENV",
    "REWARD_FILE",
    "JobLayout",
    "build_openrlhf_job",
    "check_batches",
    "filter_flags",
    "job_entrypoint",
    "openrlhf_args",
    "ray_address",
    "runtime_env",
    "write_prompt_data",
]
