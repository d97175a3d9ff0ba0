"""Seed spread: the whole pipeline once per seed, then each headline as mean ± spread.

``python -m embodied_rft.tools.seeds --seeds 0 1 2 [--ablation-no-sft] [-- OVERRIDE ...]`` runs every stage of
``dvc.yaml`` in order (``python -m stages.<name>``, the same entry points DVC calls) for each seed, with the
Hydra overrides ``seed=<s>`` and every ``paths.*`` output re-rooted under ``runs/seed-<s>/`` — so runs never
overwrite each other or the workspace's DVC outputs. A rerun skips a stage whose metrics exist and whose
parameters are unchanged: each finished stage leaves ``logs/<stage>.params.sha256``, a hash of its sections of
``params.yaml`` (the ``params:`` list of its ``dvc.yaml`` entry) and the overrides, and a stage reruns, with every
stage after it, when that hash differs — so editing ``conf/`` and running ``make seeds`` again reruns from the
first changed stage, like ``dvc repro``. The stage's code deps in ``dvc.yaml`` and the content of its data deps
(``${paths.*}``, resolved under the seed's folder) are in the hash too, so a code change, or a model another tool
rebuilt, reruns the stages that depend on it, as DVC does.
``--ablation-no-sft`` adds the paper's ablation per seed: GRPO started from the base model (``grpo.init=base``),
evaluated interactively beside the others, under the same rerun rule.

It then reads each run's ``metrics/eval.json`` (and ``metrics/grpo.json``) and writes ``metrics/seeds.json``
and ``reports/seeds.md``: per model, success on every evaluated split and subset as mean ± sample standard
deviation with min–max and the per-seed values, and whether each step of base < SFT < SFT+GRPO holds beyond
the spread (the gap between means larger than the sum of the two standard deviations). Because every model of a
seed plays the same episodes, it also pools the paired outcomes of each step (``eval.json``'s ``paired``) over the
seeds: episodes only one model solved, and the exact McNemar p-value of those counts — the test that tells a
real gap from episode noise. ``make seeds`` calls it.

Why not DVC experiments here: ``dvc exp run --queue -S seed=…`` works too (README), but each queued
experiment runs in its own temporary copy with nothing to compare side by side until all are done; this
driver keeps each seed's artifacts inspectable under ``runs/`` and the summary in one file.

Validate before work (shared by ``bon_seeds`` and ``regrpo_seeds``): before the first stage runs, a driver refuses
with one ``error: ...`` line and exit status 2 (as a stage's bad setting) a negative or repeated seed, a
``--runs-dir`` or output that is not a folder / file, a run outside the repository root, and overrides that do not
compose or build every stage's config (``params.section_configs``: the checks ``make params`` runs); an absolute
``--runs-dir`` is passed to the stages relative to the working directory (stages take relative paths only). Then it
prints its plan — per seed, the steps it would run and those already done, by the stages' own rule (metrics present,
parameter stamp unchanged; :func:`plan`) — and an estimate: each step's wall time as last recorded by a driver
(``logs/<step>.seconds`` beside its log), else the stage's own timing in its metrics details (``train_time_s``,
``elapsed_s``, ``seconds``, ``wall_s``, ``interactive_s``), from the same seed or the median over the other seeds
under ``--runs-dir``, else the workspace's own (committed) run; ``unknown`` when no finished run has one. ``--dry-run``
prints that and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from embodied_rft.core.atomic import write_json_atomic, write_text_atomic
from embodied_rft.core.digest import file_digest, folder_digests, json_digest, path_identity
from embodied_rft.core.metrics import details_path
from embodied_rft.evaluate.aggregate import mcnemar_exact

log = logging.getLogger(__name__)

STAGES = ("prepare", "decompose", "distill", "base", "sft", "grpo", "evaluate")
# (label, model key in eval.json)
MODELS = (("base", "base"), ("SFT", "sft"), ("SFT+GRPO", "grpo"))
ABLATION = ("GRPO without SFT", "grpo_no_sft")
# eval.json ``paired`` keys -> ordering names
PAIRS = {"base->sft": "base < SFT", "sft->grpo": "SFT < SFT+GRPO"}


def path_overrides(conf_paths: dict[str, str], root: Path) -> list[str]:
    """``paths.<key>=<root>/<value>`` for every configured path."""
    return [f"paths.{k}={(root / v).as_posix()}" for k, v in sorted(conf_paths.items())]


def _conf_paths(conf_file: Path = Path("conf/config.yaml")) -> dict[str, str]:
    paths = (yaml.safe_load(conf_file.read_text("utf-8")) or {}).get("paths") or {}
    if not isinstance(paths, dict) or not paths or not all(isinstance(v, str) for v in paths.values()):
        raise ValueError(f"{conf_file}: paths: expected a mapping of names to relative paths, got {paths!r}")
    return paths


def seconds_file(log_base: Path) -> Path:
    """Where a step's wall time (seconds, of its last successful run) is kept: ``<step>.seconds`` beside its
    ``<step>.log``."""
    return log_base.with_name(log_base.name + ".seconds")


def _run(cmd: list[str], log_file: Path) -> None:
    base = log_file.with_name(log_file.name.removesuffix(".log"))
    if _planner is not None:  # planning: record the step (a tool that reuses its own results), run nothing
        _planner.add(base, None, None, "tool")
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log.info("run: %s (log: %s)", " ".join(cmd), log_file)
    t0 = time.monotonic()
    with log_file.open("a", encoding="utf-8") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log_file.read_text("utf-8", errors="replace")[-2000:]
        raise RuntimeError(
            f"{' '.join(cmd[:3])} failed with exit code {proc.returncode}; last output of {log_file}:\n{tail}"
        )
    seconds_file(base).write_text(f"{time.monotonic() - t0:.1f}\n", encoding="utf-8")


def _dvc_stage(stage: str, dvc_file: Path) -> dict[str, Any]:
    """The stage's entry in ``dvc_file`` (raises ValueError naming both when it has none)."""
    dvc = yaml.safe_load(dvc_file.read_text("utf-8")) or {}
    entry = (dvc.get("stages") or {}).get(stage)
    if not isinstance(entry, dict):
        raise ValueError(f"{dvc_file}: no stage {stage!r}")
    return entry


def stage_params(
    stage: str, dvc_file: Path = Path("dvc.yaml"), params_file: Path = Path("params.yaml")
) -> dict[str, Any]:
    """The sections of ``params_file`` that ``dvc_file`` lists under the stage's ``params:`` (dotted keys walk
    into sections), as DVC tracks them."""
    entry = _dvc_stage(stage, dvc_file)
    params = yaml.safe_load(params_file.read_text("utf-8")) or {}
    out: dict[str, Any] = {}
    for key in entry.get("params") or []:
        if not isinstance(key, str):  # a {file: [keys]} entry: another params file, not used here
            raise ValueError(
                f"{dvc_file}: stage {stage!r}: params entry {key!r}: only keys of params.yaml are supported"
            )
        node: Any = params
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ValueError(f"{params_file}: stage {stage!r} tracks {key!r}, which is missing (run `make params`)")
            node = node[part]
        out[key] = node
    return out


def stage_code(stage: str, dvc_file: Path = Path("dvc.yaml")) -> dict[str, str]:
    """``{path: digest}`` of the code ``dvc_file`` lists under the stage's ``deps:`` (its files, and every file
    under its folders but ``__pycache__``), as DVC tracks them; the ``${paths.*}`` data deps are left out (an
    earlier stage that reran already forces the rerun)."""
    entry = _dvc_stage(stage, dvc_file)
    out: dict[str, str] = {}
    for dep in entry.get("deps") or []:
        if "${" in dep:
            continue
        p = Path(dep)
        if p.is_file():
            out[dep] = file_digest(p)
        elif p.is_dir():
            out.update({f"{dep}/{k}": v for k, v in folder_digests(p).items() if "__pycache__" not in k.split("/")})
        else:
            raise ValueError(f"{dvc_file}: stage {stage!r}: dep {dep!r} does not exist")
    return out


def stage_inputs(stage: str, args: list[str], dvc_file: Path = Path("dvc.yaml")) -> dict[str, Any]:
    """The identity of each ``${paths.*}`` data dep of the stage in ``dvc_file``, resolved with the ``paths.*``
    overrides in ``args`` (the last one wins, as in Hydra; else ``conf/config.yaml``'s): a model or data set that
    another tool rebuilt (``make seeds`` before ``make bon-seeds``) reruns the stages that read it. A missing one
    is recorded as missing (the stage itself then fails with its own error)."""
    entry = _dvc_stage(stage, dvc_file)
    paths = dict(_conf_paths()) if any("${paths." in d for d in entry.get("deps") or []) else {}
    for a in args:
        if a.startswith("paths.") and "=" in a:
            k, v = a[len("paths.") :].split("=", 1)
            paths[k] = v
    out: dict[str, Any] = {}
    for dep in entry.get("deps") or []:
        m = re.fullmatch(r"\$\{paths\.(\w+)\}(.*)", dep)
        if m is None:
            continue
        if m.group(1) not in paths:
            raise ValueError(f"{dvc_file}: stage {stage!r}: dep {dep!r} names no configured path")
        p = Path(paths[m.group(1)] + m.group(2))
        out[dep] = path_identity(p) if p.exists() else {"missing": p.as_posix()}
    return out


def _stamp(stage: str, args: list[str]) -> str:
    return json_digest(
        {"params": stage_params(stage), "code": stage_code(stage), "inputs": stage_inputs(stage, args), "args": args}
    )


def run_seed(seed: int, root: Path, overrides: list[str], ablation: bool) -> None:
    """Every stage for one seed under ``root``, from the first one not finished with the current parameters."""
    paths = _conf_paths()
    common = [f"seed={seed}", *path_overrides(paths, root), *overrides]
    metrics = root / paths["metrics_dir"]
    upstream_ran = False
    for stage in STAGES:
        # a stage's metrics file is its last write: present = finished (evaluate writes eval.json)
        done = metrics / f"{'eval' if stage == 'evaluate' else stage}.json"
        upstream_ran = _run_stage(seed, stage, common, done, root / "logs" / stage, upstream_ran) or upstream_ran
    if ablation:
        abl_model = (root / "models" / "grpo_no_sft").as_posix()
        abl_metrics = (root / "ablation_no_sft" / "metrics").as_posix()
        abl = [
            *common,
            f"paths.grpo_model={abl_model}",
            f"paths.metrics_dir={abl_metrics}",
            f"paths.plots_dir={(root / 'ablation_no_sft' / 'plots').as_posix()}",
            f"paths.reports_dir={(root / 'ablation_no_sft' / 'reports').as_posix()}",
            f"paths.work_dir={(root / 'ablation_no_sft' / 'work').as_posix()}",
        ]
        ran = _run_stage(
            seed,
            "grpo",
            [*abl, "grpo.init=base"],
            Path(abl_metrics, "grpo.json"),
            root / "logs" / "grpo_no_sft",
            upstream_ran,
        )
        _run_stage(
            seed,
            "evaluate",
            [*abl, "evaluate.models=[grpo]", "evaluate.reference_policies=[]"],
            Path(abl_metrics, "eval.json"),
            root / "logs" / "evaluate_no_sft",
            upstream_ran or ran,
        )


def _run_stage(seed: int, stage: str, args: list[str], done: Path, log_base: Path, force: bool) -> bool:
    """Run ``stages.<stage>`` with ``args`` unless ``done`` exists and the stage's parameter stamp
    (``<log_base>.params.sha256``) matches; ``force`` = an earlier stage reran. True when it ran."""
    stamp_file = log_base.with_name(log_base.name + ".params.sha256")
    stamp = _stamp(stage, args)
    same = stamp_file.exists() and stamp_file.read_text("utf-8").strip() == stamp
    would = not (done.exists() and same and not force)
    if _planner is not None:  # planning: the same rule, nothing run
        _planner.add(log_base, done, stage, ("rerun" if done.exists() else "run") if would else "done")
        return would
    if not would:
        return False
    if done.exists():
        log.info(
            "seed %d: %s reruns (%s)",
            seed,
            log_base.name,
            "an earlier stage reran" if force else "its parameters changed",
        )
    _run([sys.executable, "-m", f"stages.{stage}", *args], log_base.with_name(log_base.name + ".log"))
    stamp_file.parent.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp + "\n", encoding="utf-8")
    return True


# --- validate before work, then the plan and its estimate (module docstring) ---


class Refused(SystemExit):
    """A driver refused its arguments, inputs or prerequisites before running anything: exit status 2 (a stage's
    bad setting ends the same way, stages/_hydra.py); ``str()`` is the one-line message :func:`refuse` printed."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def refuse(message: str) -> NoReturn:
    """End a driver before its first stage: ``error: <message>`` as one line on stderr, exit status 2."""
    message = " ".join(message.split())  # one line, whatever the message quoted
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise Refused(message)


def check_args(args: argparse.Namespace, min_seeds: int = 1) -> dict[int, Path]:
    """The checks every seed driver makes of :func:`seed_parser`'s arguments before anything runs; ``{seed: its
    folder}``. An absolute ``--runs-dir`` is made relative to the working directory (``args.runs_dir`` too): the
    stages take relative paths only (``pipeline.Paths``)."""
    neg = [s for s in args.seeds if s < 0]
    if neg:
        refuse(f"--seeds: {' '.join(map(str, neg))}: a seed is an integer >= 0; give e.g. --seeds 0 1 2")
    twice = sorted({s for s in args.seeds if args.seeds.count(s) > 1})
    if twice:
        refuse(
            f"--seeds: {', '.join(map(str, twice))} given more than once; each seed runs once and counts once, "
            "so give distinct seeds (e.g. --seeds 0 1 2)"
        )
    if len(args.seeds) < min_seeds:
        refuse(f"--seeds: a spread needs at least {min_seeds} seeds")
    if not str(args.runs_dir).strip():
        refuse("--runs-dir: empty; give a folder, e.g. --runs-dir runs")
    runs_dir = Path(args.runs_dir)
    if runs_dir.is_absolute():
        try:
            runs_dir = Path(os.path.relpath(runs_dir))
        except ValueError:  # another drive (Windows): no relative path reaches it
            refuse(
                f"--runs-dir: {args.runs_dir} cannot be reached by a path relative to {Path.cwd()}; give a folder there"
            )
    if runs_dir.exists() and not runs_dir.is_dir():
        refuse(
            f"--runs-dir: {args.runs_dir} is a file; give a folder (each seed's artifacts go under <runs-dir>/seed-<s>/)"
        )
    for flag, out in (("--out-metrics", args.out_metrics), ("--out-report", args.out_report)):
        if Path(out).is_dir():
            refuse(f"{flag}: {out} is a folder; give the file to write")
    if not args.summary_only:
        for f in ("conf/config.yaml", "dvc.yaml", "params.yaml"):
            if not Path(f).is_file():
                refuse(f"{f}: not found under {Path.cwd()}; run the driver from the repository root")
    args.runs_dir = runs_dir.as_posix()
    return {s: runs_dir / f"seed-{s}" for s in args.seeds}


def _hydra_message(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        first += f" ({str(cause).strip().splitlines()[0]})"
    return first


def check_config(overrides: list[str]) -> dict[str, Any]:
    """Every stage's config built (``params.section_configs``, ``make params``' checks) from ``conf/`` composed with
    ``overrides`` as DVC composes it (``params.compose``): overrides that do not compose, or a bad value, are refused
    with one line before the first stage runs instead of failing the stage that reads it (after the others)."""
    from embodied_rft.config import ConfigError
    from embodied_rft.params import compose, section_configs

    try:
        cfg = compose("conf", list(overrides))
    except Exception as exc:  # noqa: BLE001 - Hydra's own errors (grammar, composition, a missing option)
        refuse(f"overrides {' '.join(overrides)}: {_hydra_message(exc)}")
    try:
        return section_configs(cfg)
    except ConfigError as exc:
        refuse(f"{exc} (overrides: {' '.join(overrides) or 'none'})")


def metrics_seconds(stage: str, record: dict[str, Any]) -> float | None:
    """A stage's own timing in its metrics record (its main loop, without start-up: a lower bound of its wall
    time); None for a stage that keeps none."""
    try:
        if stage == "sft":
            return float(record["train_time_s"])
        if stage == "verifier":
            return float(record["sft"]["train_time_s"])
        if stage == "grpo":
            return float(record["final"]["elapsed_s"])
        if stage == "distill":
            return float(record["seconds"])
        if stage == "evaluate":
            return float(sum(t.get("interactive_s", 0) + t.get("offline_s", 0) for t in record["timing"].values()))
        if stage == "bon":
            return float(sum(s["wall_s"] for s in record["selectors"].values()))
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    return None


def _under(path: Path, root: Path) -> Path | None:
    try:
        return path.relative_to(root)
    except ValueError:
        return None


def estimate_seconds(root: Path, log_base: Path, done: Path | None, stage: str | None) -> float | None:
    """A step's wall time from finished runs (module docstring): its ``.seconds`` record, else its stage's timing
    in its metrics (:func:`metrics_seconds`); the seed's own earlier run first, else the median over the other
    ``seed-*`` folders beside ``root``, else the workspace's own run (the committed default run's metrics). None
    when none has one."""
    rel_log = _under(log_base, root)
    rel_done = _under(done, root) if done is not None else None

    def one(r: Path) -> float | None:
        if rel_log is not None:
            try:
                return float(seconds_file(r / rel_log).read_text("utf-8").strip())
            except (OSError, ValueError):
                pass
        if rel_done is None or stage is None:
            return None
        f = r / rel_done
        try:
            record = json.loads((details_path(f) if details_path(f).is_file() else f).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return metrics_seconds(stage, record) if isinstance(record, dict) else None

    own = one(root)
    if own is not None:
        return own
    others = [x for r in sorted(root.parent.glob("seed-*")) if r != root and (x := one(r)) is not None]
    if others:
        return statistics.median(others)
    # no seed has run yet: the workspace's own run (the default pipeline's committed metrics), if it has the stage
    workspace = Path.cwd()
    return one(workspace) if workspace.resolve() != root.resolve() else None


@dataclass
class Step:
    """One step of a driver's plan for one seed."""

    seed: int
    # the step's log under the seed's folder, without ``logs/``: ``sft``, ``regrpo/rot/sft``, ``regrpo/rot/rot``
    name: str
    # done | run | rerun (its metrics exist but its parameters, code, inputs or an earlier step changed) | tool (a
    # command that reuses its own result when its inputs are unchanged)
    status: str
    # the estimate of its wall time (None: unknown; not estimated for a done step)
    seconds: float | None = None


@dataclass
class _Planner:
    seed: int = 0
    root: Path = Path()
    steps: list[Step] = field(default_factory=list)

    def add(self, log_base: Path, done: Path | None, stage: str | None, status: str) -> None:
        rel = _under(log_base, self.root)
        name = "/".join(p for p in rel.parts if p != "logs") if rel is not None else log_base.as_posix()
        secs = None if status == "done" else estimate_seconds(self.root, log_base, done, stage)
        self.steps.append(Step(self.seed, name, status, secs))


# set while :func:`plan` runs a driver's per-seed function: _run_stage and _run record instead of running
_planner: _Planner | None = None


def planning() -> bool:
    """True while :func:`plan` runs a driver's per-seed function: a driver's own side effects (copies) wait too."""
    return _planner is not None


def plan(runs: dict[int, Path], run_one: Callable[[int, Path], None]) -> list[Step]:
    """What ``run_one(seed, root)`` (a driver's ``run_seed``) would run for each seed, without running anything:
    each stage by :func:`_run_stage`'s own rule (metrics present and parameter stamp unchanged = done; after a step
    that runs, every stage it feeds reruns), each step with :func:`estimate_seconds`."""
    global _planner
    planner = _Planner()
    _planner = planner
    try:
        for s, root in runs.items():
            planner.seed, planner.root = s, root
            run_one(s, root)
    finally:
        _planner = None
    return planner.steps


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def render_plan(steps: list[Step], header: str) -> str:
    """The plan as text: per seed the steps to run (with their estimates) and those done, then the total."""
    lines = [f"plan: {header}"]
    est = lambda st: f"~{_duration(st.seconds)}" if st.seconds is not None else "unknown"  # noqa: E731
    for seed in dict.fromkeys(st.seed for st in steps):
        mine = [st for st in steps if st.seed == seed]
        parts = []
        todo = [st for st in mine if st.status in ("run", "rerun")]
        if todo:
            parts.append(
                "to run "
                + ", ".join(f"{st.name} ({'rerun, ' if st.status == 'rerun' else ''}{est(st)})" for st in todo)
            )
        tools = [st for st in mine if st.status == "tool"]
        if tools:
            parts.append(
                "then, each reusing its result if unchanged, " + ", ".join(f"{st.name} ({est(st)})" for st in tools)
            )
        done = [st.name for st in mine if st.status == "done"]
        if done:
            parts.append("done " + ", ".join(done))
        lines.append(f"  seed {seed}: " + "; ".join(parts or ["nothing"]))
    work = [st for st in steps if st.status != "done"]
    known = [st.seconds for st in work if st.seconds is not None]
    if not work:
        lines.append("estimate: nothing to run (every step is done)")
    elif not known:
        lines.append(f"estimate: unknown ({len(work)} steps to run, none timed in a finished run yet)")
    else:
        unknown = len(work) - len(known)
        lines.append(
            f"estimate: ~{_duration(sum(known))} for {len(known)} of the {len(work)} steps to run"
            + (f", plus {unknown} of unknown duration" if unknown else "")
            + " (wall times recorded by earlier runs, else the stages' own timings in their metrics)"
        )
    return "\n".join(lines)


def announce(runs: dict[int, Path], run_one: Callable[[int, Path], None], header: str, dry_run: bool) -> bool:
    """Print the plan of ``run_one`` over ``runs`` and its estimate before anything runs (a plan that cannot be made
    — a missing dep, a missing prerequisite — is refused with one line); False for ``--dry-run``: run nothing."""
    try:
        steps = plan(runs, run_one)
    except ValueError as exc:
        refuse(str(exc))
    print(render_plan(steps, header), flush=True)
    return not dry_run


def _mean_sd(values: list[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return m, sd


def _record(metrics_file: Path) -> dict:
    """A stage's complete record: ``<name>.details.json`` beside its headline metrics file when there is one
    (metrics written before the split held everything themselves)."""
    details = details_path(metrics_file)
    return json.loads((details if details.exists() else metrics_file).read_text("utf-8"))


def _interactive(eval_json: dict, model: str) -> dict[str, float]:
    """``{"overall": rate, "<subset>": rate, ...}`` (percent, as eval.json) for one model of one eval.json."""
    inter = ((eval_json.get("models") or {}).get(model) or {}).get("interactive")
    if not inter:
        return {}
    out = {"overall": float(inter["overall"]["success_rate"])}
    out.update({k: float(v["success_rate"]) for k, v in (inter.get("per_subset") or {}).items()})
    return out


def summarise(runs: dict[int, Path], ablation: bool) -> dict[str, Any]:
    """Per model and subset: per-seed success, mean, standard deviation, min, max; plus the ordering checks."""
    per_model: dict[str, dict[str, list[float]]] = {}
    offline: dict[str, list[float]] = {}
    pairs: dict[str, list[dict]] = {}
    held_pairs: list[dict] = []  # grpo.json heldout.paired per seed (prompt-by-prompt, SFT vs GRPO)
    for _seed, root in sorted(runs.items()):
        ev = _record(root / "metrics" / "eval.json")
        for key, name in PAIRS.items():
            c = (ev.get("paired") or {}).get(key)
            if c is not None:
                pairs.setdefault(name, []).append(c)
        for label, key in MODELS:
            for name, v in _interactive(ev, key).items():
                per_model.setdefault(label, {}).setdefault(name, []).append(v)
        if ablation:
            abl_file = root / "ablation_no_sft" / "metrics" / "eval.json"
            if abl_file.exists():
                for name, v in _interactive(_record(abl_file), "grpo").items():
                    per_model.setdefault(ABLATION[0], {}).setdefault(name, []).append(v)
        grpo_file = root / "metrics" / "grpo.json"
        if grpo_file.exists():
            held = _record(grpo_file).get("heldout") or {}
            for when in ("before", "after"):
                for k in ("reward_mean", "exact_plan_rate"):
                    v = (held.get(when) or {}).get(k)
                    if v is not None:
                        offline.setdefault(f"grpo heldout {k} {when}", []).append(float(v))
            if held.get("paired"):
                held_pairs.append(held["paired"])
    stats: dict[str, Any] = {}
    for label, subsets in per_model.items():
        stats[label] = {}
        for name, vals in subsets.items():
            m, sd = _mean_sd(vals)
            stats[label][name] = {"mean": m, "sd": sd, "min": min(vals), "max": max(vals), "values": vals}
    checks = {}
    order = [label for label, _ in MODELS]
    for lo, hi in zip(order, order[1:], strict=False):
        a, b = stats.get(lo, {}).get("overall"), stats.get(hi, {}).get("overall")
        if a and b:
            checks[f"{lo} < {hi}"] = {
                "gap": b["mean"] - a["mean"],
                "spread": a["sd"] + b["sd"],
                "beyond_spread": (b["mean"] - a["mean"]) > (a["sd"] + b["sd"]),
                "every_seed": all(y > x for x, y in zip(a["values"], b["values"], strict=True)),
            }
    paired_stats = {}
    for name, cs in pairs.items():
        if len(cs) != len(runs):  # an eval.json from before paired outcomes were recorded: no pooled test
            continue
        gaps = [float(c["gap"]) for c in cs]
        m, sd = _mean_sd(gaps)
        only_a, only_b = sum(c["only_a"] for c in cs), sum(c["only_b"] for c in cs)
        paired_stats[name] = {
            "gap_per_seed": gaps,
            "gap_mean": m,
            "gap_sd": sd,
            "episodes": sum(c["episodes"] for c in cs),
            "only_a": only_a,
            "only_b": only_b,
            "p_mcnemar": mcnemar_exact(only_a, only_b),
        }
    off = {k: dict(zip(("mean", "sd"), _mean_sd(v), strict=True), values=v) for k, v in offline.items()}
    held_pooled = _pool_heldout(held_pairs) if 0 < len(held_pairs) == len(runs) else None
    return {
        "seeds": sorted(runs),
        "success": stats,
        "ordering": checks,
        "paired": paired_stats,
        "grpo_heldout": off,
        "grpo_heldout_paired": held_pooled,
        "proxy": True,
    }


def _pool_heldout(per_seed: list[dict]) -> dict[str, Any]:
    """GRPO's held-out prompt-by-prompt comparisons (``grpo.json`` ``heldout.paired``) pooled over seeds:
    prompts whose reward went up / down, exact sign test; prompts solved exactly only before / only after,
    exact McNemar test; each seed's mean reward difference."""
    up = sum(p["reward"]["up"] for p in per_seed)
    down = sum(p["reward"]["down"] for p in per_seed)
    ob = sum(p["accuracy_full"]["only_a"] for p in per_seed)
    oa = sum(p["accuracy_full"]["only_b"] for p in per_seed)
    return {
        "prompts": sum(p["n"] for p in per_seed),
        "reward_mean_diff_per_seed": [p["reward"]["mean_diff"] for p in per_seed],
        "reward_up": up,
        "reward_down": down,
        "reward_p_sign": mcnemar_exact(down, up),
        "accuracy_full_only_before": ob,
        "accuracy_full_only_after": oa,
        "accuracy_full_p_mcnemar": mcnemar_exact(ob, oa),
    }


def render(summary: dict[str, Any]) -> str:
    """The summary as Markdown: one row per model, columns overall + subsets (mean ± sd, min-max)."""
    stats = summary["success"]
    cols = ["overall"] + sorted({k for s in stats.values() for k in s} - {"overall"})
    # eval.json's success_rate is already in percent
    pct = lambda d: f"{d['mean']:.1f} ± {d['sd']:.1f}"  # noqa: E731
    lines = [
        f"Interactive success (%) on the simulator's valid_unseen episodes (proxy for EB-ALFRED), "
        f"mean ± sample s.d. over seeds {summary['seeds']}:",
        "",
        "| model | " + " | ".join(cols) + " | per seed (overall) |",
        "|---|" + "---|" * len(cols) + "---|",
    ]
    for label, s in stats.items():
        cells = [pct(s[c]) if c in s else "-" for c in cols]
        per_seed = ", ".join(f"{v:.1f}" for v in s["overall"]["values"])
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {per_seed} |")
    lines += [
        "",
        "| ordering | gap of means (pts) | sum of s.d. (pts) | beyond spread | every seed |",
        "|---|---|---|---|---|",
    ]
    for name, c in summary["ordering"].items():
        lines.append(
            f"| {name} | {c['gap']:+.1f} | {c['spread']:.1f} | {'yes' if c['beyond_spread'] else 'no'} "
            f"| {'yes' if c['every_seed'] else 'no'} |"
        )
    if summary.get("paired"):
        lines += [
            "",
            "Paired over seeds (every model of a seed plays the same episodes): the gap per seed, and the episodes "
            "only one of the two models solved, pooled over the seeds, with the exact two-sided McNemar p-value.",
            "",
            "| ordering | paired gap per seed (pts) | mean ± s.d. | solved by the first alone | by the second alone "
            "| episode pairs | McNemar p |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, c in summary["paired"].items():
            lines.append(
                f"| {name} | {', '.join(f'{g:+.1f}' for g in c['gap_per_seed'])} | {c['gap_mean']:+.1f} ± {c['gap_sd']:.1f} "
                f"| {c['only_a']} | {c['only_b']} | {c['episodes']} | {c['p_mcnemar']:.3g} |"
            )
    if summary["grpo_heldout"]:
        lines += ["", "| GRPO held-out (greedy, decomposed val prompts) | mean ± s.d. | per seed |", "|---|---|---|"]
        for k, v in sorted(summary["grpo_heldout"].items()):
            lines.append(f"| {k} | {v['mean']:.3f} ± {v['sd']:.3f} | {', '.join(f'{x:.3f}' for x in v['values'])} |")
    hp = summary.get("grpo_heldout_paired")
    if hp:
        lines += [
            "",
            f"GRPO held-out, prompt by prompt, pooled over the seeds ({hp['prompts']} prompt pairs): reward higher after "
            f"GRPO on {hp['reward_up']}, lower on {hp['reward_down']} (sign test p = {hp['reward_p_sign']:.3g}); "
            f"solved exactly only before {hp['accuracy_full_only_before']}, only after {hp['accuracy_full_only_after']} "
            f"(McNemar p = {hp['accuracy_full_p_mcnemar']:.3g}); mean reward change per seed "
            + ", ".join(f"{x:+.3f}" for x in hp["reward_mean_diff_per_seed"])
            + ".",
        ]
    return "\n".join(lines) + "\n"


def seed_parser(doc: str | None, name: str) -> argparse.ArgumentParser:
    """The arguments every seed driver takes (this one, ``bon_seeds``, ``regrpo_seeds``): ``--seeds``,
    ``--runs-dir``, ``--summary-only``, ``--out-metrics metrics/<name>.json``, ``--out-report reports/<name>.md`` and
    the Hydra overrides for every stage; a driver adds its own."""
    ap = argparse.ArgumentParser(description=(doc or name).splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--runs-dir", default="runs", help="each seed's artifacts go under <runs-dir>/seed-<s>/")
    ap.add_argument("--summary-only", action="store_true", help="summarise the finished runs, run nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its time estimate, run nothing")
    ap.add_argument("--out-metrics", default=f"metrics/{name}.json")
    ap.add_argument("--out-report", default=f"reports/{name}.md")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides for every stage (after --)")
    return ap


def publish(summary: dict[str, Any], text: str, out_metrics: str | Path, out_report: str | Path) -> None:
    """A seed driver's summary to its metrics file and its rendering to its report (both atomically), and the
    rendering to stdout."""
    write_json_atomic(Path(out_metrics), summary)
    write_text_atomic(Path(out_report), text)
    print(text)


def main(argv: list[str] | None = None) -> int:
    ap = seed_parser(__doc__, "seeds")
    ap.add_argument("--ablation-no-sft", action="store_true", help="also run GRPO from the base model per seed")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    runs = check_args(args, min_seeds=2)
    if not args.summary_only:
        overrides = list(args.overrides)
        check_config(overrides)
        run_one = lambda s, root: run_seed(s, root, overrides, args.ablation_no_sft)  # noqa: E731
        what = f"{len(STAGES)} stages{' and the no-SFT ablation' if args.ablation_no_sft else ''}"
        if not announce(runs, run_one, f"seeds {list(runs)} under {args.runs_dir}/, {what} each", args.dry_run):
            return 0
        for s, root in runs.items():
            run_one(s, root)
    missing = [str(r / "metrics" / "eval.json") for r in runs.values() if not (r / "metrics" / "eval.json").exists()]
    if missing:
        raise SystemExit(f"no evaluation results for: {', '.join(missing)} (run without --summary-only first)")
    summary = summarise(runs, args.ablation_no_sft)
    publish(summary, render(summary), args.out_metrics, args.out_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
