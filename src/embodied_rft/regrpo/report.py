"""The ReGRPO comparison table (``metrics/regrpo.json``, ``reports/regrpo.md``; docs/regrpo.md §7) from each arm's
evaluation over seeds.

Input: per seed, per arm (``plain``, ``rot``, ``shuffled``: the SFT arms, and ``*_x2``: each given a second SFT
cycle; ``paper``, ``regrpo``, ``regrpo_eta0``, ``regrpo_anchored`` — with the constructed group members of the
released trainer, ``grpo.anchors`` —, ``regrpo_offline`` and the ``*_steps`` arms — the clean decomposed steps among
the prompts —: GRPO from the RoT-SFT policy, or from ``rot_x2`` for the arms of :data:`RL_STARTS`) and per evaluation
mode (``free``, ``regrpo``: ``evaluate.reflection``), the record
``metrics/eval.details.json`` of that evaluation (one model in it), and per arm and split the held-out per-step
reflection counts (``regrpo/steps.py``: ``metrics/steps-<split>.json``), and per SFT arm its answers to the RoT
engine's near-misses on valid_unseen's episodes (``metrics/heldout-rot-valid_unseen.json``). Output: success, the
behaviour columns (repeat-after-failure, recovered-next-call: executes / oracle-correct) and the reflection counts
per seed and pooled (a pooled rate is the pooled numerator over the pooled denominator); each comparison paired on
the same episodes (exact McNemar per seed and over the pooled discordant counts); the held-out per-step reflection
per arm and the η pairs' ratio; the SFT arms' repeats and right first actions on the held-out near-misses; and the
issue's checks. The η check reads the held-out steps after a successful action (the calls where a reflection is not
needed), not the interactive calls after one: in EB's loop those are starts and plan-exhausted calls, silent failures (docs/regrpo.md §7). A symbolic-simulator proxy throughout.
"""

from __future__ import annotations

from typing import Any

from ..evaluate.aggregate import mcnemar_exact, paired
from .steps import plan_rates, with_rates

# the cold-start SFT arms (tools/regrpo_seeds.py); `bare` (no reflection on the recovery samples at all) is not run
# by default: the second baseline of the SFT behaviour clauses, beside the plain replanning reasoning
SFT_ARMS = ("plain", "rot", "shuffled", "bare")
# an SFT arm given a second cycle of the same budget from its own first-cycle model -> that arm
CONTINUED_ARMS = {"plain_x2": "plain", "rot_x2": "rot", "shuffled_x2": "shuffled"}
GRPO_ARMS = (
    "paper",
    "regrpo",
    "regrpo_eta0",
    "regrpo_anchored",
    "regrpo_offline",
    "paper_steps",
    "regrpo_steps",
    "regrpo_steps_eta0",
    "regrpo_steps_kept",
    "regrpo_steps_kept_x2",
    "regrpo_steps_eta0_x2",
    "regrpo_steps_kept_x2_nokl",
    "regrpo_steps_eta0_x2_nokl",
    "paper_steps_x2",
    "paper_steps_x2_nokl",
)
# a GRPO arm -> the SFT arm whose model it starts from, where not `rot` (the RoT-SFT policy): the `*_x2` RL arms (and
# their `_nokl` variants) start from the RoT policy after its second SFT cycle
RL_STARTS = {arm: "rot_x2" for arm in GRPO_ARMS if "_x2" in arm}
# (η = 0 arm, η = 0.1 arm): the η check's pairs, on the held-out per-step calls. regrpo_steps_kept differs from
# regrpo_steps only in keeping all-success groups; at η = 0 their rewards are equal and the zero-variance drop removes
# them, so its η = 0 arm is regrpo_steps_eta0 itself
ETA_PAIRS = (
    ("regrpo_eta0", "regrpo"),
    ("regrpo_steps_eta0", "regrpo_steps"),
    ("regrpo_steps_eta0", "regrpo_steps_kept"),
    ("regrpo_steps_eta0_x2", "regrpo_steps_kept_x2"),
    ("regrpo_steps_eta0_x2_nokl", "regrpo_steps_kept_x2_nokl"),
)
# (ReGRPO arm, paper-reward arm on the same prompts from the same start): the RL check's pairs
RL_PAIRS = (
    ("regrpo", "paper"),
    ("regrpo_anchored", "paper"),
    ("regrpo_steps_kept_x2", "paper_steps_x2"),
    ("regrpo_steps_kept_x2_nokl", "paper_steps_x2_nokl"),
)
# the held-out per-step samples measured (regrpo/steps.py): valid_seen's to choose a recipe on, valid_unseen's to report
STEP_SPLITS = ("valid_seen", "valid_unseen")
# the record key of an SFT arm's greedy answers to the RoT engine's near-misses on valid_unseen's episodes
# (regrpo/steps.py --rot-episodes): failures the policy did not make itself
HELDOUT_ROT = "heldout_rot"
# (a, b, mode): b against a on the same episodes, both in that evaluation mode; or (a, b, mode of a, mode of b): each
# arm in its own mode, e.g. the RoT-SFT policy under ReGRPO's trigger against plain recovery SFT answering freely
COMPARISONS: tuple[tuple[str, ...], ...] = (
    ("plain", "rot", "free"),
    ("plain", "rot", "regrpo"),
    ("plain", "rot", "free", "regrpo"),
    ("plain", "shuffled", "free"),
    ("shuffled", "rot", "free"),
    ("plain_x2", "rot_x2", "free"),
    ("plain_x2", "shuffled_x2", "free"),
    ("shuffled_x2", "rot_x2", "free"),
    ("bare", "rot", "free"),
    ("bare", "shuffled", "free"),
    ("bare", "plain", "free"),
    ("rot", "rot_x2", "free"),
    ("plain", "plain_x2", "free"),
    ("paper", "regrpo", "regrpo"),
    ("paper", "regrpo", "free"),
    ("regrpo_eta0", "regrpo", "free"),
    ("paper", "regrpo_anchored", "regrpo"),
    ("paper", "regrpo_anchored", "free"),
    ("regrpo", "regrpo_anchored", "free"),
    ("paper", "regrpo_offline", "regrpo"),
    ("regrpo_offline", "regrpo", "free"),
    ("paper_steps", "regrpo_steps", "regrpo"),
    ("paper_steps", "regrpo_steps", "free"),
    ("regrpo_steps_eta0", "regrpo_steps", "free"),
    ("regrpo", "regrpo_steps", "regrpo"),
    ("regrpo_steps_eta0", "regrpo_steps_kept", "free"),
    ("regrpo_steps", "regrpo_steps_kept", "regrpo"),
    ("paper_steps", "regrpo_steps_kept", "regrpo"),
    ("regrpo_steps_eta0_x2", "regrpo_steps_kept_x2", "regrpo"),
    ("regrpo_steps_kept", "regrpo_steps_kept_x2", "regrpo"),
    ("regrpo_steps_eta0_x2_nokl", "regrpo_steps_kept_x2_nokl", "regrpo"),
    ("regrpo_steps_kept_x2", "regrpo_steps_kept_x2_nokl", "regrpo"),
    ("paper_steps_x2", "regrpo_steps_kept_x2", "regrpo"),
    ("paper_steps_x2_nokl", "regrpo_steps_kept_x2_nokl", "regrpo"),
)
RATES = {  # column -> (numerator source, denominator key in the interactive summary)
    "repeat_after_failure_rate": "failures_followed",
    "recovered_next_call_rate": "recovery_calls",
    "recovered_next_call_correct_rate": "recovery_calls",
}
LABEL = "symbolic-simulator proxy, not EmbodiedBench numbers"


def _model(record: dict) -> dict:
    models = record.get("models") or {}
    name = next(k for k, v in models.items() if not v.get("reference"))
    return models[name]


def arm_row(record: dict) -> dict[str, Any]:
    """Success, behaviour counts and reflection counts of one evaluation record."""
    m = _model(record)
    o = m["interactive"]["overall"]
    row: dict[str, Any] = {"episodes": o["episodes"], "success": o["success_rate"], "success_by_episode": None}
    for col, den in RATES.items():
        d, r = o.get(den) or 0, o.get(col)
        row[col] = r
        row[f"{col}_counts"] = [round((r or 0.0) * d), d]
    refl = o.get("reflection") or {}
    for k in ("calls_after_success", "spontaneous_tokens_after_success", "final_reflection_tokens", "calls"):
        row[k] = refl.get(k)
    row["trigger_rate"] = refl.get("trigger_rate")
    row["generated_tokens_per_call"] = refl.get("generated_tokens_per_call")
    row["success_by_episode"] = m["episode_success"]
    return row


def _pool_rate(rows: list[dict], col: str) -> float | None:
    num = sum(r[f"{col}_counts"][0] for r in rows)
    den = sum(r[f"{col}_counts"][1] for r in rows)
    return round(num / den, 4) if den else None


def _tokens_after_success(rows: list[dict]) -> float | None:
    calls = sum(r["calls_after_success"] or 0 for r in rows)
    return round(sum(r["spontaneous_tokens_after_success"] or 0 for r in rows) / calls, 4) if calls else None


def _steps_pooled(results: list[dict]) -> dict[str, dict[str, Any]]:
    """Per kind of call, the held-out per-step counts (``regrpo/steps.py``) summed over seeds, rates recomputed."""
    out: dict[str, dict[str, Any]] = {}
    for res in results:
        for kind, d in res["kinds"].items():
            o = out.setdefault(kind, {"calls": 0, "reflecting": 0, "reflection_tokens": 0})
            for k in o:
                o[k] += d[k]
    return {kind: with_rates(o) for kind, o in out.items()}


def _plans_pooled(results: list[dict]) -> dict[str, dict[str, Any]]:
    """Per kind of call, the plan counts of held-out answers (``regrpo/steps.py`` ``plans``) summed over seeds."""
    out: dict[str, dict[str, Any]] = {}
    for res in results:
        for kind, d in (res.get("plans") or {}).items():
            o = out.setdefault(kind, {"calls": 0, "first_correct": 0, "repeat": 0})
            for k in o:
                o[k] += d[k]
    return {kind: plan_rates(o) for kind, o in out.items()}


def _steps(records: dict[int, dict], seeds: list[int], split: str) -> dict[str, Any]:
    """Per arm measured on ``split``'s held-out steps: the seeds, each seed's and the pooled reflection counts."""
    key = f"steps:{split}"
    out: dict[str, Any] = {}
    for arm in sorted({k[0] for r in records.values() for k in r if k[1] == key}):
        have = [s for s in seeds if (arm, key) in records[s]]
        out[arm] = {
            "seeds": have,
            "per_seed": {s: records[s][(arm, key)]["kinds"] for s in have},
            "pooled": _steps_pooled([records[s][(arm, key)] for s in have]),
        }
    return out


def _steps_gap(records: dict[int, dict], seeds: list[int], split: str, a: str, b: str) -> dict[str, Any] | None:
    """Reflection tokens per held-out call after a successful step (and the reflecting share) of arms a and b on
    ``split``, pooled over the seeds where both were measured; None when there are none."""
    key = f"steps:{split}"
    both = [s for s in seeds if (a, key) in records[s] and (b, key) in records[s]]
    pa = _steps_pooled([records[s][(a, key)] for s in both]).get("after_success")
    pb = _steps_pooled([records[s][(b, key)] for s in both]).get("after_success")
    if pa is None or pb is None:
        return None
    return {
        "seeds": both,
        "tokens_per_call": [pa["tokens_per_call"], pb["tokens_per_call"]],
        "reflection_rate": [pa["reflection_rate"], pb["reflection_rate"]],
    }


def summarise(records: dict[int, dict[tuple[str, str], dict]]) -> dict[str, Any]:
    """``records[seed][(arm, mode)]`` = eval.details.json, ``records[seed][(arm, "steps:<split>")]`` = the arm's
    held-out per-step reflection counts on that split (``regrpo/steps.py``) -> the summary (module docstring)."""
    seeds = sorted(records)
    steps = {split: st for split in STEP_SPLITS if (st := _steps(records, seeds, split))}
    keys = sorted({k for r in records.values() for k in r if not k[1].startswith("steps:") and k[1] != HELDOUT_ROT})
    arms: dict[str, Any] = {}
    # the seeds an arm has: arms may be run on different seeds (the table names the seed of every figure)
    rows = {k: [{"seed": s, **arm_row(records[s][k])} for s in seeds if k in records[s]] for k in keys}
    for (arm, mode), rs in rows.items():
        arms[f"{arm}/{mode}"] = {
            "per_seed": [{k: v for k, v in r.items() if k != "success_by_episode"} for r in rs],
            "success_mean": round(sum(r["success"] for r in rs) / len(rs), 2),
            **{f"{col}_pooled": _pool_rate(rs, col) for col in RATES},
            "reflection_tokens_per_call_after_success_pooled": _tokens_after_success(rs),
        }
    comparisons: dict[str, Any] = {}
    for a, b, *modes in COMPARISONS:
        ka, kb = (a, modes[0]), (b, modes[-1])
        both = [s for s in seeds if ka in records[s] and kb in records[s]]
        if not both:
            continue
        per = [
            paired(arm_row(records[s][ka])["success_by_episode"], arm_row(records[s][kb])["success_by_episode"])
            for s in both
        ]
        only_a, only_b = sum(c["only_a"] for c in per), sum(c["only_b"] for c in per)
        n = sum(c["episodes"] for c in per)
        ra, rb = [arm_row(records[s][ka]) for s in both], [arm_row(records[s][kb]) for s in both]
        diff = {}
        for col in RATES:
            pa, pb = _pool_rate(ra, col), _pool_rate(rb, col)
            diff[col] = round(100 * (pb - pa), 2) if pa is not None and pb is not None else None
        name = f"{b} vs {a} ({modes[0]})" if len(modes) == 1 else f"{b} ({modes[1]}) vs {a} ({modes[0]})"
        comparisons[name] = {
            "seeds": both,
            "success_gap_per_seed": [c["gap"] for c in per],
            # from the discordant counts at the pooled p's precision (paired() keeps 4 decimals)
            "p_mcnemar_per_seed": [round(mcnemar_exact(c["only_a"], c["only_b"]), 6) for c in per],
            "episodes": n,
            "only_a": only_a,
            "only_b": only_b,
            "success_gap_pooled": round(100 * (only_b - only_a) / n, 2) if n else 0.0,
            "p_mcnemar_pooled": round(mcnemar_exact(only_a, only_b), 6),
            "behaviour_gap_pts": diff,
            "reflection_tokens_after_success": [_tokens_after_success(ra), _tokens_after_success(rb)],
        }
    near: dict[str, Any] = {}
    for arm in sorted({k[0] for r in records.values() for k in r if k[1] == HELDOUT_ROT}):
        have = [s for s in seeds if (arm, HELDOUT_ROT) in records[s]]
        near[arm] = {"seeds": have, "pooled": _plans_pooled([records[s][(arm, HELDOUT_ROT)] for s in have])}
    eta = {
        f"{b} vs {a} (steps, {split})": g
        for split in STEP_SPLITS
        for a, b in ETA_PAIRS
        if (g := _steps_gap(records, seeds, split, a, b))
    }
    return {
        "label": LABEL,
        "seeds": seeds,
        "arms": arms,
        "steps": steps,
        "heldout_rot": near,
        "comparisons": comparisons,
        "eta": eta,
        "checks": checks(comparisons, eta),
    }


def checks(c: dict[str, Any], eta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The issue's thresholds (docs/regrpo.md §7); a check whose runs are missing is left out."""
    out: dict[str, Any] = {}
    # (suffix, baseline, key tag): the SFT budget of the recipe and the arms given a second cycle of it against the
    # plain replanning reasoning, and the recipe's budget against no reflection at all (`bare`)
    for x, base, tag in (("", "plain", ""), ("_x2", "plain", ""), ("", "bare", "_vs_bare")):
        rot, sh = c.get(f"rot{x} vs {base}{x} (free)"), c.get(f"shuffled{x} vs {base}{x} (free)")
        if rot:
            g = rot["behaviour_gap_pts"]
            out[f"rot{x}{tag}_recovered_next_call_+10pts"] = (g["recovered_next_call_rate"] or 0) >= 10
            out[f"rot{x}{tag}_repeat_after_failure_-10pts"] = (g["repeat_after_failure_rate"] or 0) <= -10
            out[f"rot{x}{tag}_success_not_lower_than_3pts"] = rot["success_gap_pooled"] >= -3
        if rot and sh:
            gr = rot["behaviour_gap_pts"]["recovered_next_call_rate"] or 0
            gs = sh["behaviour_gap_pts"]["recovered_next_call_rate"] or 0
            out[f"shuffled{x}{tag}_does_not_reproduce_the_gain"] = gr > 0 and gs < 0.5 * gr
    # sampled groups (the paper's), constructed members (the code's); the η check's no-KL recipe against the paper
    # reward on its prompts, from its start
    for arm, paper in RL_PAIRS:
        rl = c.get(f"{arm} vs {paper} (regrpo)")
        if rl:
            rec = rl["behaviour_gap_pts"]["recovered_next_call_rate"] or 0
            out[f"{arm}_success_+3pts_or_recovery_+5pts"] = rl["success_gap_pooled"] >= 3 or rec >= 5
    for a, b in ETA_PAIRS:  # on the held-out per-step calls after a successful action (regrpo/steps.py)
        g = (eta or {}).get(f"{b} vs {a} (steps, valid_unseen)")  # the report's split, as every check here
        if g:
            t0, t1 = g["tokens_per_call"]
            out[f"{b}_eta_reflection_tokens_after_success_<=20pct_of_eta0"] = None if not t0 else t1 <= 0.2 * t0
    return out


def _p(p: float) -> str:
    """A p-value as the table prints it: every p of the summary is rounded to 6 decimals, so 0 means below 1e-6."""
    return "<1e-6" if p < 1e-6 else f"{p:.3g}"


def render(summary: dict[str, Any]) -> str:
    """The summary as Markdown."""
    pct = lambda x: "–" if x is None else f"{100 * x:.1f}"  # noqa: E731
    lines = [
        f"# ReGRPO over seeds {summary['seeds']} ({summary['label']})",
        "",
        "Success (%), behaviour columns pooled over seeds (%: repeat-after-failure, recovered next call executes / "
        "is oracle-correct) and spontaneous reflection tokens per interactive call after a successful action (an "
        "episode's start, or a plan that ran out short of the goal); `free` = the policy's own answers, `regrpo` = "
        "under ReGRPO's trigger (docs/regrpo.md).",
        "",
        "| arm / mode | success per seed | mean | repeat after failure | recovered next call | recovered correct "
        "| refl. tokens after success (starts, plans run out) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for k, a in summary["arms"].items():
        per = ", ".join(f"s{r['seed']} {r['success']:.1f}" for r in a["per_seed"])
        t = a["reflection_tokens_per_call_after_success_pooled"]
        lines.append(
            f"| {k} | {per} | {a['success_mean']:.1f} | {pct(a['repeat_after_failure_rate_pooled'])} | "
            f"{pct(a['recovered_next_call_rate_pooled'])} | {pct(a['recovered_next_call_correct_rate_pooled'])} | "
            f"{'–' if t is None else f'{t:.2f}'} |"
        )
    lines += [
        "",
        "Paired on the same episodes: success gap per seed (exact McNemar p), pooled discordant episodes and p; "
        "behaviour gaps in points (pooled rates).",
        "",
        "| comparison | gap per seed (p) | only first | only second | pooled gap | pooled p | repeat Δ | recovered Δ |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for k, c in summary["comparisons"].items():
        per = ", ".join(
            f"s{s} {g:+.1f} ({_p(p)})"
            for s, g, p in zip(c["seeds"], c["success_gap_per_seed"], c["p_mcnemar_per_seed"], strict=True)
        )
        g = c["behaviour_gap_pts"]
        fmt = lambda x: "–" if x is None else f"{x:+.1f}"  # noqa: E731
        lines.append(
            f"| {k} | {per} | {c['only_a']} | {c['only_b']} | {c['success_gap_pooled']:+.1f} | "
            f"{_p(c['p_mcnemar_pooled'])} | {fmt(g['repeat_after_failure_rate'])} | "
            f"{fmt(g['recovered_next_call_rate'])} |"
        )
    if summary.get("steps"):
        lines += [
            "",
            "Held-out per-step calls (the decomposed samples of a split's episodes: each trajectory's first step and "
            "the steps after a successful action on the expert's path, where a reflection is not needed; greedy; "
            "docs/regrpo.md §7): answers that reflect (%) and reflection tokens per call, pooled over the seeds "
            "measured.",
            "",
            "| split | arm | seeds | first step: reflect | after success: reflect | after success: tokens per call |",
            "|---|---|---|---:|---:|---:|",
        ]
        for split, arms in summary["steps"].items():
            for arm, d in arms.items():
                f, a = d["pooled"].get("first"), d["pooled"].get("after_success")
                tok = "–" if a is None else f"{a['tokens_per_call']:.2f}"
                lines.append(
                    f"| {split} | {arm} | {', '.join(f's{s}' for s in d['seeds'])} | "
                    f"{pct(f and f['reflection_rate'])} | {pct(a and a['reflection_rate'])} | {tok} |"
                )
    if summary.get("heldout_rot"):
        lines += [
            "",
            "The RoT engine's near-misses on valid_unseen's episodes (two per trajectory; failures the policy did not "
            "make itself; greedy; docs/regrpo.md §8), pooled over the seeds measured: after a rejected action, answers "
            "that repeat it and answers whose first action is the corrected plan's (%); after a silent one (it "
            "executed), answers whose first action is right (%).",
            "",
            "| arm | seeds | rejected: calls | repeat | first action right | silent: calls | first action right |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for arm, d in summary["heldout_rot"].items():
            f, a = d["pooled"].get("after_failure") or {}, d["pooled"].get("after_success") or {}
            lines.append(
                f"| {arm} | {', '.join(f's{s}' for s in d['seeds'])} | {f.get('calls', 0)} | "
                f"{pct(f.get('repeat_rate'))} | {pct(f.get('first_correct_rate'))} | {a.get('calls', 0)} | "
                f"{pct(a.get('first_correct_rate'))} |"
            )
    for k, g in (summary.get("eta") or {}).items():
        (t0, t1), seeds = g["tokens_per_call"], ", ".join(f"s{s}" for s in g["seeds"])
        share = "–" if not t0 else f"{100 * t1 / t0:.0f}%"
        lines.append(f"\n{k} over {seeds}: {t1:.2f} vs {t0:.2f} reflection tokens per call after success ({share}).")
    lines += ["", "| check | holds |", "|---|---|"]
    lines += [f"| {k} | {'–' if v is None else ('yes' if v else 'no')} |" for k, v in summary["checks"].items()]
    return "\n".join(lines) + "\n"


__all__ = [
    "COMPARISONS",
    "CONTINUED_ARMS",
    "ETA_PAIRS",
    "HELDOUT_ROT",
    "RL_STARTS",
    "GRPO_ARMS",
    "SFT_ARMS",
    "STEP_SPLITS",
    "arm_row",
    "checks",
    "render",
    "summarise",
]
