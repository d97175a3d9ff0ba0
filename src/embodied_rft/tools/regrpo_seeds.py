"""ReGRPO over seeds: the cold-start SFT arms and the RL arms once per seed, then the paired comparison table
(docs/regrpo.md §7).

``python -m embodied_rft.tools.regrpo_seeds --seeds 0 1 2 [--arms ...] [--modes free regrpo] [--subdir regrpo]
[--summary-only] [-- OVERRIDE ...]`` (``make regrpo-seeds``) runs, per seed under ``runs/seed-<s>/`` (the layout of
``make seeds``: ``seed=<s>`` and every ``paths.*`` re-rooted, so its ``prepare`` is reused), the stages each arm needs
through the same entry points DVC calls (``python -m stages.<name>``):

- ``prepare`` (shared with ``make seeds``), then ``decompose`` with the RoT engine into ``<subdir>/decomposed``; with
  ``--onpolicy-from <policy folder under the seed's root>`` that policy first plays ``--onpolicy-episodes`` training
  episodes (``regrpo/collect.py``) and its own failures join every arm's samples (``decompose.rot.onpolicy_states``);
- the SFT arms, each ``distill`` -> ``base`` -> ``sft`` on the same samples and the same budget, differing only in the
  reasoning of the RoT samples: ``plain`` (the plain replanning reasoning), ``rot`` (the triple), ``shuffled``
  (each triple swapped with a length-matched one of another sample: the control); not by default: ``bare`` (no
  reflection at all: the reasoning of a step after a successful action), ``plain_x2``,
  ``rot_x2``, ``shuffled_x2``, a second ``sft`` cycle of the same budget from the arm's own model on its own samples;
- the GRPO arms from the ``rot`` SFT policy, same prompts (on-policy failure states + RoT states) and budget:
  ``paper`` (the paper's reward), ``regrpo`` (η = 0.1, success executed from the prompt's state), ``regrpo_eta0``
  (η = 0); not by default: ``regrpo_offline`` (success = the gold remaining plan), ``regrpo_anchored``, and
  ``paper_steps`` / ``regrpo_steps`` / ``regrpo_steps_eta0`` (the clean decomposed steps added to the prompts) and
  ``regrpo_steps_kept`` (regrpo_steps keeping the all-success groups); and from ``rot_x2`` (run first when missing),
  ``regrpo_steps_kept_x2`` / ``regrpo_steps_eta0_x2``: the kept arm and its η = 0 arm;
- the held-out per-step reflection of the ``rot`` arm, each GRPO arm and the SFT model it starts from
  (``regrpo/steps.py``) on the decomposed samples of valid_unseen (decompose's val file) and of valid_seen (a second
  ``decompose`` into ``decomposed-valid_seen``): the calls the η check reads;
- each SFT arm's greedy answers to the RoT engine's near-misses on valid_unseen's episodes (``regrpo/steps.py
  --rot-episodes``): failures the policy did not make itself, how often it repeats them;
- ``evaluate`` of each arm's model in each mode of ``--modes`` (``evaluate.reflection``).

A stage is skipped when its metrics exist with unchanged parameters (``tools/seeds.py``'s stamps), and every stage
resumes on its own (SFT and GRPO checkpoints, the evaluation's result store), so an interrupted run picks up where
it stopped. Then it reads every evaluation and writes ``metrics/regrpo.json`` and ``reports/regrpo.md``
(:mod:`embodied_rft.regrpo.report`); ``--merge <published table>`` pools these seeds with the seeds of a table this
tool published earlier with the same recipe (seeds run in another session or on another machine, whose runs are not
here: every pooled figure is a sum of counts the table keeps). A table published beside ``metrics/regrpo.json``
refreshes that table's clause index (``tools/regrpo_clauses.py``). Recipe overrides are :data:`RECIPE` and :data:`ARMS` below; anything after
``--`` is added to every stage (``-- evaluate.splits=[valid_seen] --subdir regrpo-valid_seen`` chooses on valid_seen).

Before the first stage it checks its arguments (``tools/seeds.py``: seeds, ``--runs-dir``, every stage's config with the
recipe and the overrides; arms and modes named once; ``--onpolicy-episodes`` >= 1) and every ``--merge`` table:
readable, a table of this tool, of this run's recipe, with seeds disjoint from ``--seeds`` and from the other tables'
— a table that cannot be pooled is refused before any seed runs, not after all of them. It then prints its plan (per
seed, the stages to run and those done; an ``--onpolicy-from`` policy missing for a seed is refused there) and a time
estimate.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

from embodied_rft.regrpo.report import (
    CONTINUED_ARMS,
    GRPO_ARMS,
    HELDOUT_ROT,
    RL_STARTS,
    SFT_ARMS,
    STEP_SPLITS,
    merge,
    read_table,
    render,
    summarise,
)
from embodied_rft.tools.regrpo_clauses import refresh
from embodied_rft.tools.seeds import (
    _conf_paths,
    _run,
    _run_stage,
    announce,
    check_args,
    check_config,
    path_overrides,
    planning,
    publish,
    refuse,
    seed_parser,
)

log = logging.getLogger(__name__)

# the ReGRPO data recipe shared by every arm: RoT recovery samples (two per trajectory) at the cold start's 1:1 mix
RECIPE = ["decompose.rot.enabled=true", "decompose.recovery_per_episode=2", "teacher.rot.clean_ratio=0.5"]
# the RL arms' shared recipe: prompts from the RoT-SFT policy's on-policy failure states plus the RoT states, and the
# algorithm's KL to the frozen reference (β = 0.04, the released RL config's value and DeepSeekMath's; paper: none).
# In the 12-03 rounds (offline success, the worlds before the planner fix) it turned seed 0's recovery gap of ReGRPO
# over the paper reward from -3.1 to +14.3 points (over seeds 0-2: -0.6); it does not stop the drift off the clean
# held-out plans (docs/regrpo.md §8)
RL_STATES = ["grpo.onpolicy.failed_only=true", "grpo.kl_coef=0.04"]
RL = [*RL_STATES, "grpo.decomposed_prompts=recovery"]
# the `*_steps` arms' prompts: the same, plus the decomposed clean steps (each trajectory's first step and the steps
# after a successful action, on the expert's path): calls where a reflection is not needed, so the cost acts where
# the η check looks (docs/regrpo.md §8)
STEPS = [*RL_STATES, "grpo.decomposed_prompts=all"]
# ReGRPO's success term as the paper defines it: the response's plan executed from the prompt's state reaches the goal
# (any plan that does, not only the gold one; regrpo/execute.py). The earlier recipe scored the whole gold remaining
# plan offline (accuracy_full): arm `regrpo_offline`
EXECUTED = ["reward=regrpo", "reward.regrpo.success=executed"]
REGRPO = [*RL, *EXECUTED]
# what each arm changes
ARMS_SFT = {
    "plain": ["teacher.rot.reflection=none"],
    "rot": ["teacher.rot.reflection=rot"],
    "shuffled": ["teacher.rot.reflection=shuffled"],
    # not run by default: no reflection on the recovery samples at all (the reasoning a step after a successful
    # action gets), the SFT behaviour clauses' second baseline
    "bare": ["teacher.rot.reflection=bare"],
}
ARMS = {
    **ARMS_SFT,
    "paper": [*RL],
    "regrpo": [*REGRPO],
    "regrpo_eta0": [*REGRPO, "reward.regrpo.eta=0.0"],
    # not run by default: the three RL arms with the clean steps among the prompts (STEPS)
    "paper_steps": [*STEPS],
    "regrpo_steps": [*STEPS, *EXECUTED],
    "regrpo_steps_eta0": [*STEPS, *EXECUTED, "reward.regrpo.eta=0.0"],
    # regrpo_steps with the all-success groups kept (filter upper = G; all-failure groups still dropped): the filter
    # reads success only, so it drops exactly the groups where the cost is the only difference; ReGRPO itself has no
    # accuracy filter. At η = 0 those groups have equal rewards and are dropped anyway (its η = 0 arm is
    # regrpo_steps_eta0)
    "regrpo_steps_kept": [*STEPS, *EXECUTED, "grpo.filter.upper=${grpo.group_size}"],
    # not run by default: the SFT arms given a second cycle of the same budget (700 steps) from their own model, at the
    # default recipe's second-cycle lr (conf/experiment/tiny.yaml); each arm on its own samples, as before
    **{arm: [*ARMS_SFT[src], "sft.lr=1e-3"] for arm, src in CONTINUED_ARMS.items()},
    # the earlier recipe: success = the whole gold remaining plan, offline (not run by default)
    "regrpo_offline": [*RL, "reward=regrpo"],
    # the released trainer's groups: each RoT state's group holds the correct answer, the reflection + correct answer,
    # the failed action again and a corrupted action beside G - 4 samples (regrpo/anchors.py). Not run by default
    # (--arms regrpo_anchored): on seed 0's valid_seen it broke the tiny policy's answers (docs/experiments.md, ReGRPO's
    # constructed group members)
    "regrpo_anchored": [*RL, "reward=regrpo", "grpo.anchors=[correct,reflect,failed,corrupted]"],
}
# not run by default: the η pair of the kept arm (its recipe and regrpo_steps_eta0's, unchanged) and the paper reward
# on its prompts (paper_steps) from the RoT policy after its second SFT cycle (RL_STARTS), whose higher success puts
# more groups in the all-success band where the cost is the only difference
X2_ARMS = [arm for arm in RL_STARTS if arm.endswith("_x2")]
ARMS.update({arm: ARMS[arm.removesuffix("_x2")] for arm in X2_ARMS})
# not run by default: that pair, and the paper reward on the same prompts from the same start, without the KL to the
# frozen reference (β = 0: the Reinforced Reasoning code's init_kl_coef; the ReGRPO paper states none; the clean steps
# among the prompts are what keeps the held-out plans, §8). Over seeds 0-2 η = 0.1 writes 17% of η = 0's clean-step
# reflection tokens on valid_unseen (per seed 0.3%, 20%, 24%) and wins +9.6 success points against the paper reward
# (`make regrpo-nokl`; docs/regrpo.md §8)
ARMS.update(
    {
        f"{arm}_nokl": [o if not o.startswith("grpo.kl_coef=") else "grpo.kl_coef=0.0" for o in ARMS[arm]]
        for arm in X2_ARMS
    }
)
DEFAULT_ARMS = ["plain", "rot", "shuffled", "paper", "regrpo", "regrpo_eta0"]
MODES = ("free", "regrpo")


# every arm's evaluation: its own model only, no reference rows, no offline scoring
EVAL = ["evaluate.reference_policies=[]", "evaluate.max_offline_samples=0"]


def check_merge(files: list[str], recipe: dict, seeds: list[int]) -> list[dict]:
    """The published tables ``--merge`` names, each checked before any seed runs: readable and a table of this tool
    (``report.read_table``), of this run's ``recipe``, and with seeds disjoint from ``seeds`` (``--seeds``) and from
    the tables before it; refused with one line naming the file otherwise."""
    out: list[dict] = []
    held: dict[int, str] = {s: "--seeds" for s in seeds}
    for f in files:
        try:
            pub = read_table(f)
        except ValueError as exc:
            refuse(f"--merge: {exc}")
        theirs = pub.get("recipe")
        if theirs != recipe:
            keys = sorted(k for k in {*(theirs or {}), *recipe} if (theirs or {}).get(k) != recipe.get(k))
            refuse(
                f"--merge: {f}: its recipe differs from this run's in {', '.join(keys) or 'its form'} "
                f"(its {', '.join(f'{k}={(theirs or {}).get(k)!r}' for k in keys)}); not pooled"
            )
        if clash := sorted(s for s in pub["seeds"] if s in held):
            by = sorted({held[s] for s in clash})
            refuse(
                f"--merge: {f}: seeds {clash} are already in {' and '.join(by)}; a seed is pooled once, so drop them "
                "from --seeds or merge a table of other seeds"
            )
        held.update({s: f for s in pub["seeds"]})
        out.append(pub)
    return out


def _outputs(d: Path) -> list[str]:
    """``paths.*`` overrides sending a stage's metrics, plots, reports and work dir to ``d``."""
    return [
        f"paths.{k}={(d / v).as_posix()}"
        for k, v in (
            ("metrics_dir", "metrics"),
            ("plots_dir", "plots"),
            ("reports_dir", "reports"),
            ("work_dir", "work"),
        )
    ]


def _models(d: Path, start: Path | None = None, into: Path | None = None) -> list[str]:
    """``paths.*`` overrides for an SFT arm's data and models under ``d``; a second SFT cycle starts from ``start``
    (the first cycle's model, not ``d``'s base) and writes its model under ``into``."""
    return [
        f"paths.distilled={(d / 'distilled' / 'sft.jsonl').as_posix()}",
        f"paths.teacher_cache={(d / 'teacher_cache').as_posix()}",
        f"paths.base_model={(start or d / 'models' / 'base').as_posix()}",
        f"paths.sft_model={((into or d) / 'models' / 'sft').as_posix()}",
    ]


def _start(arm: str) -> str:
    """The SFT arm whose model a GRPO arm starts from (and takes as its KL reference)."""
    return RL_STARTS.get(arm, "rot")


def _share_states(base: Path, arm: str) -> None:
    """Copy the on-policy states another GRPO arm collected from the same RoT-SFT policy into this arm's work dir;
    the stage reuses them only when their inputs' fingerprint matches (``train/grpo/onpolicy.py``)."""
    dst = base / arm / "work" / "grpo_states"
    if (dst / "states.jsonl").exists() or planning():  # (a plan writes nothing)
        return
    for other in GRPO_ARMS:
        src = base / other / "work" / "grpo_states"
        if (
            other != arm
            and _start(other) == _start(arm)
            and (src / "states.jsonl").exists()
            and (src / "states.meta.json").exists()
        ):
            dst.mkdir(parents=True, exist_ok=True)
            for name in ("states.jsonl", "states.meta.json"):
                shutil.copyfile(src / name, dst / name)
            return


def onpolicy_states(model: Path, train: Path, base: Path, episodes: int, extra: list[str]) -> str:
    """``decompose.rot.onpolicy_states=<file>``: the states the policy at ``model`` reaches in ``episodes`` of the
    training episodes ``train`` (``regrpo/collect.py``, ``regrpo/onpolicy.py``), collected once into
    ``base/onpolicy/``. The file is named by the policy's digest, so another policy gives another parameter and the
    stamps rerun decompose and what follows."""
    from embodied_rft.regrpo.steps import model_digest

    if not (model / "config.json").exists():
        refuse(f"--onpolicy-from: no model at {model} (train that arm first, e.g. make regrpo-sft)")
    out = base / "onpolicy" / f"states-{model_digest(model)[:12]}-n{episodes}.jsonl"
    if not out.exists():
        cmd = ["-m", "embodied_rft.regrpo.collect", "--model", model.as_posix(), "--episodes", train.as_posix()]
        cmd += ["--n", str(episodes), "--out", out.as_posix(), *extra]
        _run([sys.executable, *cmd], base / "logs" / "onpolicy.log")
    return f"decompose.rot.onpolicy_states={out.as_posix()}"


def run_seed(
    seed: int,
    root: Path,
    subdir: str,
    arms: list[str],
    modes: list[str],
    extra: list[str],
    onpolicy: tuple[str, int] | None = None,
) -> None:
    """Every stage the chosen arms need for one seed (module docstring); ``onpolicy`` = (a policy folder under the
    seed's root, episodes): every arm's data add that policy's own failures as RoT samples."""
    paths = _conf_paths()
    common = [f"seed={seed}", *path_overrides(paths, root)]
    base, logs = root / subdir, root / subdir / "logs"
    episodes = root / paths["episodes_dir"]
    if any(o.split("=")[0].lstrip("+~").startswith(("data", "experiment")) for o in extra):
        # other episodes than `make seeds`': prepared under the subdir, never over its runs
        episodes = base / "episodes"
        common.append(f"paths.episodes_dir={episodes.as_posix()}")
        prep = [*common, *_outputs(base), *extra]
        ran = _run_stage(seed, "prepare", prep, base / "metrics" / "prepare.json", logs / "prepare", False)
    else:  # the episodes of `make seeds` (same seed and overrides: its stamp makes this a no-op when it ran)
        done = root / paths["metrics_dir"] / "prepare.json"
        ran = _run_stage(seed, "prepare", common, done, root / "logs" / "prepare", False)
    shared = [*common, *RECIPE, f"paths.decomposed_dir={(base / 'decomposed').as_posix()}"]
    if onpolicy is not None:
        policy, n = onpolicy
        prompt = [o for o in extra if o.lstrip("+~").startswith("prompt.")]
        shared.append(onpolicy_states(root / policy, episodes / "train.jsonl", base, n, prompt))
    ran = _run_stage(
        seed,
        "decompose",
        [*shared, *_outputs(base), *extra],
        base / "metrics" / "decompose.json",
        logs / "decompose",
        ran,
    )
    after: dict[str, bool] = {}  # arm -> whether it (or anything before it) ran in this call
    starts = {_start(a) for a in arms if a in GRPO_ARMS}  # the SFT models the RL arms start from
    continued = [a for a in CONTINUED_ARMS if a in arms or a in starts]
    need = {CONTINUED_ARMS[a] for a in continued} | (starts & set(SFT_ARMS))
    for arm in [a for a in SFT_ARMS if a in arms or a in need]:
        args = [*shared, *ARMS[arm], *_models(base / arm), *_outputs(base / arm), *extra]
        r = ran
        for stage in ("distill", "base", "sft"):
            r = _run_stage(seed, stage, args, base / arm / "metrics" / f"{stage}.json", logs / arm / stage, r) or r
        after[arm] = r
    for arm in continued:  # the second SFT cycle, from the arm's first-cycle model
        src = base / CONTINUED_ARMS[arm]
        models = _models(src, start=src / "models" / "sft", into=base / arm)
        args = [*shared, *ARMS[arm], *models, *_outputs(base / arm), *extra]
        done = base / arm / "metrics" / "sft.json"
        after[arm] = _run_stage(seed, "sft", args, done, logs / arm / "sft", after[CONTINUED_ARMS[arm]])
    for arm in [a for a in GRPO_ARMS if a in arms]:
        model = f"paths.grpo_model={(base / arm / 'models' / 'grpo').as_posix()}"
        models = _models(base / "rot", into=base / _start(arm))  # rot's data; the model of the arm's start
        args = [*shared, *ARMS[arm], *models, model, *_outputs(base / arm), *extra]
        done = base / arm / "metrics" / "grpo.json"
        _share_states(base, arm)
        after[arm] = _run_stage(seed, "grpo", args, done, logs / arm / "grpo", after[_start(arm)])
    measured = [a for a in after if a in GRPO_ARMS or a == "rot" or a in starts]
    if measured:
        # the held-out per-step calls (regrpo/steps.py) of each split: decompose's val file is valid_unseen's (the
        # report's); valid_seen's, for choosing a recipe, comes from a second decompose into its own folder
        seen = base / "decomposed-valid_seen"
        args = [*shared, "decompose.val_split=valid_seen", f"paths.decomposed_dir={seen.as_posix()}", *_outputs(seen)]
        _run_stage(
            seed, "decompose", [*args, *extra], seen / "metrics" / "decompose.json", logs / "decompose-seen", ran
        )
        vals = {"valid_unseen": base / "decomposed" / "val.jsonl", "valid_seen": seen / "val.jsonl"}
    for arm in measured:  # reused for the same weights and samples
        model = "grpo" if arm in GRPO_ARMS else "sft"
        for split, val in vals.items():
            cmd = ["-m", "embodied_rft.regrpo.steps", "--model", (base / arm / "models" / model).as_posix()]
            cmd += ["--samples", val.as_posix(), "--out", steps_file(base, arm, split).as_posix()]
            _run([sys.executable, *cmd], logs / arm / f"steps-{split}.log")
    sft_arms = [a for a in after if a in SFT_ARMS or a in CONTINUED_ARMS]
    near = base / "heldout-rot" / "valid_unseen.jsonl"  # the engine's near-misses on the report's split
    for arm in sft_arms:  # reused for the same weights and samples
        cmd = ["-m", "embodied_rft.regrpo.steps", "--model", (base / arm / "models" / "sft").as_posix()]
        cmd += ["--samples", near.as_posix(), "--rot-episodes", (episodes / "valid_unseen.jsonl").as_posix()]
        cmd += ["--out", heldout_rot_file(base, arm).as_posix()]
        _run(
            [sys.executable, *cmd, *[o for o in extra if o.lstrip("+~").startswith("prompt.")]], logs / arm / "rot.log"
        )
    for arm in arms:
        model = "grpo" if arm in GRPO_ARMS else "sft"
        src = f"paths.{model}_model={(base / arm / 'models' / model).as_posix()}"
        for mode in modes:
            d = base / arm / f"eval-{mode}"
            args = [
                *shared,
                src,
                *_outputs(d),
                f"evaluate.models=[{model}]",
                *EVAL,
                f"evaluate.reflection={mode}",
                *extra,
            ]
            _run_stage(seed, "evaluate", args, d / "metrics" / "eval.json", logs / arm / f"evaluate-{mode}", after[arm])


def steps_file(base: Path, arm: str, split: str) -> Path:
    """Where an arm's held-out per-step reflection counts on a split's samples go."""
    return base / arm / "metrics" / f"steps-{split}.json"


def heldout_rot_file(base: Path, arm: str) -> Path:
    """Where an SFT arm's greedy answers to the RoT engine's near-misses on valid_unseen are tallied."""
    return base / arm / "metrics" / "heldout-rot-valid_unseen.json"


def collect(runs: dict[int, Path], subdir: str, arms: list[str], modes: list[str]) -> dict[int, dict]:
    """``{seed: {(arm, mode): eval.details.json}}`` of the finished evaluations, and the arm's
    held-out per-step reflection counts on a split's samples, ``(arm, "steps:<split>")``, where they were measured."""
    out: dict[int, dict] = {}
    for s, root in runs.items():
        out[s] = {}
        for arm in arms:
            for mode in modes:
                f = root / subdir / arm / f"eval-{mode}" / "metrics" / "eval.details.json"
                if f.exists():
                    out[s][(arm, mode)] = json.loads(f.read_text("utf-8"))
            for split in STEP_SPLITS:
                f = steps_file(root / subdir, arm, split)
                if f.exists():
                    out[s][(arm, f"steps:{split}")] = json.loads(f.read_text("utf-8"))
            f = heldout_rot_file(root / subdir, arm)
            if f.exists():
                out[s][(arm, HELDOUT_ROT)] = json.loads(f.read_text("utf-8"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = seed_parser(__doc__, "regrpo")
    ap.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=list(ARMS))
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--subdir", default="regrpo", help="a seed's ReGRPO runs go under <runs-dir>/seed-<s>/<subdir>/")
    ap.add_argument(
        "--onpolicy-from",
        default=None,
        help="a policy folder under each seed's root (e.g. regrpo/plain/models/sft) whose own failures in training "
        "episodes join every arm's data as RoT samples (regrpo/onpolicy.py)",
    )
    ap.add_argument("--onpolicy-episodes", type=int, default=200, help="training episodes that policy plays")
    ap.add_argument(
        "--merge",
        nargs="+",
        default=[],
        metavar="JSON",
        help="published tables of this tool (e.g. metrics/regrpo_onpolicy.json) over other seeds with the same recipe: "
        "their seeds are pooled with these (regrpo/report.py merge), so seeds run in another session join the table",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    runs = check_args(args)
    for flag, names in (("--arms", args.arms), ("--modes", args.modes)):
        if twice := sorted({a for a in names if names.count(a) > 1}):
            refuse(f"{flag}: {', '.join(twice)} given more than once; name each once")
    if args.onpolicy_episodes < 1:
        refuse(f"--onpolicy-episodes: must be >= 1 (training episodes the policy plays), got {args.onpolicy_episodes}")
    onpolicy = (args.onpolicy_from, args.onpolicy_episodes) if args.onpolicy_from else None
    recipe: dict = {"shared": RECIPE, "arms": {a: ARMS[a] for a in args.arms}, "overrides": args.overrides}
    if onpolicy is not None:
        recipe["onpolicy_from"] = {"policy": onpolicy[0], "episodes": onpolicy[1]}
    published = check_merge(args.merge, recipe, list(runs))
    if not args.summary_only:
        # the evaluation settings every arm's evaluate stage gets (run_seed), then the user's overrides
        check_config([*RECIPE, *EVAL, "evaluate.models=[sft]", *args.overrides])
        arms, modes, extra = list(args.arms), list(args.modes), list(args.overrides)
        run_one = lambda s, root: run_seed(s, root, args.subdir, arms, modes, extra, onpolicy)  # noqa: E731
        header = f"seeds {list(runs)} under {args.runs_dir}/, arms {', '.join(arms)} evaluated in {', '.join(modes)}"
        if not announce(runs, run_one, f"{header} (under <seed>/{args.subdir}/)", args.dry_run):
            return 0
        for s, root in runs.items():
            run_one(s, root)
    records = collect(runs, args.subdir, list(args.arms), list(args.modes))
    if not any(records.values()):
        raise SystemExit(
            f"no ReGRPO evaluations under {args.runs_dir}/seed-*/{args.subdir} (run without --summary-only)"
        )
    summary = summarise({s: r for s, r in records.items() if r})
    try:
        if published:
            summary = merge([summary, *published])
        summary["recipe"] = recipe
        publish(summary, render(summary), args.out_metrics, args.out_report)
        # the clause index of the main table beside this one (metrics/regrpo.json) follows every table published
        main_table = Path(args.out_metrics).with_name("regrpo.json")
        if main_table.exists():
            refresh(main_table, Path(args.out_report).with_name("regrpo.md"))
    except ValueError as e:
        raise SystemExit(str(e)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
