"""The ReGRPO comparison table (``metrics/regrpo.json``, ``reports/regrpo.md``; docs/regrpo.md §7) from each arm's
evaluation over seeds.

Input: per seed, per arm (``plain``, ``rot``, ``shuffled``: the SFT arms; ``paper``, ``regrpo``, ``regrpo_eta0``,
``regrpo_anchored`` — with the constructed group members of the released trainer, ``grpo.anchors`` —: GRPO from the
RoT-SFT policy) and per evaluation mode (``free``, ``regrpo``: ``evaluate.reflection``), the record
``metrics/eval.details.json`` of that evaluation (one model in it). Output: success, the behaviour columns
(repeat-after-failure, recovered-next-call: executes / oracle-correct) and the reflection counts per seed and
pooled (a pooled rate is the pooled numerator over the pooled denominator); each comparison paired on the same
episodes (exact McNemar per seed and over the pooled discordant counts); and the issue's checks. A
symbolic-simulator proxy throughout.
"""

from __future__ import annotations

from typing import Any

from ..evaluate.aggregate import mcnemar_exact, paired

SFT_ARMS = ("plain", "rot", "shuffled")
GRPO_ARMS = ("paper", "regrpo", "regrpo_eta0", "regrpo_anchored", "regrpo_offline")
# (a, b, mode): b against a on the same episodes
COMPARISONS = (
    ("plain", "rot", "free"),
    ("plain", "shuffled", "free"),
    ("shuffled", "rot", "free"),
    ("paper", "regrpo", "regrpo"),
    ("paper", "regrpo", "free"),
    ("regrpo_eta0", "regrpo", "free"),
    ("paper", "regrpo_anchored", "regrpo"),
    ("paper", "regrpo_anchored", "free"),
    ("regrpo", "regrpo_anchored", "free"),
    ("paper", "regrpo_offline", "regrpo"),
    ("regrpo_offline", "regrpo", "free"),
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


def summarise(records: dict[int, dict[tuple[str, str], dict]]) -> dict[str, Any]:
    """``records[seed][(arm, mode)]`` = eval.details.json -> the summary (module docstring)."""
    seeds = sorted(records)
    keys = sorted({k for r in records.values() for k in r})
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
    for a, b, mode in COMPARISONS:
        ka, kb = (a, mode), (b, mode)
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
        comparisons[f"{b} vs {a} ({mode})"] = {
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
    return {"label": LABEL, "seeds": seeds, "arms": arms, "comparisons": comparisons, "checks": checks(comparisons)}


def checks(c: dict[str, Any]) -> dict[str, Any]:
    """The issue's thresholds (docs/regrpo.md §7); a check whose runs are missing is left out."""
    out: dict[str, Any] = {}
    rot, sh = c.get("rot vs plain (free)"), c.get("shuffled vs plain (free)")
    if rot:
        g = rot["behaviour_gap_pts"]
        out["rot_recovered_next_call_+10pts"] = (g["recovered_next_call_rate"] or 0) >= 10
        out["rot_repeat_after_failure_-10pts"] = (g["repeat_after_failure_rate"] or 0) <= -10
        out["rot_success_not_lower_than_3pts"] = rot["success_gap_pooled"] >= -3
    if rot and sh:
        gr = rot["behaviour_gap_pts"]["recovered_next_call_rate"] or 0
        gs = sh["behaviour_gap_pts"]["recovered_next_call_rate"] or 0
        out["shuffled_does_not_reproduce_the_gain"] = gr > 0 and gs < 0.5 * gr
    for arm in ("regrpo", "regrpo_anchored"):  # sampled groups (the paper's), constructed members (the code's)
        rl = c.get(f"{arm} vs paper (regrpo)")
        if rl:
            rec = rl["behaviour_gap_pts"]["recovered_next_call_rate"] or 0
            out[f"{arm}_success_+3pts_or_recovery_+5pts"] = rl["success_gap_pooled"] >= 3 or rec >= 5
    eta = c.get("regrpo vs regrpo_eta0 (free)")
    if eta:
        t0, t1 = eta["reflection_tokens_after_success"]
        out["eta_reflection_tokens_after_success_<=20pct_of_eta0"] = None if not t0 else (t1 or 0) <= 0.2 * t0
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
        "is oracle-correct) and spontaneous reflection tokens per call after a successful action; `free` = the "
        "policy's own answers, `regrpo` = under ReGRPO's trigger (docs/regrpo.md).",
        "",
        "| arm / mode | success per seed | mean | repeat after failure | recovered next call | recovered correct "
        "| refl. tokens after success |",
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
    lines += ["", "| check | holds |", "|---|---|"]
    lines += [f"| {k} | {'–' if v is None else ('yes' if v else 'no')} |" for k, v in summary["checks"].items()]
    return "\n".join(lines) + "\n"


__all__ = ["COMPARISONS", "GRPO_ARMS", "SFT_ARMS", "arm_row", "checks", "render", "summarise"]
