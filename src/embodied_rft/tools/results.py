"""The README's results, rendered from the default run's ``metrics/*.json`` so they cannot drift.

Input: a metrics folder written by ``dvc repro`` (``distill``, ``base``, ``sft``, ``grpo`` and ``eval`` JSON) and, once
``make seeds`` has run, the ``seeds`` study's table ``results/seeds/table.json``. Output: two Markdown blocks of ``README.md``, each between its markers:

* ``<!-- results:begin -->`` … ``<!-- results:end -->``: the table of the default run (:func:`render`);
* ``<!-- results:ordering:begin -->`` … ``<!-- results:ordering:end -->``: the prose that compares the run with the
  paper's ordering base < SFT < SFT+GRPO (:func:`render_ordering`): each step's gap, paired counts and p-value, and
  whether it holds (a positive gap with exact McNemar p < 0.05), not significantly, or not at all; then the same
  over the seeds of the ``seeds`` study.

Every figure of a run stands inside these blocks, none in the README's prose around them (a test checks that a
run with other metrics changes no figure outside them). ``python -m embodied_rft.tools.results`` writes both
(``make results``; ``make repro`` and ``make seeds`` run it last); ``--check`` exits 1 when the README differs from
what the metrics give (a test runs it). Every success figure is a symbolic-simulator proxy, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
ORDER_BEGIN, ORDER_END = "<!-- results:ordering:begin -->", "<!-- results:ordering:end -->"
ALPHA = 0.05  # a step of the ordering "holds" when its gap is positive and its exact McNemar p is below this


def _load(d: Path, name: str) -> dict[str, Any]:
    path = d / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"{path}: missing; run `dvc repro` first") from None
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: line {e.lineno}: not JSON ({e.msg})") from None


def _load_optional(d: Path, name: str) -> dict[str, Any] | None:
    return _load(d, name) if (d / f"{name}.json").exists() else None


def _p(p: float) -> str:
    return "p < 1e-6" if p < 1e-6 else f"p = {p:.2g}" if p < 0.01 else f"p = {p:.3f}"


def _pair(paired: dict, key: str) -> str:
    pr = paired.get(key)
    if not pr:
        return "—"
    return f"{pr['only_a']} vs {pr['only_b']} episodes (exact McNemar, {_p(pr['p_mcnemar'])})"


def render(metrics_dir: str | Path) -> str:
    d = Path(metrics_dir)
    ev, grpo, sft, distill = (_load(d, n) for n in ("eval", "grpo", "sft", "distill"))
    models = [m for m in ("base", "sft", "grpo") if m in ev["table"]]
    names = {"base": "base", "sft": "SFT", "grpo": "SFT+GRPO"}
    splits = ", ".join(f"{n} {s}" for s, n in ev["episodes"]["per_split"].items())
    rows = [
        "| model | " + " | ".join(k for k in ev["table"][models[0]] if k != "avg") + " | **average** |",
        "|---|" + "---|" * len(ev["table"][models[0]]),
    ]
    for m in [*models, "expert", "random"]:
        if m in ev["table"]:
            t = ev["table"][m]
            rows.append(
                f"| {names.get(m, m)} | "
                + " | ".join(f"{v:.1f}" for k, v in t.items() if k != "avg")
                + f" | **{t['avg']:.1f}** |"
            )
    h = grpo.get("heldout") or {}
    pr = h.get("paired", {})
    rw, af = pr.get("reward", {}), pr.get("accuracy_full", {})
    cfg = _load(d, "grpo.details").get("config", {})  # the run's settings are beside its headline numbers
    lines = [
        f"Success rate (%) by EB-ALFRED subset, {splits} episodes — **symbolic-simulator proxy results**, not",
        "EmbodiedBench numbers (`metrics/eval.json`, `reports/eval.md`):",
        "",
        *rows,
        "",
        "| comparison | figure |",
        "|---|---|",
        f"| base → SFT, same episodes | {_pair(ev['paired'], 'base->sft')} |",
        f"| SFT → SFT+GRPO, same episodes | {_pair(ev['paired'], 'sft->grpo')} |",
    ]
    if rw:
        lo, hi = rw["ci95"]
        lines.append(
            f"| GRPO, {h['before']['samples']} held-out decomposed samples (greedy) | reward "
            f"{h['before']['reward_mean']:.3f} → {h['after']['reward_mean']:.3f} (95% CI of the gain [{lo:+.3f}, "
            f"{hi:+.3f}]); exact remaining plan {h['before']['exact_plan_rate']:.3f} → "
            f"{h['after']['exact_plan_rate']:.3f} ({af.get('only_a')} vs "
            f"{af.get('only_b')}, {_p(af.get('p_mcnemar', 1.0))}{_ci(af)}) |"
        )
    lines += [
        f"| SFT | {sft['steps']} steps, loss {sft['first_loss']:.2f} → {sft['final_loss']:.2f}, "
        f"{sft['tokens_per_s']:,.0f} tokens/s |",
        _grpo_row(grpo, cfg),
        f"| teacher | `{distill['model']}`, validate `{distill['validate']}`: {distill['accepted']:,} answers kept, "
        f"{100 * distill['kept_gold_rate']:.1f}% of them the expert's plan |",
    ]
    return "\n".join(lines)


def _grpo_row(grpo: dict, cfg: dict) -> str:
    """The GRPO row: the engine's size and speed, and for a cluster run the job that trained it."""
    rate = grpo["filter"]["pass_rate"]
    size = (
        f"{grpo['updates']} updates (G = {cfg.get('group_size')}, lr {cfg.get('lr'):g}, K_2 = "
        f"{cfg.get('filter', {}).get('updates_per_buffer')}), filter pass rate "
        + (f"{rate:.2f}" if rate is not None else "not recorded")
    )
    if grpo.get("backend") == "openrlhf":
        job = grpo.get("job") or {}
        return (
            f"| GRPO | OpenRLHF job `{job.get('submission_id')}` (trainer `{job.get('trainer')}`, OpenRLHF "
            f"{job.get('openrlhf_version')}): {grpo['steps']} steps, {size} |"
        )
    return f"| GRPO | {size}, {grpo['throughput']['generated_tokens_per_s']:,.0f} generated tokens/s |"


def _ci(gain: dict) -> str:
    """``; 95% CI of the gain [lo, hi]`` for a comparison that has one (runs before it was recorded have not)."""
    if "ci95" not in gain:
        return ""
    lo, hi = gain["ci95"]
    return f"; 95% CI of the gain [{lo:+.3f}, {hi:+.3f}]"


def _verdict(gap: float, p: float) -> str:
    if gap <= 0:
        return "does not hold"
    return "holds" if p < ALPHA else f"points the same way, not significantly (p ≥ {ALPHA:g})"


def _step(name: str, first: str, second: str, pr: dict | None) -> str:
    """One step of the ordering in the default run: ``SFT < SFT+GRPO holds, +<gap> points (...; p = <p>)``."""
    if not pr:
        return f"{name}: no paired result in `metrics/eval.json`"
    return (
        f"{name} {_verdict(pr['gap'], pr['p_mcnemar'])}, {pr['gap']:+.1f} points ({second} alone solved {pr['only_b']} "
        f"episodes, {first} alone {pr['only_a']}; exact McNemar {_p(pr['p_mcnemar'])})"
    )


SEEDS_TABLE = Path("results/seeds/table.json")  # the `seeds` study's table (conf/study/seeds.yaml)


def render_ordering(metrics_dir: str | Path, seeds_table: str | Path = SEEDS_TABLE) -> str:
    """The README's comparison with the paper's ordering, from ``eval.json`` (+ ``base.json``) and the ``seeds``
    study's table."""
    d = Path(metrics_dir)
    ev, base = _load(d, "eval"), _load_optional(d, "base")
    size = f" ({base['parameters'] / 1e6:.1f}M parameters)" if base else ""
    paired = ev.get("paired", {})
    text = (
        f"In the default run{size}: {_step('base < SFT', 'base', 'SFT', paired.get('base->sft'))}; "
        f"{_step('SFT < SFT+GRPO', 'SFT', 'SFT+GRPO', paired.get('sft->grpo'))}. "
    )
    t = Path(seeds_table)
    return _wrap(text + _seeds_sentence(json.loads(t.read_text("utf-8")) if t.exists() else None))


def _seeds_sentence(table: dict | None) -> str:
    """The seed spread of the ``seeds`` study (``results/seeds/table.json``), or a pointer to it when it has not
    run."""
    if not table:
        return "Seed spread: `make seeds` has not run (it writes `results/seeds/table.json` and `table.md`)."
    out = table.get("outcomes", {})

    def ms(key: str) -> str:
        o = out[key]["success"]
        return f"{o['mean']:.1f} ± {o['sd']:.1f}%"

    pr = table.get("comparisons", {}).get("sft_to_grpo")
    if pr is None or not {"pipeline/sft", "pipeline/grpo"} <= set(out):
        return "Seed spread: `results/seeds/table.md` (it has no SFT < SFT+GRPO comparison to quote here)."
    sa, sb = out["pipeline/sft"]["success"], out["pipeline/grpo"]["success"]
    gap, spread = sb["mean"] - sa["mean"], sa["sd"] + sb["sd"]
    n, above = len(pr["seeds"]), sum(g > 0 for g in pr["success_gap_per_seed"])
    text = (
        f"Over {n} seeds (`make seeds`: each its own world, data, models; `results/seeds/table.md`): SFT "
        f"{ms('pipeline/sft')} → SFT+GRPO {ms('pipeline/grpo')}, higher on {above} of {n} seeds, the gap of means "
        f"({gap:+.1f}) {'beyond' if gap > spread else 'within'} the spread (sum of the s.d. {spread:.1f}); "
        f"pooled, SFT+GRPO alone solved {pr['only_b']} episodes, SFT alone {pr['only_a']} (exact McNemar "
        f"{_p(pr['p_mcnemar_pooled'])})"
    )
    if "no_sft/grpo" in out:
        text += f"; GRPO without SFT {ms('no_sft/grpo')}"
    return text + "."


# figures whose parts should stay on one line of the README: "p = <p>", "<mean> ± <sd>%", "<k> of <n>"
_UNBROKEN = re.compile(r"p [=<] \S+|\S+ ± \S+|\d+ of \d+|[+-]?\d[\d.]* points")


def _wrap(text: str) -> str:
    glued = _UNBROKEN.sub(lambda m: m.group().replace(" ", "\0"), text)
    return textwrap.fill(glued, width=120, break_long_words=False, break_on_hyphens=False).replace("\0", " ")


def splice(readme: str, block: str, begin: str = BEGIN, end: str = END) -> str:
    if begin not in readme or end not in readme:
        raise SystemExit(f"README.md: the markers {begin} and {end} are missing")
    head, rest = readme.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{block}\n{end}{tail}"


def update(readme: str, metrics_dir: str | Path, seeds_table: str | Path = SEEDS_TABLE) -> str:
    """``readme`` with both generated blocks rewritten from ``metrics_dir`` and the seeds study's table."""
    readme = splice(readme, render(metrics_dir))
    return splice(readme, render_ordering(metrics_dir, seeds_table), ORDER_BEGIN, ORDER_END)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", default="metrics")
    ap.add_argument("--readme", default="README.md")
    ap.add_argument("--seeds-table", default=str(SEEDS_TABLE), help="the seeds study's table (make seeds)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the README's results differ from the metrics")
    a = ap.parse_args(argv)
    path = Path(a.readme)
    old = path.read_text()
    new = update(old, a.metrics, a.seeds_table)
    if a.check:
        if new != old:
            print(f"{path}: the results are not the ones {a.metrics}/ gives; run `make results`", file=sys.stderr)
            return 1
        return 0
    if new != old:
        tmp = path.with_suffix(".md.tmp")
        tmp.write_text(new)
        tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
