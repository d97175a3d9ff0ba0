"""VeGAS's study adapter (a study names it under ``plugins:``; ``conf/study/vegas.yaml``, docs/vegas.md §7): what a
study reads from a ``bon`` run, and the table sections, check and task only VeGAS has.

- ``READERS["bon"]`` (:func:`read_bon`): one selector (the eval's ``read``) of a ``bon`` run's ``bon.details.json``:
  success, episodes, per-subset success, per-episode success and per-episode subset (so a comparison with
  ``subset: long_horizon`` pairs the long-horizon episodes alone), and as count columns the behaviour rates
  ``evaluate`` reports and the model calls per planner call. Every selector of one ``bon`` run is an eval of that
  one run (evals of one stage with the same overrides share a run).
- ``SECTIONS["bon_coverage"]``: per seed, the candidate coverage of the greedy run's own states (greedy's
  oracle-correct first-action rate, coverage@k, headroom@4); ``SECTIONS["bon_live_auroc"]``: per seed, each
  verifier's AUROC on the policy's own live candidates. Both merge over disjoint seeds and render as Markdown.
- ``SECTIONS["bon_within_call"]``: where Best-of-N acts — per seed the run's within-call metrics, pooled over
  seeds recomputed from the seeds' per-call tables (``vegas/calls.py``).
- ``CHECKS["coverage_headroom"]``: coverage@k at least ``points`` above greedy's correct rate on every seed;
  ``CHECKS["within_call_auroc"]``: a verifier's pooled within-call AUROC against a floor (or a ceiling).
- ``TASKS["bon_prerequisites"]``: when the study is generated (``make study``, before ``dvc repro`` runs anything),
  the one model no stage of a study makes — the zero-shot SmolLM2 verifier, when a ``bon`` run plays or scores
  ``bon_zs_smollm2`` (``vegas/bon.py`` :func:`check_models`) — is looked for; a missing one refuses the study with
  one line. DVC cannot: the GGUF file is an installed package's, no dep of any stage, and ``bon`` itself finds it
  missing only after synthesis and the verifier have run.

All numbers are a symbolic-simulator proxy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embodied_rft.study.registry import CHECKS, READERS, TASKS, section
from embodied_rft.study.spec import StudyError

# evaluate's behaviour rates as [numerator, denominator] (study/table.py's read_evaluate): rate, its denominator
BEHAVIOUR = (
    ("repeat_after_failure_rate", "failures_followed"),
    ("recovered_next_call_rate", "recovery_calls"),
    ("recovered_next_call_correct_rate", "recovery_calls"),
)


def read_bon(path: Path, read: str) -> dict[str, Any]:
    """Selector ``read`` of a ``bon`` run (module docstring)."""
    rec = json.loads(Path(path).read_text("utf-8"))
    s = (rec.get("selectors") or {}).get(read)
    if s is None:
        played = ", ".join(rec.get("selectors") or {}) or "none"
        raise ValueError(f"{path}: no selector {read!r} (played: {played}); add it to bon.selectors")
    inter = s["interactive"]
    o = inter["overall"]
    counts = {}
    for col, den in BEHAVIOUR:
        d = o.get(den) or 0
        counts[col] = [round((o.get(col) or 0.0) * d), d]
    calls = s["planner_calls"]
    counts["model_calls_per_call"] = [round(s["model_calls_per_call"] * calls), calls]
    # the cost beside each selector, pooled as sums over the seeds' planner calls
    for col in (
        "verifications_per_call",
        "policy_tokens_per_call",
        "verifier_prompt_tokens_per_call",
        "wall_s_per_call",
    ):
        if col in s:
            counts[col] = [round(s[col] * calls, 2), calls]
    success = rec["episode_success"][read]
    out = {
        "success": float(s["success"]),
        "episodes": int(s["episodes"]),
        "episode_success": success,
        "counts": counts,
        "subsets": {k: float(v["success_rate"]) for k, v in (inter.get("per_subset") or {}).items()},
    }
    if rec.get("episode_subset"):  # recorded since the VeGAS study; an older run pairs overall only
        out["episode_subset"] = {e: rec["episode_subset"][e] for e in success}
    return out


read_bon.file = "bon.details.json"  # type: ignore[attr-defined]
READERS.register("bon")(read_bon)


# --- sections ---


def _per_seed(ctx: Any, arm: str, mode: str, key: str) -> dict[str, Any]:
    """``{seed: bon.details.json[key]}`` of the ``bon`` run that plays ``arm``'s outcome ``mode``, for each seed
    whose run finished and recorded ``key``."""
    out = {}
    for seed in ctx.seeds:
        f = ctx.outcome_file(arm, mode, seed)
        if f.is_file() and (v := json.loads(f.read_text("utf-8")).get(key)):
            out[str(seed)] = v
    return out


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    per = {s: v for p in parts for s, v in p["per_seed"].items()}
    return {"arm": parts[0]["arm"], "per_seed": {s: per[s] for s in sorted(per, key=int)}}


def bon_coverage(ctx: Any, arm: str, mode: str = "greedy") -> dict[str, Any]:
    """Per seed, the coverage of the greedy run's states (``bon.details.json`` ``coverage``) of ``arm``."""
    return {"arm": arm, "per_seed": _per_seed(ctx, arm, mode, "coverage")}


def _render_coverage(d: dict[str, Any]) -> str:
    per = d["per_seed"]
    ks = sorted({k for c in per.values() for k in c.get("coverage_at") or {}}, key=int)
    lines = [
        f"Candidate coverage on the greedy run's own states (`{d['arm']}`): greedy's oracle-correct first-action "
        "rate, coverage@k (planner calls with an oracle-correct first action among the first k candidates) and "
        "headroom@4 (coverage@4 − greedy), in %.",
        "",
        "| seed | planner calls | greedy correct | " + " | ".join(f"coverage@{k}" for k in ks) + " | headroom@4 |",
        "|---|---:|---:|" + "---:|" * len(ks) + "---:|",
    ]
    pct = lambda x, sign="": "–" if x is None else f"{100 * x:{sign}.1f}"  # noqa: E731
    for s, c in per.items():
        cov = c.get("coverage_at") or {}
        cells = [str(c.get("planner_calls", "–")), pct(c.get("greedy_correct_rate"))]
        cells += [pct(cov.get(k)) for k in ks] + [pct(c.get("headroom_at_4"), "+")]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


section("bon_coverage", _merge, _render_coverage)(bon_coverage)


def bon_live_auroc(ctx: Any, arm: str, mode: str = "greedy") -> dict[str, Any]:
    """Per seed, each verifier's scores on the greedy run's live candidates (``bon.details.json`` ``live_auroc``:
    items, positives, AUROC, balanced accuracy) of ``arm``."""
    return {"arm": arm, "per_seed": _per_seed(ctx, arm, mode, "live_auroc")}


def _render_auroc(d: dict[str, Any]) -> str:
    per = d["per_seed"]
    verifiers = list(dict.fromkeys(v for r in per.values() for v in r))
    lines = [
        f"Each verifier's AUROC on the policy's own live candidates (`{d['arm']}`; oracle-labelled first actions of "
        "the greedy run's states), per seed:",
        "",
        "| verifier | live AUROC per seed | mean |",
        "|---|---|---:|",
    ]
    for v in verifiers:
        cells, vals = [], []
        for s, r in per.items():
            a = (r.get(v) or {}).get("auroc")
            if a is None:
                continue
            vals.append(a)
            items = r[v].get("items")
            cells.append(f"s{s} {a:.3f}" + ("" if items is None else f" ({items} items)"))
        mean = f"{sum(vals) / len(vals):.3f}" if vals else "–"
        lines.append(f"| {v} | {', '.join(cells) or '–'} | {mean} |")
    return "\n".join(lines) + "\n"


section("bon_live_auroc", _merge, _render_auroc)(bon_live_auroc)


def _calls_file(ctx: Any, arm: str, mode: str, seed: int) -> Path:
    """The per-call table of the ``bon`` run that plays ``arm``'s ``mode`` for one seed (next to its metrics)."""
    return ctx.outcome_file(arm, mode, seed).parent.parent / "reports" / "bon_calls.csv"


def bon_within_call(ctx: Any, arm: str, mode: str = "greedy", reps: int = 1000) -> dict[str, Any]:
    """Where Best-of-N acts (``vegas/calls.py``): per seed, the ``bon`` run's ``within_call`` record; pooled over
    the seeds, the same metrics recomputed from the seeds' per-call tables (``reports/bon_calls.csv``, calls kept
    apart per seed), bootstrap intervals over the pooled calls, when every seed's table is there."""
    from embodied_rft.vegas.calls import read_table, within_call

    per = _per_seed(ctx, arm, mode, "within_call")
    out: dict[str, Any] = {"arm": arm, "per_seed": per, "pooled": None}
    files = {s: _calls_file(ctx, arm, mode, s) for s in ctx.seeds if str(s) in per}
    if not files or not all(f.is_file() for f in files.values()):
        return out
    rows, verifiers, weight = [], None, 0.0
    for s, f in files.items():
        got = read_table(f)
        cols = {k[2:] for r in got[:1] for k in r if k.startswith("p_")}
        verifiers = cols if verifiers is None else verifiers & cols
        cfg = json.loads(ctx.outcome_file(arm, mode, s).read_text("utf-8")).get("config") or {}
        weight = float(cfg.get("prior_weight") or 0.0)
        rows += [{**r, "episode_id": f"s{s}/{r['episode_id']}"} for r in got]
    vs = sorted(verifiers or ())
    out["pooled"] = within_call(rows, vs, {v: weight for v in vs} if weight else {}, reps=reps, seed=0)
    out["pooled_seeds"] = sorted(files, key=int)
    return out


def _merge_within(parts: list[dict[str, Any]]) -> dict[str, Any]:
    # the pooled intervals need every seed's per-call table: a merged table keeps the per-seed records only
    return {**_merge(parts), "pooled": None}


def _render_within(d: dict[str, Any]) -> str:
    from embodied_rft.vegas.report import render_within_call

    if d.get("pooled"):
        seeds = ", ".join(str(s) for s in d.get("pooled_seeds", []))
        head = f"Pooled over seeds {seeds} (`{d['arm']}`; each seed's calls kept apart), symbolic-simulator proxy:"
        lines = [head, "", *render_within_call(d["pooled"])[1:]]
    else:
        lines = [f"Within-call metrics per seed (`{d['arm']}`): the pooled figures need every seed's per-call table."]
    lines += ["", "Per seed, replanning calls (where `bon.trigger: replan` selects):", ""]
    lines += ["| seed | verifier | within-call AUROC | top-1 (%) | value over one sample (points) |"]
    lines += ["|---|---|---:|---:|---:|"]
    for s, w in d["per_seed"].items():
        e = w.get("replan") or {}
        for v, a in (e.get("auroc") or {}).items():
            t = (e.get("top1") or {}).get(v) or {}
            val = (e.get("value_over_sample") or {}).get(v) or {}
            av, tv, vv = a.get("value"), t.get("value"), val.get("value")
            lines.append(
                f"| {s} | {v} | {'–' if av is None else f'{av:.3f}'} | {'–' if tv is None else f'{100 * tv:.1f}'} | "
                f"{'–' if vv is None else f'{100 * vv:+.1f}'} |"
            )
    return "\n".join(lines) + "\n"


section("bon_within_call", _merge_within, _render_within)(bon_within_call)


# --- checks ---


@CHECKS.register("within_call_auroc")
def within_call_auroc(
    table: dict[str, Any],
    verifier: str,
    section: str = "bon_within_call",
    part: str = "replan",
    at_least: float | None = None,
    lower_at_least: float | None = None,
    at_most: float | None = None,
) -> tuple[bool | None, dict[str, Any]]:
    """The pooled within-call AUROC of ``verifier`` on ``part``'s mixed calls is at least ``at_least`` (and its
    bootstrap lower bound at least ``lower_at_least``) or at most ``at_most``; None without pooled figures."""
    pooled = (table["sections"].get(section) or {}).get("pooled")
    a = (((pooled or {}).get(part) or {}).get("auroc") or {}).get(verifier)
    if not a or a.get("value") is None:
        return None, {}
    lo, hi = a.get("ci95") or (None, None)
    holds = True
    if at_least is not None:
        holds &= a["value"] >= at_least
    if lower_at_least is not None:
        holds &= lo is not None and lo >= lower_at_least
    if at_most is not None:
        holds &= a["value"] <= at_most
    return holds, {"auroc": round(a["value"], 4), "ci95": [lo, hi], "mixed_calls": pooled[part]["mixed_calls"]}


@CHECKS.register("coverage_headroom")
def coverage_headroom(
    table: dict[str, Any], section: str = "bon_coverage", k: int = 4, points: float = 10.0
) -> tuple[bool | None, dict[str, Any]]:
    """Coverage@``k`` of the greedy run's states is at least ``points`` above greedy's oracle-correct rate on every
    seed (the issue's "headroom first"); None when no seed has coverage@``k``."""
    per = (table["sections"].get(section) or {}).get("per_seed") or {}
    heads = []
    for c in per.values():
        at = (c.get("coverage_at") or {}).get(str(k))
        if at is None or c.get("greedy_correct_rate") is None:
            return None, {}
        heads.append(round(at - c["greedy_correct_rate"], 4))
    if not heads:
        return None, {}
    return all(h >= points / 100 for h in heads), {f"headroom_at_{k}_pts": [round(100 * h, 2) for h in heads]}


# --- tasks ---


@TASKS.register("bon_prerequisites")
def bon_prerequisites(ctx: Any) -> dict[str, Any]:
    """Refuse the study (:class:`StudyError`, one line) when a ``bon`` run of the arm would find the zero-shot
    SmolLM2 verifier missing (module docstring); adds no DVC stage."""
    from embodied_rft.config import ConfigError
    from embodied_rft.params import compose, section_configs
    from embodied_rft.study.layout import eval_runs
    from embodied_rft.vegas.bon import check_models

    s, arm = ctx.study, ctx.arm
    if arm not in s.run:
        return {}
    ovs = [*s.overrides, *(o for a in reversed(s.chain(arm)) for o in s.arms[a].overrides)]
    for folder, es in eval_runs(s, arm).items():
        if es[0].stage != "bon":
            continue
        # the arm's config as the generator composed it, when it did (``Generator.files``) and the run adds nothing
        cfg = None if es[0].overrides else ctx.gen.configs.get(arm)
        try:
            cfg = cfg or compose(ctx.gen.conf_dir, [*ovs, *es[0].overrides])
            check_models(section_configs(cfg)["bon"], {}, checkpoints=False)
        except ConfigError as exc:
            raise StudyError(f"{s.file}: arm {arm!r}, run {folder!r}: {exc}") from None
    return {}
