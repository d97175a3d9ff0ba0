"""ReGRPO's study adapter (docs/regrpo.md §7, docs/studies.md): what the ReGRPO studies (``conf/study/regrpo*.yaml``,
their arms in ``conf/study/arms/regrpo.yaml``) name by string beyond the generic ones. A study loads it with
``plugins: [embodied_rft.regrpo.study]``.

- ``READERS["regrpo_evaluate"]``: the generic ``evaluate`` reader, plus the per-seed reflection scalars of the run
  (calls, calls after success, their spontaneous reflection tokens, tokens of final reflections, ReGRPO's trigger
  rate, generated tokens per call) under the row's ``reflection``.
- ``TASKS``: ``steps`` (an arm's greedy answers to the held-out per-step samples of each split, counted by
  ``regrpo/steps.py``: the calls the η check reads), ``heldout_rot`` (an SFT arm's answers to the RoT engine's
  near-misses on valid_unseen's episodes, ``regrpo/steps.py --rot-episodes``), ``decompose_split`` (a second
  ``decompose`` of the arm's data with another val split: valid_seen's per-step samples) and ``onpolicy_states``
  (``regrpo/collect.py``: a policy's states on training episodes, which the arm's ``decompose`` then reads as
  ``decompose.rot.onpolicy_states``).
- ``SECTIONS``: ``steps`` (held-out per-step counts per split and arm, per seed and pooled), ``heldout_rot`` (the
  near-miss answers, pooled) and ``eta`` (each η pair's reflection tokens per held-out call after a successful
  step, pooled over the seeds both arms were measured on); each with ``.merge`` (sums of the counts it keeps) and
  ``.render``.
- ``CHECKS``: ``shuffled_control`` (the shuffled control does not reproduce RoT's recovered gain), ``rl_gain``
  (success +3 points pooled or recovered +5) and ``eta_share`` (η's tokens at most 20% of η = 0's); the
  thresholds that are a plain gap use the generic ``paired_gain`` and ``count_gap``.

The η check reads the held-out steps after a successful action (where a reflection is not needed), not the
interactive calls after one: in EB's loop those are starts and plan-exhausted calls, silent failures
(``regrpo/steps.py``). A symbolic-simulator proxy throughout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embodied_rft.regrpo.steps import plan_rates, with_rates
from embodied_rft.study.dvcgen import _escape
from embodied_rft.study.layout import arm_dir, chain_overrides, studies_dir
from embodied_rft.study.registry import CHECKS, READERS, TASKS, section
from embodied_rft.study.spec import StudyError
from embodied_rft.study.table import read_evaluate

# the held-out per-step samples measured: valid_seen's to choose a recipe on, valid_unseen's to report (the checks)
STEP_SPLITS = ("valid_seen", "valid_unseen")
# the interactive reflection scalars of one evaluation, kept per seed (regrpo_evaluate)
REFLECTION = (
    "calls",
    "calls_after_success",
    "spontaneous_tokens_after_success",
    "final_reflection_tokens",
    "trigger_rate",
    "generated_tokens_per_call",
)
# code deps of the tasks: the import closure of regrpo/steps.py and regrpo/collect.py (lazy imports included;
# tests/regrpo/test_study_tables.py checks it), never this adapter (editing a table's rendering reruns no model)
_COMMON = [
    "src/embodied_rft/alfred",
    "src/embodied_rft/config.py",
    "src/embodied_rft/core",
    "src/embodied_rft/data",
    "src/embodied_rft/evaluate",
    "src/embodied_rft/filtering.py",
    "src/embodied_rft/generation",
    "src/embodied_rft/models",
    "src/embodied_rft/params.py",
    "src/embodied_rft/pipeline.py",
    "src/embodied_rft/progress.py",
    "src/embodied_rft/reward.py",
    "src/embodied_rft/schema.py",
    "src/embodied_rft/scoring.py",
    "src/embodied_rft/teacher",
    "src/embodied_rft/train/grpo/config.py",
    "src/embodied_rft/train/grpo/onpolicy.py",
    "src/embodied_rft/train/sft/config.py",
    "src/embodied_rft/world",
]
STEPS_CODE = sorted(
    [
        *_COMMON,
        *(
            f"src/embodied_rft/regrpo/{m}.py"
            for m in ("config", "execute", "onpolicy", "rot", "steps", "text", "write")
        ),
        "src/embodied_rft/train/grpo/heldout.py",
        "src/embodied_rft/train/grpo/loss.py",
        "src/embodied_rft/train/grpo/rollout.py",
    ]
)
COLLECT_CODE = sorted([*_COMMON, "src/embodied_rft/regrpo/collect.py", "src/embodied_rft/train/grpo/checkpoint.py"])


# --- the reader ---


def read_regrpo_evaluate(path: Path, read: str) -> dict[str, Any]:
    """The ``evaluate`` reader's row (success, episodes, behaviour and reflection-token counts) with the run's
    reflection scalars under ``reflection`` (None where the run did not count them)."""
    row = read_evaluate(path, read)
    overall = json.loads(Path(path).read_text("utf-8"))["models"][read]["interactive"]["overall"]
    refl = overall.get("reflection") or {}
    row["reflection"] = {k: refl.get(k) for k in REFLECTION}
    return row


read_regrpo_evaluate.file = read_evaluate.file  # type: ignore[attr-defined]
READERS.register("regrpo_evaluate")(read_regrpo_evaluate)


# --- the tasks ---


def _conf_overrides(ctx: Any) -> list[str]:
    """The arm's overrides (the study's, then its chain's), for the tools that compose ``conf/`` themselves for
    their prompt (``regrpo/steps.py --rot-episodes``, ``regrpo/collect.py``): the prompt the arm's stages get."""
    return [_escape(o) for o in chain_overrides(ctx.study, ctx.arm)]


def _prompt_params(ctx: Any) -> list[dict[str, list[str]]]:
    return [{f"{studies_dir(ctx.study)}/params/{ctx.arm}.yaml": ["prompt"]}]


def _split_samples(ctx: Any, split: str, val_split: str) -> str:
    """The decomposed samples of ``split``'s episodes: the val file of the arm's ``decompose`` for its val split,
    else that of a ``decompose_split`` task of the arm or of an arm it starts from."""
    if split == val_split:
        return f"{ctx.path('decomposed_dir')}/val.jsonl"
    for a in ctx.study.chain(ctx.arm):
        if any(t["task"] == "decompose_split" and t.get("split") == split for t in ctx.study.arms[a].tasks):
            return f"{arm_dir(ctx.study, a)}/{split}/decomposed/val.jsonl"
    raise StudyError(
        f"{ctx.study.file}: arm {ctx.arm!r}: task steps measures {split}, but no arm of its chain decomposes it "
        f"(tasks: [{{task: decompose_split, split: {split}}}])"
    )


@TASKS.register("decompose_split")
def decompose_split(ctx: Any, split: str) -> dict[str, Any]:
    """A second ``decompose`` of the arm's data with ``decompose.val_split=<split>``, under ``<arm>/<split>/``: its
    val file holds that split's per-step samples (what ``steps`` measures on valid_seen)."""
    root = f"{ctx.dir}/{split}"
    paths = {"decomposed_dir": f"{root}/decomposed"}
    paths.update(
        {k: f"{root}/{ctx.gen.pipe.paths[k]}" for k in ("metrics_dir", "plots_dir", "reports_dir", "work_dir")}
    )
    return {f"decompose-{split}": ctx.stage("decompose", paths, [f"decompose.val_split={split}"])}


@TASKS.register("steps")
def steps_task(
    ctx: Any, model: str, splits: list[str] | None = None, val_split: str = "valid_unseen"
) -> dict[str, Any]:
    """The held-out per-step reflection of the arm's model (``model``: its path key, ``sft_model`` or
    ``grpo_model``) on each split's decomposed samples (``regrpo/steps.py``), into
    ``<metrics>/steps-<split>.json``."""
    out = {}
    m = ctx.path(model)
    for split in splits or ["valid_unseen", "valid_seen"]:
        samples = _split_samples(ctx, split, val_split)
        f = f"{ctx.path('metrics_dir')}/steps-{split}.json"
        out[f"steps-{split}"] = {
            "cmd": ctx.cmd("embodied_rft.regrpo.steps", "--model", m, "--samples", samples, "--out", f),
            "deps": [*STEPS_CODE, m, samples],
            "outs": [{f: {"cache": False}}],
            "table_inputs": [f],
        }
    return out


@TASKS.register("heldout_rot")
def heldout_rot_task(ctx: Any, model: str = "sft_model", split: str = "valid_unseen") -> dict[str, Any]:
    """The arm's greedy answers to the RoT engine's near-misses on ``split``'s episodes (two per trajectory:
    failures the policy did not make itself; ``regrpo/steps.py --rot-episodes``), the samples written beside."""
    m = ctx.path(model)
    episodes = f"{ctx.path('episodes_dir')}/{split}.jsonl"
    samples = f"{ctx.dir}/heldout-rot/{split}.jsonl"
    f = f"{ctx.path('metrics_dir')}/heldout-rot-{split}.json"
    args = ["--model", m, "--samples", samples, "--rot-episodes", episodes, "--out", f, *_conf_overrides(ctx)]
    return {
        "heldout-rot": {
            "cmd": ctx.cmd("embodied_rft.regrpo.steps", *args),
            "deps": [*STEPS_CODE, m, episodes],
            "params": _prompt_params(ctx),
            "outs": [{samples: {"cache": False}}, {f: {"cache": False}}],
            "table_inputs": [f],
        }
    }


@TASKS.register("onpolicy_states")
def onpolicy_states_task(ctx: Any, episodes: int = 200, model: str = "sft_model") -> dict[str, Any]:
    """The states the policy at the arm's ``model`` (whose: the arm's ``inputs``) reaches in ``episodes`` training
    episodes (``regrpo/collect.py``), which the arm's own ``decompose`` reads as ``decompose.rot.onpolicy_states``:
    that policy's failures join the arm's train file as RoT samples (docs/regrpo.md §2)."""
    states = f"{ctx.dir}/onpolicy/states.jsonl"
    train = f"{ctx.path('episodes_dir')}/train.jsonl"
    ctx.override("decompose", f"decompose.rot.onpolicy_states={states}")
    args = ["--model", ctx.path(model), "--episodes", train, "--n", str(episodes), "--out", states]
    return {
        "onpolicy-states": {
            "cmd": ctx.cmd("embodied_rft.regrpo.collect", *args, *_conf_overrides(ctx)),
            "deps": [*COLLECT_CODE, ctx.path(model), train],
            "params": _prompt_params(ctx),
            "outs": [states, states.removesuffix(".jsonl") + ".meta.json"],
        }
    }


# --- pooled counts (per seed in regrpo/steps.py; summed over seeds here) ---


def _pool(parts: list[dict[str, Any]], keys: tuple[str, ...], rates: Any) -> dict[str, dict[str, Any]]:
    """Per kind of call, the counts ``keys`` summed over ``parts`` (one ``{kind: counts}`` per seed), with
    ``rates`` set from them."""
    out: dict[str, dict[str, Any]] = {}
    for res in parts:
        for kind, d in res.items():
            o = out.setdefault(kind, dict.fromkeys(keys, 0))
            for k in keys:
                o[k] += d[k]
    return {kind: rates(o) for kind, o in out.items()}


def pool_steps(kinds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The held-out per-step counts (``regrpo/steps.py``'s ``kinds``) summed over seeds, with their rates."""
    return _pool(kinds, ("calls", "reflecting", "reflection_tokens"), with_rates)


def pool_plans(plans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The plan counts of held-out answers (``regrpo/steps.py``'s ``plans``) summed over seeds, with their rates."""
    return _pool(plans, ("calls", "first_correct", "repeat"), plan_rates)


def steps_arm(per_seed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One arm on one split: the seeds measured, each seed's held-out per-step counts and the pooled ones."""
    seeds = sorted(int(s) for s in per_seed)
    return {
        "seeds": seeds,
        "per_seed": {str(s): per_seed[str(s)] for s in seeds},
        "pooled": pool_steps([per_seed[str(s)] for s in seeds]),
    }


def _after_success(pooled: dict[str, Any]) -> dict[str, int]:
    return {k: pooled[k] for k in ("calls", "reflecting", "reflection_tokens")}


def eta_gap(kinds_a: dict[int, dict[str, Any]], kinds_b: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """Reflection tokens per held-out call after a successful step (and the reflecting share) of arms a and b
    (``{seed: kinds}`` each), pooled over the seeds both were measured on, with the counts they come from; None
    when there are none."""
    both = sorted(s for s in kinds_a if s in kinds_b)
    pa = pool_steps([kinds_a[s] for s in both]).get("after_success")
    pb = pool_steps([kinds_b[s] for s in both]).get("after_success")
    if pa is None or pb is None:
        return None
    return _eta_rates(both, [_after_success(pa), _after_success(pb)])


def _eta_rates(seeds: list[int], counts: list[dict[str, int]]) -> dict[str, Any]:
    rated = [with_rates(dict(c)) for c in counts]
    return {
        "seeds": seeds,
        "counts": counts,
        "tokens_per_call": [r["tokens_per_call"] for r in rated],
        "reflection_rate": [r["reflection_rate"] for r in rated],
    }


# --- the checks' predicates ---


def control_holds(rot_pts: float, control_pts: float) -> bool:
    """RoT's gap is a gain and the control's is under half of it."""
    return rot_pts > 0 and control_pts < 0.5 * rot_pts


def rl_gain_holds(success_pts: float, recovered_pts: float, points: float = 3.0, recovered: float = 5.0) -> bool:
    """ReGRPO over the paper reward: success +``points`` pooled, or the recovered next call +``recovered``."""
    return success_pts >= points or recovered_pts >= recovered


def eta_holds(t0: float, t1: float, share: float = 0.2) -> bool | None:
    """η's reflection tokens after success at most ``share`` of η = 0's; None when η = 0 never reflects there."""
    return None if not t0 else t1 <= share * t0


# --- the sections ---


def _read(ctx: Any, arm: str, seed: int, name: str) -> dict[str, Any] | None:
    f = ctx.arm_dir(arm, seed) / "metrics" / name
    return json.loads(f.read_text("utf-8")) if f.exists() else None


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def steps_section(ctx: Any, splits: list[str] | None = None) -> dict[str, Any]:
    """``{split: {arm: {seeds, per_seed, pooled}}}``: each run arm's held-out per-step counts (``steps`` task) per
    seed measured and pooled."""
    out: dict[str, Any] = {}
    for split in splits or STEP_SPLITS:
        arms = {}
        for arm in sorted(ctx.study.run):
            per = {str(s): r["kinds"] for s in ctx.seeds if (r := _read(ctx, arm, s, f"steps-{split}.json"))}
            if per:
                arms[arm] = steps_arm(per)
        if arms:
            out[split] = arms
    return out


def _steps_merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    per: dict[str, dict[str, dict[str, Any]]] = {}
    for part in parts:
        for split, arms in part.items():
            for arm, d in arms.items():
                per.setdefault(split, {}).setdefault(arm, {}).update(d["per_seed"])
    return {split: {arm: steps_arm(p) for arm, p in sorted(arms.items())} for split, arms in per.items()}


def render_steps(steps: dict[str, Any]) -> str:
    lines = [
        "Held-out per-step calls (the decomposed samples of a split's episodes: each trajectory's first step and "
        "the steps after a successful action on the expert's path, where a reflection is not needed; greedy; "
        "docs/regrpo.md §7): answers that reflect (%) and reflection tokens per call, pooled over the seeds "
        "measured.",
        "",
        "| split | arm | seeds | first step: reflect | after success: reflect | after success: tokens per call |",
        "|---|---|---|---:|---:|---:|",
    ]
    for split, arms in steps.items():
        for arm, d in arms.items():
            f, a = d["pooled"].get("first"), d["pooled"].get("after_success")
            tok = "–" if a is None else f"{a['tokens_per_call']:.2f}"
            lines.append(
                f"| {split} | {arm} | {', '.join(f's{s}' for s in d['seeds'])} | "
                f"{_pct(f and f['reflection_rate'])} | {_pct(a and a['reflection_rate'])} | {tok} |"
            )
    return "\n".join(lines) + "\n"


section("steps", _steps_merge, render_steps)(steps_section)


def heldout_rot_section(ctx: Any, split: str = "valid_unseen") -> dict[str, Any]:
    """``{arm: {seeds, pooled}}``: each run arm's answers to the RoT engine's near-misses (``heldout_rot`` task),
    pooled over the seeds measured."""
    out = {}
    for arm in sorted(ctx.study.run):
        have = [(s, r) for s in ctx.seeds if (r := _read(ctx, arm, s, f"heldout-rot-{split}.json"))]
        if have:
            out[arm] = {"seeds": [s for s, _ in have], "pooled": pool_plans([r["plans"] for _, r in have])}
    return out


def _heldout_rot_merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for arm in sorted({a for p in parts for a in p}):
        have = [p[arm] for p in parts if arm in p]
        out[arm] = {
            "seeds": sorted(s for d in have for s in d["seeds"]),
            "pooled": pool_plans([d["pooled"] for d in have]),
        }
    return out


def render_heldout_rot(near: dict[str, Any]) -> str:
    lines = [
        "The RoT engine's near-misses on valid_unseen's episodes (two per trajectory; failures the policy did not "
        "make itself; greedy; docs/regrpo.md §8), pooled over the seeds measured: after a rejected action, answers "
        "that repeat it and answers whose first action is the corrected plan's (%); after a silent one (it "
        "executed), answers whose first action is right (%).",
        "",
        "| arm | seeds | rejected: calls | repeat | first action right | silent: calls | first action right |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for arm, d in near.items():
        f, a = d["pooled"].get("after_failure") or {}, d["pooled"].get("after_success") or {}
        lines.append(
            f"| {arm} | {', '.join(f's{s}' for s in d['seeds'])} | {f.get('calls', 0)} | "
            f"{_pct(f.get('repeat_rate'))} | {_pct(f.get('first_correct_rate'))} | {a.get('calls', 0)} | "
            f"{_pct(a.get('first_correct_rate'))} |"
        )
    return "\n".join(lines) + "\n"


section("heldout_rot", _heldout_rot_merge, render_heldout_rot)(heldout_rot_section)


def eta_section(ctx: Any, pairs: dict[str, list[str]], splits: list[str] | None = None) -> dict[str, Any]:
    """``{pair: {eta0, eta, splits: {split: {seeds, counts, tokens_per_call, reflection_rate}}}}``: for each η pair
    (``pairs``: id -> [the η = 0 arm, the η arm]) the held-out calls after a successful step of both arms, pooled
    over the seeds both were measured on (``[η = 0, η]`` in each list)."""
    out: dict[str, Any] = {}
    for pid, (a, b) in pairs.items():
        per_split = {}
        for split in splits or STEP_SPLITS:
            ka = {s: r["kinds"] for s in ctx.seeds if (r := _read(ctx, a, s, f"steps-{split}.json"))}
            kb = {s: r["kinds"] for s in ctx.seeds if (r := _read(ctx, b, s, f"steps-{split}.json"))}
            if (g := eta_gap(ka, kb)) is not None:
                per_split[split] = g
        if per_split:
            out[pid] = {"eta0": a, "eta": b, "splits": per_split}
    return out


def _eta_merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for pid, d in part.items():
            o = out.setdefault(pid, {"eta0": d["eta0"], "eta": d["eta"], "splits": {}})
            for split, g in d["splits"].items():
                acc = o["splits"].setdefault(split, {"seeds": [], "counts": [None, None]})
                acc["seeds"] += g["seeds"]
                acc["counts"] = [
                    dict(c) if have is None else {k: have[k] + c[k] for k in have}
                    for have, c in zip(acc["counts"], g["counts"], strict=True)
                ]
    for d in out.values():
        d["splits"] = {split: _eta_rates(sorted(g["seeds"]), g["counts"]) for split, g in d["splits"].items()}
    return out


def render_eta(eta: dict[str, Any]) -> str:
    lines = []
    for d in eta.values():
        for split, g in d["splits"].items():
            (t0, t1), seeds = g["tokens_per_call"], ", ".join(f"s{s}" for s in g["seeds"])
            share = "–" if not t0 else f"{100 * t1 / t0:.0f}%"
            lines.append(
                f"{d['eta']} vs {d['eta0']} (steps, {split}) over {seeds}: {t1:.2f} vs {t0:.2f} reflection tokens "
                f"per call after success ({share})."
            )
    return "\n\n".join(lines) + "\n"


section("eta", _eta_merge, render_eta)(eta_section)


# --- the checks ---


def count_pts(c: dict[str, Any], column: str) -> float:
    """b's pooled rate of a count column minus a's, in points, on a comparison's seeds (0 when either has none)."""
    ra, rb = c["counts"].get(column) or (None, None)
    return round(100 * (rb - ra), 2) if ra is not None and rb is not None else 0


@CHECKS.register("shuffled_control")
def shuffled_control(
    table: dict[str, Any], comparison: str, control: str, column: str = "recovered_next_call_rate"
) -> tuple[bool | None, dict[str, Any]]:
    """The control (``control``: the shuffled arm against the baseline) does not reproduce RoT's gain
    (``comparison``: the RoT arm against the same baseline) on ``column``: RoT's gap is positive and the control's
    under half of it. Figures: ``[control, RoT]`` in points."""
    c, k = table["comparisons"].get(comparison), table["comparisons"].get(control)
    if c is None or k is None:
        return None, {}
    gr, gs = count_pts(c, column), count_pts(k, column)
    return control_holds(gr, gs), {f"{column}_pts": [gs, gr]}


@CHECKS.register("rl_gain")
def rl_gain(
    table: dict[str, Any], comparison: str, points: float = 3.0, recovered_points: float = 5.0
) -> tuple[bool | None, dict[str, Any]]:
    """ReGRPO against paper-reward GRPO (``comparison``): success +``points`` pooled, or the recovered next call
    +``recovered_points``."""
    c = table["comparisons"].get(comparison)
    if c is None:
        return None, {}
    gap, rec = c["success_gap_pooled"], count_pts(c, "recovered_next_call_rate")
    holds = rl_gain_holds(gap, rec, points, recovered_points)
    return holds, {"success_pts": gap, "p": c["p_mcnemar_pooled"], "recovered_next_call_rate_pts": rec}


@CHECKS.register("eta_share")
def eta_share(
    table: dict[str, Any], pair: str, split: str = "valid_unseen", share: float = 0.2
) -> tuple[bool | None, dict[str, Any]]:
    """The η arm's reflection tokens per held-out call after a successful step are at most ``share`` of its η = 0
    arm's (the ``eta`` section's ``pair`` on ``split``); None when η = 0 never reflects there. Figures: the tokens
    ``[η = 0, η]`` and the seeds pooled."""
    g = (((table["sections"].get("eta") or {}).get(pair) or {}).get("splits") or {}).get(split)
    if g is None:
        return None, {}
    t0, t1 = g["tokens_per_call"]
    return eta_holds(t0, t1, share), {"tokens_per_call": [t0, t1], "seeds": g["seeds"]}


__all__ = [
    "COLLECT_CODE",
    "REFLECTION",
    "STEPS_CODE",
    "STEP_SPLITS",
    "control_holds",
    "count_pts",
    "eta_gap",
    "eta_holds",
    "pool_plans",
    "pool_steps",
    "read_regrpo_evaluate",
    "render_eta",
    "render_heldout_rot",
    "render_steps",
    "rl_gain_holds",
    "steps_arm",
]
