"""A study's table: one schema for every study (docs/studies.md), built from the runs, merged over disjoint seeds,
rendered as Markdown.

``outcomes[<arm>/<mode>]``: ``per_seed`` rows as the stage's reader gives them (seed, success %, episodes, counts
``[numerator, denominator]`` per column, subsets), and from them ``success`` (mean, sample s.d., min, max),
``subsets`` (the same per subset) and ``counts_pooled`` (pooled numerator over pooled denominator).
``comparisons[<id>]``: outcome b against outcome a on the same episodes — the stored counts (``seeds``,
``success_gap_per_seed``, ``p_mcnemar_per_seed``, pooled ``only_a``/``only_b``/``episodes``) and what follows from
them (:func:`derive`: gap mean and s.d. over seeds, seeds with a positive gap, pooled gap, exact McNemar p, paired
Wald 95% interval, each count column pooled for a and b on the comparison's seeds). ``sections``: adapter parts.
``checks[<id>]``: each registered check's verdict and figures. Every pooled figure is a sum of counts the table keeps,
so :func:`merge` of tables of disjoint seeds equals the table of all their runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embodied_rft.core.stats import mcnemar_exact, mean_sd, paired, pooled_counts, spread
from embodied_rft.study.registry import CHECKS, READERS, SECTIONS
from embodied_rft.study.spec import Study

LABEL = "symbolic-simulator proxy, not EmbodiedBench numbers"
SCHEMA = 1


# --- reading the runs ---


def read_evaluate(path: Path, read: str) -> dict[str, Any]:
    """One model of an ``evaluate`` run (``eval.details.json``): success, episodes, per-episode success, the
    behaviour counts, the reflection tokens after a successful action (when the run counted them) and per-subset
    success."""
    rec = json.loads(path.read_text("utf-8"))
    m = (rec.get("models") or {}).get(read)
    if m is None:
        raise ValueError(f"{path}: no model {read!r} (has {', '.join(rec.get('models') or {}) or 'none'})")
    o = m["interactive"]["overall"]
    counts = {}
    for col, den in (
        ("repeat_after_failure_rate", "failures_followed"),
        ("recovered_next_call_rate", "recovery_calls"),
        ("recovered_next_call_correct_rate", "recovery_calls"),
    ):
        d = o.get(den) or 0
        counts[col] = [round((o.get(col) or 0.0) * d), d]
    refl = o.get("reflection") or {}
    if refl.get("calls_after_success") is not None:
        counts["reflection_tokens_after_success"] = [
            refl.get("spontaneous_tokens_after_success") or 0,
            refl["calls_after_success"],
        ]
    return {
        "success": float(o["success_rate"]),
        "episodes": int(o["episodes"]),
        "episode_success": m["episode_success"],
        "counts": counts,
        "subsets": {k: float(v["success_rate"]) for k, v in (m["interactive"].get("per_subset") or {}).items()},
    }


read_evaluate.file = "eval.details.json"  # type: ignore[attr-defined]
READERS.register("evaluate")(read_evaluate)


class RunContext:
    """Where a table finds one seed's files of an arm (for readers and sections)."""

    def __init__(self, study: Study, seeds: list[int], root: Path = Path(".")) -> None:
        self.study, self.seeds, self.root = study, seeds, root

    def arm_dir(self, arm: str, seed: int) -> Path:
        from embodied_rft.study.layout import arm_dir

        return self.root / arm_dir(self.study, arm, seed)

    def outcome_file(self, arm: str, mode: str, seed: int) -> Path:
        from embodied_rft.study.layout import outcome_file

        return self.root / outcome_file(self.study, arm, mode, seed)


def read_runs(ctx: RunContext) -> dict[int, dict[str, dict[str, Any]]]:
    """``{seed: {"<arm>/<mode>": outcome}}`` of every finished outcome (a missing file is left out)."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for seed in ctx.seeds:
        out[seed] = {}
        for arm, e in ctx.study.outcomes():
            f = ctx.outcome_file(arm, e.mode, seed)
            if f.exists():
                out[seed][f"{arm}/{e.mode}"] = READERS[e.reader_name](f, e.read)
    return out


# --- the table ---


def _outcome(rows: list[dict[str, Any]]) -> dict[str, Any]:
    rows = sorted(rows, key=lambda r: r["seed"])
    cols = sorted({c for r in rows for c in r.get("counts") or {}})
    subsets = sorted({k for r in rows for k in r.get("subsets") or {}})
    return {
        "per_seed": rows,
        "success": spread([r["success"] for r in rows]),
        "subsets": {k: spread([r["subsets"][k] for r in rows if k in (r.get("subsets") or {})]) for k in subsets},
        "counts_pooled": {c: _pooled_rate(rows, c) for c in cols},
    }


def _pooled_rate(rows: list[dict[str, Any]], col: str) -> float | None:
    num = sum((r.get("counts") or {}).get(col, [0, 0])[0] for r in rows)
    den = sum((r.get("counts") or {}).get(col, [0, 0])[1] for r in rows)
    return round(num / den, 4) if den else None


def derive(c: dict[str, Any], outcomes: dict[str, Any]) -> dict[str, Any]:
    """A comparison's derived fields from its stored counts (and both outcomes' per-seed rows)."""
    m, sd = mean_sd(c["success_gap_per_seed"])
    seeds = set(c["seeds"])
    ra = [r for r in outcomes[c["a"]]["per_seed"] if r["seed"] in seeds]
    rb = [r for r in outcomes[c["b"]]["per_seed"] if r["seed"] in seeds]
    cols = sorted({k for r in ra + rb for k in r.get("counts") or {}})
    return {
        "a": c["a"],
        "b": c["b"],
        "subset": c.get("subset"),
        "seeds": c["seeds"],
        "success_gap_per_seed": c["success_gap_per_seed"],
        "p_mcnemar_per_seed": c.get("p_mcnemar_per_seed"),
        "gap_mean": m,
        "gap_sd": sd,
        "positive_seeds": sum(g > 0 for g in c["success_gap_per_seed"]),
        **pooled_counts(c["only_a"], c["only_b"], c["episodes"]),
        "counts": {k: [_pooled_rate(ra, k), _pooled_rate(rb, k)] for k in cols} if c.get("subset") is None else {},
    }


def _subset_only(success: dict[str, bool], subsets: dict[str, str] | None, subset: str | None) -> dict[str, bool]:
    if subset is None:
        return success
    if not subsets:
        raise ValueError(f"comparison on subset {subset!r}: the outcome's reader gives no per-episode subsets")
    return {k: v for k, v in success.items() if subsets.get(k) == subset}


def build(study: Study, runs: dict[int, dict[str, dict[str, Any]]], ctx: RunContext | None = None) -> dict[str, Any]:
    """The table of ``runs`` (:func:`read_runs`)."""
    seeds = sorted(s for s, r in runs.items() if r)
    ctx = ctx or RunContext(study, seeds)
    keys = [f"{a}/{e.mode}" for a, e in study.outcomes()]
    outcomes = {}
    for k in keys:
        rows = [
            {"seed": s, **{f: v for f, v in runs[s][k].items() if f not in ("episode_success", "episode_subset")}}
            for s in seeds
            if k in runs[s]
        ]
        if rows:
            outcomes[k] = _outcome(rows)
    comparisons = {}
    for c in study.comparisons:
        both = [s for s in seeds if c.a in runs[s] and c.b in runs[s]]
        if not both:
            continue
        per, kept = [], []
        for s in both:
            oa, ob = runs[s][c.a], runs[s][c.b]
            sa = _subset_only(oa["episode_success"], oa.get("episode_subset"), c.subset)
            sb = _subset_only(ob["episode_success"], ob.get("episode_subset"), c.subset)
            if c.subset is not None and not set(sa) & set(sb):
                continue  # a seed whose episodes hold none of the subset (a small run) adds no pair
            per.append(paired(sa, sb))
            kept.append(s)
        if not per:
            continue
        raw = {
            "a": c.a,
            "b": c.b,
            "subset": c.subset,
            "seeds": kept,
            "success_gap_per_seed": [p["gap"] for p in per],
            "p_mcnemar_per_seed": [mcnemar_exact(p["only_a"], p["only_b"]) for p in per],
            "only_a": sum(p["only_a"] for p in per),
            "only_b": sum(p["only_b"] for p in per),
            "episodes": sum(p["episodes"] for p in per),
        }
        comparisons[c.id] = derive(raw, outcomes)
    sections = {
        name: SECTIONS.get_or_fail(name, f"{study.file}: sections")(ctx, **args) for name, args in study.sections
    }
    return finish(study.name, seeds, outcomes, comparisons, sections, study)


def finish(
    name: str,
    seeds: list[int],
    outcomes: dict[str, Any],
    comparisons: dict[str, Any],
    sections: dict[str, Any],
    study: Study,
) -> dict[str, Any]:
    """The table's fields, its checks evaluated on the rest."""
    from embodied_rft.study.layout import resolved

    table = {
        "schema": SCHEMA,
        "study": name,
        "label": LABEL,
        "seeds": seeds,
        "spec": resolved(study),
        "outcomes": outcomes,
        "comparisons": comparisons,
        "sections": sections,
    }
    table["checks"] = {}
    for ch in study.checks:
        fn = CHECKS.get_or_fail(ch.fn, f"{study.file}: checks.{ch.id}.fn")
        holds, figures = fn(table, **ch.args)
        table["checks"][ch.id] = {"fn": ch.fn, "args": ch.args, "clause": ch.clause, "holds": holds, "figures": figures}
    return table


def merge(parts: list[dict[str, Any]], study: Study) -> dict[str, Any]:
    """Tables of disjoint seeds of one study (same ``spec``) -> the table of all their seeds. ValueError naming the
    part when its spec differs or a seed is in two parts."""
    seen: dict[int, int] = {}
    for i, p in enumerate(parts):
        if p.get("schema") != SCHEMA:
            raise ValueError(f"part {i}: not a study table (schema {p.get('schema')!r})")
        if p["spec"] != parts[0]["spec"]:
            keys = sorted(k for k in {*p["spec"], *parts[0]["spec"]} if p["spec"].get(k) != parts[0]["spec"].get(k))
            raise ValueError(f"part {i}: its study differs in {', '.join(keys)}; not pooled")
        for s in p["seeds"]:
            if s in seen:
                raise ValueError(f"part {i}: seed {s} is already in part {seen[s]}; a seed is pooled once")
            seen[s] = i
    outcomes = {}
    for k in dict.fromkeys(k for p in parts for k in p["outcomes"]):
        outcomes[k] = _outcome([r for p in parts for r in (p["outcomes"].get(k) or {}).get("per_seed", [])])
    comparisons = {}
    for cid in dict.fromkeys(c for p in parts for c in p["comparisons"]):
        have = [p["comparisons"][cid] for p in parts if cid in p["comparisons"]]
        trip = sorted(
            (s, g, q)
            for c in have
            for s, g, q in zip(
                c["seeds"], c["success_gap_per_seed"], c["p_mcnemar_per_seed"] or [None] * len(c["seeds"]), strict=True
            )
        )
        raw = {
            "a": have[0]["a"],
            "b": have[0]["b"],
            "subset": have[0].get("subset"),
            "seeds": [t[0] for t in trip],
            "success_gap_per_seed": [t[1] for t in trip],
            "p_mcnemar_per_seed": None if any(t[2] is None for t in trip) else [t[2] for t in trip],
            **{k: sum(c[k] for c in have) for k in ("only_a", "only_b", "episodes")},
        }
        comparisons[cid] = derive(raw, outcomes)
    sections = {}
    for name in dict.fromkeys(n for p in parts for n in p["sections"]):
        fn: Callable[..., Any] = SECTIONS.get_or_fail(name, f"{study.file}: sections")
        if not hasattr(fn, "merge"):
            raise ValueError(f"section {name!r} cannot be merged over seeds (its adapter gives no merge)")
        sections[name] = fn.merge([p["sections"][name] for p in parts if name in p["sections"]])
    return finish(study.name, sorted(seen), outcomes, comparisons, sections, study)


def rebuild(table: dict[str, Any], study: Study) -> dict[str, Any]:
    """The table re-derived from the counts it stores (what a merge of it alone gives)."""
    return merge([table], study)


# --- Markdown ---


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"


def render(table: dict[str, Any]) -> str:
    """The table as Markdown: outcomes, comparisons, sections (each by its adapter's renderer), checks."""
    seeds = table["seeds"]
    lines = [
        f"# Study `{table['study']}` over seeds {seeds} ({table['label']})",
        "",
        "Success (%) per seed and over seeds (mean ± sample s.d., min–max); count columns pooled over seeds "
        "(pooled numerator over pooled denominator).",
        "",
    ]
    cols = sorted({c for o in table["outcomes"].values() for c in o["counts_pooled"]})
    lines += [
        "| outcome | success per seed | mean ± s.d. | min–max |" + "".join(f" {c} |" for c in cols),
        "|---|---|---:|---|" + "---:|" * len(cols),
    ]
    for k, o in table["outcomes"].items():
        per = ", ".join(f"s{r['seed']} {r['success']:.1f}" for r in o["per_seed"])
        s = o["success"]
        cells = ["–" if o["counts_pooled"].get(c) is None else f"{o['counts_pooled'][c]:.4g}" for c in cols]
        lines.append(
            f"| {k} | {per} | {s['mean']:.1f} ± {s['sd']:.1f} | {s['min']:.1f}–{s['max']:.1f} |"
            + "".join(f" {c} |" for c in cells)
        )
    if table["comparisons"]:
        lines += [
            "",
            "Paired on the same episodes: b's success minus a's per seed (exact McNemar p), the discordant episodes "
            "pooled over the seeds, the pooled gap with its paired Wald 95% interval and exact McNemar p.",
            "",
            "| comparison | b vs a | gap per seed (p) | only a | only b | pooled gap | 95% CI | pooled p |",
            "|---|---|---|---:|---:|---:|---|---:|",
        ]
        for cid, c in table["comparisons"].items():
            ps = c["p_mcnemar_per_seed"] or [None] * len(c["seeds"])
            per = ", ".join(
                f"s{s} {g:+.1f}" + ("" if p is None else f" ({_p(p)})")
                for s, g, p in zip(c["seeds"], c["success_gap_per_seed"], ps, strict=True)
            )
            sub = f" [{c['subset']}]" if c.get("subset") else ""
            lo, hi = c["ci95_pooled"]
            lines.append(
                f"| {cid} | {c['b']} vs {c['a']}{sub} | {per} | {c['only_a']} | {c['only_b']} | "
                f"{c['success_gap_pooled']:+.1f} | [{lo:+.1f}, {hi:+.1f}] | {_p(c['p_mcnemar_pooled'])} |"
            )
    for name, sec in table["sections"].items():
        fn = SECTIONS.get(name)
        if fn is not None and hasattr(fn, "render"):
            lines += ["", fn.render(sec).rstrip("\n")]
    if table["checks"]:
        lines += ["", "| check | clause | figures | holds |", "|---|---|---|---|"]
        for cid, c in table["checks"].items():
            figs = ", ".join(f"{k} {_fig(v)}" for k, v in c["figures"].items())
            holds = "–" if c["holds"] is None else ("yes" if c["holds"] else "no")
            lines.append(f"| {cid} | {c['clause'] or '–'} | {figs} | {holds} |")
    return "\n".join(lines) + "\n"


def _fig(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-3 and v != 0 else f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fig(x) for x in v) + "]"
    return str(v)
