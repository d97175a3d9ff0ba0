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
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _run(cmd: list[str], log_file: Path) -> None:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log.info("run: %s (log: %s)", " ".join(cmd), log_file)
    with log_file.open("a", encoding="utf-8") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log_file.read_text("utf-8", errors="replace")[-2000:]
        raise RuntimeError(
            f"{' '.join(cmd[:3])} failed with exit code {proc.returncode}; last output of {log_file}:\n{tail}"
        )


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
    if done.exists() and same and not force:
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
    if len(args.seeds) < 2:
        ap.error("--seeds: a spread needs at least two seeds")
    runs = {s: Path(args.runs_dir) / f"seed-{s}" for s in args.seeds}
    if not args.summary_only:
        for s, root in runs.items():
            run_seed(s, root, list(args.overrides), args.ablation_no_sft)
    missing = [str(r / "metrics" / "eval.json") for r in runs.values() if not (r / "metrics" / "eval.json").exists()]
    if missing:
        raise SystemExit(f"no evaluation results for: {', '.join(missing)} (run without --summary-only first)")
    summary = summarise(runs, args.ablation_no_sft)
    publish(summary, render(summary), args.out_metrics, args.out_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
