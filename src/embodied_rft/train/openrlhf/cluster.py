"""The ``grpo`` stage on a Ray cluster (``grpo.backend=openrlhf``): OpenRLHF as a Ray job, and what it brings back.

Inputs: the ``grpo`` and ``reward`` sections, the initial policy, the decomposed samples (and the on-policy states,
when ``grpo.onpolicy`` collected some), the pipeline's paths. Outputs, written only after the job succeeded and its
results were read: ``paths.grpo_model``, ``metrics/grpo.json`` (+ ``grpo.details.json``) and ``plots/grpo.csv``. In
order:

1. **plan** (:func:`plan_job`): the job's folder is ``<shared root>/<paths.work_dir>/openrlhf/<key>``, the key a digest
   of the job's inputs (config, reward, policy, train samples, states). The shared root is
   ``grpo.openrlhf.shared_root``, or the workspace when empty. Every path handed to the job is absolute, and each
   input it reads (the policy, the image folder of a vision run) must be under the shared root. An input elsewhere
   is copied into the job's folder (``grpo.openrlhf.copy_inputs``) or refused before anything is submitted, with a
   ConfigError naming ``grpo.openrlhf.shared_root``. Ray uploads the repository as the job's working dir, but without
   ``models/``, ``.cache/`` and git-ignored (DVC) files, so a relative path would not be found.
2. **prepare**: the prompts go into the job's folder with absolute image paths. A previous attempt's model, reward
   records, record and log are cleared. Its DeepSpeed checkpoint is kept, so a resubmitted job resumes.
3. **submit**: the stage runs its own ``ray job submit`` command, which streams the job's log. The job's status then
   comes from Ray's job server. A failed job raises StageFailed, naming the job and its last error line (the
   entrypoint's, when an input was not visible from the cluster); the stage's outputs are not touched. An
   interrupted stage stops its job.
4. **collect**: from the job's record (:mod:`.entry`: host, OpenRLHF's version, the trainer), OpenRLHF's per-step log
   lines and our reward file's records, regrouped per rollout batch (:mod:`.logs`).
5. **check**: the local engine's greedy held-out check (``heldout.evaluate_checkpoint``, the same prompts and reward) on
   the initial policy and on the job's model, compared prompt by prompt.
6. **write**: the model goes into ``paths.grpo_model`` (moved on one filesystem, else copied, atomically either
   way), then the metrics and plot rows. ``metrics/grpo.json`` names the backend, the job's submission id, the
   trainer module and OpenRLHF's version, so no number is credited to the wrong engine.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rft.config import ConfigError, StageFailed, as_dict
from embodied_rft.core import plugins
from embodied_rft.core.atomic import atomic_directory, replace_directory, write_jsonl_atomic
from embodied_rft.core.digest import path_identity
from embodied_rft.core.integrity import seal_folder
from embodied_rft.core.metrics import write_metrics
from embodied_rft.core.subset import seeded_subset
from embodied_rft.data.jsonl import iter_jsonl
from embodied_rft.filtering import openrlhf_keep
from embodied_rft.models import integrity
from embodied_rft.reward import BoundReward, RewardConfig
from embodied_rft.schema import read_samples
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.grpo.driver import run_key
from embodied_rft.train.grpo.heldout import evaluate_checkpoint, heldout_block
from embodied_rft.train.grpo.log import RunTracker
from embodied_rft.train.openrlhf import logs
from embodied_rft.train.openrlhf.job import (
    DEFAULT_EXCLUDES,
    JobLayout,
    build_openrlhf_job,
    ray_address,
    write_prompt_data,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobPlan:
    """Everything the stage submits: the job's folder, what the job reads (name → absolute path), which of those
    the stage copies there first (name → the workspace path), the image prefix of the prompts, the job server, the
    submission id and both argvs."""

    layout: JobLayout
    inputs: dict[str, Path]
    copies: dict[str, Path]
    image_prefix: str | None
    address: str
    submission_id: str
    train: list[str]
    submit: list[str]

    def job_identity(self) -> dict[str, str]:
        """Where the job ran, for its metrics: the job server and the job's folder."""
        return {"address": self.address, "folder": str(self.layout.dir)}


def _identity(path: Path) -> Any:
    return path_identity(path) if path.exists() else {"missing": str(path)}


def _not_shared(name: str, key: str, path: Path, full: Path, root: Path, workspace: Path) -> str:
    try:
        first = full.relative_to(workspace).parts[0]
    except (ValueError, IndexError):
        first = ""
    if first and any(Path(first).match(x) for x in DEFAULT_EXCLUDES):
        why = f"and {first}/ is not uploaded with the job (Ray's working dir excludes it)"
    else:
        why = "and the job reads its inputs by absolute path on the shared root only (Ray does not upload git-ignored files)"
    return (
        f"grpo.openrlhf.shared_root: the job's {name} ({key} = {path}, {full}) is not under the shared root {root}, "
        f"{why}. Put the workspace on the shared filesystem and leave shared_root empty, set shared_root to a folder "
        f"every Ray node mounts that holds it, or set grpo.openrlhf.copy_inputs=true to copy it there"
    )


def resolve_inputs(
    gcfg: GRPOConfig,
    policy_dir: str | Path,
    policy_key: str,
    image_root: str | Path | None,
    workspace: Path,
) -> tuple[Path, dict[str, Path], dict[str, Path]]:
    """(the shared root, the inputs under it, the inputs to copy there): each as name → absolute path. Raises
    ConfigError, naming ``grpo.openrlhf.shared_root``, for an input outside it without ``copy_inputs``."""
    o = gcfg.openrlhf
    root = Path(o.shared_root) if o.shared_root else workspace
    wanted = {"policy": (Path(policy_dir), policy_key)}
    if image_root is not None:
        wanted["images"] = (Path(image_root), "paths.decomposed_dir")
    shared: dict[str, Path] = {}
    copied: dict[str, Path] = {}
    for name, (path, path_key) in wanted.items():
        full = (workspace / path).absolute()
        if full.resolve().is_relative_to(root.resolve()):
            shared[name] = full
        elif o.copy_inputs:
            copied[name] = full
        else:
            raise ConfigError(_not_shared(name, path_key, path, full, root, workspace))
    return root, shared, copied


def plan_job(
    gcfg: GRPOConfig,
    reward: RewardConfig,
    *,
    policy_dir: str | Path,
    policy_key: str,
    train_path: str | Path,
    image_root: str | Path | None,
    work_dir: str,
    states: list[dict] | None = None,
    workspace: str | Path | None = None,
) -> JobPlan:
    """Step 1 of the module docstring. ``policy_key`` is the path key the policy came from (``paths.sft_model``);
    ``image_root`` the folder the samples' image paths are relative to, None for a text model; ``states`` the
    on-policy states mixed into the prompts. The folder's key is the local engine's :func:`~..grpo.driver.run_key`.
    Raises ConfigError for an input the job could not see."""
    ws = Path(workspace or os.getcwd()).absolute()
    root, shared, copied = resolve_inputs(gcfg, policy_dir, policy_key, image_root, ws)
    key = run_key(gcfg, reward, _identity(ws / policy_dir), _identity(ws / train_path), states)
    layout = JobLayout.under(root, work_dir, key)
    inputs = {**shared, **{name: layout.inputs / name for name in copied}, "prompts": layout.prompts}
    sid = f"embodied-rft-grpo-{key}-{time.strftime('%Y%m%dT%H%M%S')}"
    train, submit = build_openrlhf_job(
        gcfg,
        policy_path=str(inputs["policy"]),
        prompt_data=str(layout.prompts),
        layout=layout,
        submission_id=sid,
        inputs={k: str(v) for k, v in inputs.items()},
        reward_variant=reward.variant,
        vision=image_root is not None,
        reward_options=reward.openrlhf_options(),
        reward_plugin=plugins.module_for(reward.variant),
    )
    prefix = str(inputs["images"]) if image_root is not None else None
    return JobPlan(layout, inputs, copied, prefix, ray_address(gcfg), sid, train, submit)


def write_job_prompts(
    train: Path, states: tuple[list[dict], dict] | None, gcfg: GRPOConfig, out: Path, image_prefix: str | None
) -> Path:
    """OpenRLHF's prompt file ``out``: the decomposed train samples (only the recovery ones with
    ``grpo.decomposed_prompts: recovery``), mixed with the on-policy states (``grpo.onpolicy.fraction``) when there
    are any; image paths under ``image_prefix`` (absolute on the shared root)."""
    from embodied_rft.train.grpo.driver import select_decomposed
    from embodied_rft.train.grpo.onpolicy import mix_prompts

    prefix = image_prefix if image_prefix is not None else str(train.parent)
    if states is None and gcfg.decomposed_prompts == "all":
        write_prompt_data(train, out, image_prefix=prefix)
        return out
    mixed = out.with_name("samples.jsonl")
    decomposed = select_decomposed([rec for _, rec in iter_jsonl(train)], gcfg.decomposed_prompts, str(train))
    write_jsonl_atomic(
        mixed, mix_prompts(decomposed, states[0], gcfg.onpolicy.fraction, gcfg.seed) if states else decomposed
    )
    write_prompt_data(mixed, out, image_prefix=prefix)
    return out


def prepare_job(plan: JobPlan) -> None:
    """Step 2 without the prompts: the job's folder made, a previous attempt's outputs cleared (its checkpoint
    kept), the inputs that are not on the shared root copied into it (once per job key)."""
    lay = plan.layout
    lay.dir.mkdir(parents=True, exist_ok=True)
    for stale in (lay.model, lay.rewards):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in (lay.record, lay.log):
        stale.unlink(missing_ok=True)
    for name, src in plan.copies.items():
        dest = plan.inputs[name]
        if dest.is_dir():  # copied whole by an earlier attempt (atomic_directory); the key covers the source
            continue
        log.info("copying the job's %s %s to %s (grpo.openrlhf.copy_inputs)", name, src, dest)
        with atomic_directory(dest) as tmp:
            shutil.copytree(src, tmp, dirs_exist_ok=True, symlinks=False)


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    return (errors or lines or ["(no log)"])[-1]


def job_outcome(address: str, submission_id: str) -> tuple[str, str]:
    """(the job's status as Ray's job server has it, its last error line); ("UNREACHABLE", why) when the server
    cannot be asked."""
    try:
        from ray.job_submission import JobSubmissionClient

        client = JobSubmissionClient(address)
        status = client.get_job_status(submission_id)
        text = client.get_job_logs(submission_id)
    except Exception as e:  # noqa: BLE001 - any failure to ask is reported as such, with the address
        return "UNREACHABLE", f"cannot ask the Ray job server at {address} ({type(e).__name__}: {e})"
    return str(getattr(status, "value", status)), _last_error(text)


def _stop(address: str, submission_id: str) -> None:
    try:
        from ray.job_submission import JobSubmissionClient

        JobSubmissionClient(address).stop_job(submission_id)
        log.warning("stopped the OpenRLHF job %s", submission_id)
    except Exception:  # noqa: BLE001
        log.warning("could not stop the OpenRLHF job %s; stop it with `ray job stop %s`", submission_id, submission_id)


def submit_and_wait(plan: JobPlan, untouched: Sequence[str | Path]) -> float:
    """Step 3: run the submit command (the job's log streams through it) and ask Ray how the job ended; returns
    the job's wall seconds. Raises StageFailed unless it SUCCEEDED; ``untouched`` are the outputs the message
    promises are unchanged."""
    log.info("submitting OpenRLHF job %s to %s; its folder: %s", plan.submission_id, plan.address, plan.layout.dir)
    t0 = time.time()
    # the `ray` of the stage's own environment (a venv not on PATH under DVC or pytest), else PATH's
    own = Path(sys.executable).parent / "ray"
    argv = [str(own), *plan.submit[1:]] if plan.submit[0] == "ray" and own.is_file() else plan.submit
    try:
        rc = subprocess.run(argv, check=False).returncode
    except FileNotFoundError:
        raise StageFailed("grpo: `ray` is not on PATH; install ray[default] (the cluster's Ray version)") from None
    except KeyboardInterrupt:
        _stop(plan.address, plan.submission_id)
        raise
    status, last = job_outcome(plan.address, plan.submission_id)
    if rc != 0 or status != "SUCCEEDED":
        kept = ", ".join(str(u) for u in untouched)
        raise StageFailed(
            f"grpo: the OpenRLHF job {plan.submission_id} ended {status} (ray job submit exit status {rc}): {last}; "
            f"{kept} are unchanged (job folder: {plan.layout.dir}; `ray job logs {plan.submission_id}`)"
        )
    return time.time() - t0


def collect(plan: JobPlan, gcfg: GRPOConfig) -> dict[str, Any]:
    """Step 4: the job's record, OpenRLHF's per-step rows, the reward records' rollout batches and their summary.
    Raises StageFailed when the job says it succeeded but left no record or no model."""
    lay = plan.layout
    if not lay.record.is_file():
        raise StageFailed(f"grpo: job {plan.submission_id} succeeded but left no record {lay.record}")
    record = json.loads(lay.record.read_text(encoding="utf-8"))
    if record.get("returncode") != 0 or record.get("submission_id") != plan.submission_id:
        raise StageFailed(f"grpo: {lay.record} is not this job's successful record: {record}")
    try:
        integrity.check_checkpoint(lay.model)
    except integrity.DamagedCheckpointError as e:
        raise StageFailed(f"grpo: job {plan.submission_id} left no loadable checkpoint in {lay.model}: {e}") from None
    steps = logs.read_steps(lay.log) if lay.log.is_file() else []
    records = logs.read_reward_records(lay.rewards) if lay.rewards.is_dir() else []
    keep = None
    if gcfg.filter.enabled:
        lo, hi = gcfg.filter.openrlhf_range(gcfg.group_size)
        keep = lambda scores: openrlhf_keep(scores, lo, hi)  # noqa: E731
    batches, summary = logs.rollout_batches(records, gcfg.group_size, gcfg.filter.buffer_size, keep)
    return {"record": record, "steps": steps, "batches": batches, "rewards": summary}


def install_model(src: Path, target: Path) -> None:
    """Move the job's model folder onto ``target`` (one filesystem), else copy it there; atomic either way. The
    folder is sealed (``checksums.sha256``) as it is taken over, so later damage is found on load."""
    seal_folder(src)
    try:
        replace_directory(src, target)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        with atomic_directory(target) as tmp:
            shutil.copytree(src, tmp, dirs_exist_ok=True)


class OpenRLHFStage:
    """The ``grpo`` stage with ``grpo.backend=openrlhf`` (module docstring). Built before any work (the on-policy
    play included): it reads and checks the samples and refuses inputs the job could not see; :meth:`run` does the
    rest and returns the metrics written."""

    def __init__(self, gcfg: GRPOConfig, reward: RewardConfig, paths: Any, policy_key: str) -> None:
        self.gcfg, self.reward, self.paths, self.policy_key = gcfg, reward, paths, policy_key
        self.policy_dir = getattr(paths, policy_key.split(".", 1)[1])
        self.train = Path(paths.decomposed_dir) / "train.jsonl"
        self.val_path = Path(paths.decomposed_dir) / "val.jsonl"
        train_samples = read_samples(self.train, what="train")  # a bad sample fails here, not in the job
        self.image_root = self.train.parent if any(s.get("image") for s in train_samples) else None
        self.val = (
            seeded_subset(read_samples(self.val_path, what="val"), gcfg.eval_max_samples, gcfg.seed)
            if gcfg.eval_max_samples
            else []
        )
        resolve_inputs(gcfg, self.policy_dir, policy_key, self.image_root, Path.cwd().absolute())

    def prepare(self, states: tuple[list[dict], dict] | None) -> JobPlan:
        """Steps 1-2: the job's plan, its folder made ready, the prompts written there."""
        plan = plan_job(
            self.gcfg,
            self.reward,
            policy_dir=self.policy_dir,
            policy_key=self.policy_key,
            train_path=self.train,
            image_root=self.image_root,
            work_dir=self.paths.work_dir,
            states=states[0] if states is not None else None,
        )
        prepare_job(plan)
        write_job_prompts(self.train, states, self.gcfg, plan.layout.prompts, plan.image_prefix)
        return plan

    def run(self, states: tuple[list[dict], dict] | None) -> dict[str, Any]:
        gcfg, reward, paths = self.gcfg, self.reward, self.paths
        t0 = time.time()
        plan = self.prepare(states)
        outputs = (paths.grpo_model, paths.metrics("grpo"), paths.plot("grpo.csv"))
        wall = submit_and_wait(plan, outputs)
        got = collect(plan, gcfg)
        if not got["steps"]:
            log.warning("the job logged no training step (no `Global step` line in %s)", plan.layout.log)
        root = self.val_path.parent

        def scorer(count_tokens):  # as the local engine binds it: the checkpoint's own token counter
            return BoundReward(reward, count_tokens)

        before = evaluate_checkpoint(self.policy_dir, self.val, gcfg, scorer, root) if self.val else None
        after = evaluate_checkpoint(plan.layout.model, self.val, gcfg, scorer, root) if self.val else None
        metrics = logs.job_metrics(
            plan.job_identity(), gcfg, got, heldout_block(before, after, gcfg.seed), wall, time.time() - t0
        )
        if states is not None:
            metrics["onpolicy"] = {**states[1], "fraction": gcfg.onpolicy.fraction}
        install_model(plan.layout.model, Path(paths.grpo_model))
        write_metrics(paths.metrics("grpo"), metrics, logs.OPENRLHF_HEADLINE)
        tracker = RunTracker(gcfg.report_to, gcfg.wandb_mode, gcfg.wandb_project, plan.layout.dir, as_dict(gcfg), [])
        for row in metrics["history"]:
            tracker.log(row)
        tracker.write_plots(paths.plot("grpo.csv"))
        tracker.summary({k: v for k, v in metrics["final"].items() if isinstance(v, (int, float))})
        tracker.close()
        log.info(
            "OpenRLHF job %s: %d steps, filter pass rate %s; model in %s",
            plan.submission_id,
            metrics["steps"],
            metrics["filter"]["pass_rate"],
            paths.grpo_model,
        )
        return metrics


__all__ = [
    "JobPlan",
    "collect",
    "install_model",
    "job_outcome",
    "plan_job",
    "prepare_job",
    "OpenRLHFStage",
    "resolve_inputs",
    "submit_and_wait",
    "write_job_prompts",
]
