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
needed), not the interactive calls after one: in EB's loop those are starts and plan-exhausted calls, silent failures (docs/regrpo.md §7). :func:`merge` pools published summaries of disjoint seeds into the one
:func:`summarise` gives on all their records; :func:`clauses` lays each of the issue's clauses across the published
tables (one recipe each). A symbolic-simulator proxy throughout.
"""

from __future__ import annotations

import json
from pathlib import Path
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


def _steps_arm(per_seed: dict[int, dict]) -> dict[str, Any]:
    """One arm on one split: the seeds measured, each seed's held-out per-step counts and the pooled ones."""
    seeds = sorted(per_seed)
    return {
        "seeds": seeds,
        "per_seed": {s: per_seed[s] for s in seeds},
        "pooled": _steps_pooled([{"kinds": per_seed[s]} for s in seeds]),
    }


def _steps_gap(split_steps: dict[str, Any], a: str, b: str) -> dict[str, Any] | None:
    """Reflection tokens per held-out call after a successful step (and the reflecting share) of arms a and b on one
    split (``summary["steps"][split]``), pooled over the seeds where both were measured; None when there are none."""
    if a not in split_steps or b not in split_steps:
        return None
    da, db = split_steps[a]["per_seed"], split_steps[b]["per_seed"]
    both = [s for s in split_steps[a]["seeds"] if s in db]
    pa = _steps_pooled([{"kinds": da[s]} for s in both]).get("after_success")
    pb = _steps_pooled([{"kinds": db[s]} for s in both]).get("after_success")
    if pa is None or pb is None:
        return None
    return {
        "seeds": both,
        "tokens_per_call": [pa["tokens_per_call"], pb["tokens_per_call"]],
        "reflection_rate": [pa["reflection_rate"], pb["reflection_rate"]],
    }


def _arm(rows: list[dict]) -> dict[str, Any]:
    """One arm in one mode from its per-seed rows (:func:`arm_row` with the seed, in seed order)."""
    return {
        "per_seed": [{k: v for k, v in r.items() if k != "success_by_episode"} for r in rows],
        "success_mean": round(sum(r["success"] for r in rows) / len(rows), 2),
        **{f"{col}_pooled": _pool_rate(rows, col) for col in RATES},
        "reflection_tokens_per_call_after_success_pooled": _tokens_after_success(rows),
    }


def _comparison_name(a: str, b: str, modes: list[str]) -> str:
    return f"{b} vs {a} ({modes[0]})" if len(modes) == 1 else f"{b} ({modes[1]}) vs {a} ({modes[0]})"


def _compare(per_seed: list[tuple[int, float, float]], counts: tuple[int, int, int], ra: list, rb: list) -> dict:
    """One comparison: ``per_seed`` (seed, success gap, McNemar p) in seed order, the discordant and total episode
    counts ``(only_a, only_b, episodes)`` over those seeds, and both arms' rows on them (the behaviour gaps)."""
    only_a, only_b, n = counts
    diff = {}
    for col in RATES:
        pa, pb = _pool_rate(ra, col), _pool_rate(rb, col)
        diff[col] = round(100 * (pb - pa), 2) if pa is not None and pb is not None else None
    return {
        "seeds": [s for s, _, _ in per_seed],
        "success_gap_per_seed": [g for _, g, _ in per_seed],
        # from the discordant counts at the pooled p's precision (paired() keeps 4 decimals)
        "p_mcnemar_per_seed": [p for _, _, p in per_seed],
        "episodes": n,
        "only_a": only_a,
        "only_b": only_b,
        "success_gap_pooled": round(100 * (only_b - only_a) / n, 2) if n else 0.0,
        "p_mcnemar_pooled": round(mcnemar_exact(only_a, only_b), 6),
        "behaviour_gap_pts": diff,
        "reflection_tokens_after_success": [_tokens_after_success(ra), _tokens_after_success(rb)],
    }


def _summary(seeds: list[int], arms: dict, steps: dict, near: dict, comparisons: dict[str, Any]) -> dict[str, Any]:
    """The summary's fields; the η pairs and the checks follow from the rest."""
    eta = {
        f"{b} vs {a} (steps, {split})": g
        for split in STEP_SPLITS
        for a, b in ETA_PAIRS
        if split in steps and (g := _steps_gap(steps[split], a, b))
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


def summarise(records: dict[int, dict[tuple[str, str], dict]]) -> dict[str, Any]:
    """``records[seed][(arm, mode)]`` = eval.details.json, ``records[seed][(arm, "steps:<split>")]`` = the arm's
    held-out per-step reflection counts on that split (``regrpo/steps.py``) -> the summary (module docstring)."""
    seeds = sorted(records)
    steps: dict[str, Any] = {}
    for split in STEP_SPLITS:
        key = f"steps:{split}"
        measured = sorted({k[0] for r in records.values() for k in r if k[1] == key})
        if measured:
            steps[split] = {
                a: _steps_arm({s: r[(a, key)]["kinds"] for s, r in records.items() if (a, key) in r}) for a in measured
            }
    keys = sorted({k for r in records.values() for k in r if not k[1].startswith("steps:") and k[1] != HELDOUT_ROT})
    # the seeds an arm has: arms may be run on different seeds (the table names the seed of every figure)
    rows = {k: [{"seed": s, **arm_row(records[s][k])} for s in seeds if k in records[s]] for k in keys}
    arms = {f"{arm}/{mode}": _arm(rs) for (arm, mode), rs in rows.items()}
    comparisons: dict[str, Any] = {}
    for a, b, *modes in COMPARISONS:
        ka, kb = (a, modes[0]), (b, modes[-1])
        both = [s for s in seeds if ka in records[s] and kb in records[s]]
        if not both:
            continue
        ra, rb = [arm_row(records[s][ka]) for s in both], [arm_row(records[s][kb]) for s in both]
        per = [paired(x["success_by_episode"], y["success_by_episode"]) for x, y in zip(ra, rb, strict=True)]
        counts = (sum(c["only_a"] for c in per), sum(c["only_b"] for c in per), sum(c["episodes"] for c in per))
        per_seed = [(s, c["gap"], round(mcnemar_exact(c["only_a"], c["only_b"]), 6)) for s, c in zip(both, per)]
        comparisons[_comparison_name(a, b, modes)] = _compare(per_seed, counts, ra, rb)
    near: dict[str, Any] = {}
    for arm in sorted({k[0] for r in records.values() for k in r if k[1] == HELDOUT_ROT}):
        have = [s for s in seeds if (arm, HELDOUT_ROT) in records[s]]
        near[arm] = {"seeds": have, "pooled": _plans_pooled([records[s][(arm, HELDOUT_ROT)] for s in have])}
    return _summary(seeds, arms, steps, near, comparisons)


def _is_table(t: Any) -> bool:
    return isinstance(t, dict) and t.get("label") == LABEL and "comparisons" in t


def read_table(path: str | Path) -> dict[str, Any]:
    """A table ``tools/regrpo_seeds.py`` published (``metrics/regrpo*.json``); ValueError naming the file when it
    cannot be read or is not one."""
    try:
        t = json.loads(Path(path).read_text("utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read a published table: {e}") from None
    if not _is_table(t):
        raise ValueError(
            f"{path}: not a table of tools/regrpo_seeds.py (label {t.get('label') if isinstance(t, dict) else None!r})"
        )
    return t


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Published summaries of disjoint seeds (each :func:`summarise`'s output, read back from its JSON) -> the summary
    over all their seeds, the one :func:`summarise` gives on all the records together: every pooled figure is a sum of
    counts the parts keep (the behaviour and reflection counts per seed, the discordant episodes per comparison, the
    held-out counts). Lets seeds run on other machines or in other sessions join a table; the caller checks that the
    parts share one recipe. ValueError when a seed is in two parts or a part is not such a summary."""
    seen: set[int] = set()
    for i, p in enumerate(parts):
        if not _is_table(p):
            raise ValueError(f"part {i} is not a ReGRPO summary (label {p.get('label')!r})")
        if twice := seen & set(p["seeds"]):
            raise ValueError(f"part {i}: seeds {sorted(twice)} are already in an earlier part")
        seen |= set(p["seeds"])
    arms = {}
    for key in sorted({k for p in parts for k in p["arms"]}):
        rows = [r for p in parts for r in (p["arms"].get(key) or {}).get("per_seed", [])]
        arms[key] = _arm(sorted(rows, key=lambda r: r["seed"]))
    steps: dict[str, Any] = {}
    for split in STEP_SPLITS:
        for p in parts:
            for arm, d in (p.get("steps") or {}).get(split, {}).items():
                per = steps.setdefault(split, {}).setdefault(arm, {})
                per.update({int(s): kinds for s, kinds in d["per_seed"].items()})
    steps = {split: {arm: _steps_arm(per) for arm, per in sorted(d.items())} for split, d in steps.items()}
    near: dict[str, Any] = {}
    for arm in sorted({a for p in parts for a in p.get("heldout_rot") or {}}):
        have = [p["heldout_rot"][arm] for p in parts if arm in (p.get("heldout_rot") or {})]
        near[arm] = {
            "seeds": sorted(s for d in have for s in d["seeds"]),
            "pooled": _plans_pooled([{"plans": d["pooled"]} for d in have]),
        }
    comparisons: dict[str, Any] = {}
    for a, b, *modes in COMPARISONS:
        name = _comparison_name(a, b, modes)
        have = [p["comparisons"][name] for p in parts if name in p["comparisons"]]
        if not have:
            continue
        per_seed = sorted(
            t for c in have for t in zip(c["seeds"], c["success_gap_per_seed"], c["p_mcnemar_per_seed"], strict=True)
        )
        both = {s for s, _, _ in per_seed}
        ra = [r for r in arms[f"{a}/{modes[0]}"]["per_seed"] if r["seed"] in both]
        rb = [r for r in arms[f"{b}/{modes[-1]}"]["per_seed"] if r["seed"] in both]
        counts = (sum(c["only_a"] for c in have), sum(c["only_b"] for c in have), sum(c["episodes"] for c in have))
        comparisons[name] = _compare(per_seed, counts, ra, rb)
    return _summary(sorted(seen), arms, steps, near, comparisons)


# the clauses (docs/regrpo.md §7), each the checks of :func:`check_rows` that test it
CLAUSES = {
    "sft_recovered": "RoT-SFT vs plain recovery SFT: recovered next call +10 points",
    "sft_repeat": "RoT-SFT vs plain recovery SFT: repeat after failure -10 points",
    "sft_success": "RoT-SFT vs plain recovery SFT: success not lower by more than 3 points",
    "sft_control": "the shuffled control does not reproduce the recovered gain",
    "rl_gain": "ReGRPO vs paper-reward GRPO: success +3 points pooled or recovered +5",
    "rl_eta": "eta 0.1 vs eta 0: reflection tokens after a successful step at most 20% of eta 0's",
}


def check_rows(c: dict[str, Any], eta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The issue's thresholds (docs/regrpo.md §7) on a summary's comparisons and η pairs, one row per check: its key,
    the clause it tests (:data:`CLAUSES`), whether it holds, and the comparison and figures it reads. A check whose
    runs are missing is left out."""
    out: list[dict[str, Any]] = []

    def row(key: str, clause: str, holds: bool | None, source: str, read: dict, **figures: Any) -> None:
        out.append(
            {
                "check": key,
                "clause": clause,
                "holds": holds,
                "from": source,
                "seeds": read.get("seeds"),
                "figures": figures,
            }
        )

    # (suffix, baseline, key tag): the SFT budget of the recipe and the arms given a second cycle of it against the
    # plain replanning reasoning, and the recipe's budget against no reflection at all (`bare`)
    for x, base, tag in (("", "plain", ""), ("_x2", "plain", ""), ("", "bare", "_vs_bare")):
        rot_name, sh_name = f"rot{x} vs {base}{x} (free)", f"shuffled{x} vs {base}{x} (free)"
        rot, sh = c.get(rot_name), c.get(sh_name)
        if rot:
            g = rot["behaviour_gap_pts"]
            rec, rep = g["recovered_next_call_rate"] or 0, g["repeat_after_failure_rate"] or 0
            gap, p = rot["success_gap_pooled"], rot.get("p_mcnemar_pooled")
            row(f"rot{x}{tag}_recovered_next_call_+10pts", "sft_recovered", rec >= 10, rot_name, rot, recovered_pts=rec)
            row(f"rot{x}{tag}_repeat_after_failure_-10pts", "sft_repeat", rep <= -10, rot_name, rot, repeat_pts=rep)
            row(
                f"rot{x}{tag}_success_not_lower_than_3pts",
                "sft_success",
                gap >= -3,
                rot_name,
                rot,
                success_pts=gap,
                p=p,
            )
        if rot and sh:
            gr = rot["behaviour_gap_pts"]["recovered_next_call_rate"] or 0
            gs = sh["behaviour_gap_pts"]["recovered_next_call_rate"] or 0
            holds = gr > 0 and gs < 0.5 * gr
            key = f"shuffled{x}{tag}_does_not_reproduce_the_gain"
            row(key, "sft_control", holds, f"{sh_name}; {rot_name}", rot, recovered_pts=[gs, gr])
    # sampled groups (the paper's), constructed members (the code's); the η check's no-KL recipe against the paper
    # reward on its prompts, from its start
    for arm, paper in RL_PAIRS:
        name = f"{arm} vs {paper} (regrpo)"
        if rl := c.get(name):
            rec, gap = rl["behaviour_gap_pts"]["recovered_next_call_rate"] or 0, rl["success_gap_pooled"]
            holds = gap >= 3 or rec >= 5
            key = f"{arm}_success_+3pts_or_recovery_+5pts"
            row(key, "rl_gain", holds, name, rl, success_pts=gap, p=rl.get("p_mcnemar_pooled"), recovered_pts=rec)
    for a, b in ETA_PAIRS:  # on the held-out per-step calls after a successful action (regrpo/steps.py)
        name = f"{b} vs {a} (steps, valid_unseen)"  # the report's split, as every check here
        if g := (eta or {}).get(name):
            t0, t1 = g["tokens_per_call"]
            key = f"{b}_eta_reflection_tokens_after_success_<=20pct_of_eta0"
            row(key, "rl_eta", None if not t0 else t1 <= 0.2 * t0, name, g, tokens_per_call=[t0, t1])
    return out


def checks(c: dict[str, Any], eta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The issue's thresholds (docs/regrpo.md §7) as ``{check: holds}``; a check whose runs are missing is left out."""
    return {r["check"]: r["holds"] for r in check_rows(c, eta)}


def clauses(tables: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each of the issue's clauses across published tables (``{name: summary}``, e.g. the files of
    ``metrics/regrpo*.json``: one recipe each, see its ``recipe``): every check that tests it, per table, with its
    seeds, figures and whether it holds, and the tables where it holds."""
    out: dict[str, Any] = {k: {"clause": text, "rows": [], "holds_in": []} for k, text in CLAUSES.items()}
    for name, summary in tables.items():
        for r in check_rows(summary.get("comparisons") or {}, summary.get("eta")):
            out[r["clause"]]["rows"].append({"table": name, **r})
            if r["holds"] and name not in out[r["clause"]]["holds_in"]:
                out[r["clause"]]["holds_in"].append(name)
    return out


def render_clauses(index: dict[str, Any]) -> str:
    """The clause index as Markdown: one row per check and table."""

    def figs(f: dict[str, Any]) -> str:
        return ", ".join(f"{k} {v}" for k, v in f.items())

    lines = [
        "## The issue's clauses across the published tables",
        "",
        "Each published table is one recipe (its `recipe` in the JSON; docs/regrpo.md §7-8). Per clause, every check "
        "that tests it in every table, the seeds it pools, its figures (points, pooled; p: exact McNemar) and whether "
        "it holds.",
        "",
        "| clause | table | check | seeds | figures | holds |",
        "|---|---|---|---|---|---|",
    ]
    for d in index.values():
        for r in d["rows"]:
            seeds = ", ".join(f"s{s}" for s in r["seeds"] or [])
            holds = "–" if r["holds"] is None else ("yes" if r["holds"] else "no")
            lines.append(f"| {d['clause']} | {r['table']} | {r['check']} | {seeds} | {figs(r['figures'])} | {holds} |")
    lines += ["", "Met in: " + "; ".join(f"{k}: {', '.join(d['holds_in']) or 'none'}" for k, d in index.items())]
    return "\n".join(lines) + "\n"


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
    text = "\n".join(lines) + "\n"
    return text + "\n" + render_clauses(summary["clauses"]) if summary.get("clauses") else text


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
    "CLAUSES",
    "check_rows",
    "checks",
    "clauses",
    "merge",
    "read_table",
    "render_clauses",
    "render",
    "summarise",
]
