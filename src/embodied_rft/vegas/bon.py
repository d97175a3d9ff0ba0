"""The ``bon`` stage's library entry: every Best-of-N selector on the same held-out episodes, paired with greedy.

Inputs: a :class:`~.config.BonConfig`; the policy checkpoint (``paths.<bon.policy>_model``), the trained verifier
(``paths.verifier_model``, for ``bon_ft``), the SFT policy (``bon_zs``); the episode files (``bon.splits``); the
prompt config (the training prompt). Outputs, each written atomically:

- ``metrics_path`` (``metrics/bon.json`` + ``bon.details.json``): per selector, success overall / per subset /
  long-horizon, the paired comparison with greedy (exact McNemar, ``evaluate/aggregate.py``), the cost columns
  (policy samples, verifications and model calls per planner call, the policy's generated tokens and the verification
  prompts' tokens per call, wall seconds); candidate coverage of the greedy
  run's states; each verifier's AUROC on the policy's own live candidates; per episode, each selector's success
  and the episode's subset (what a study pairs selectors with, ``vegas/study.py``);
- ``report_path`` (``reports/bon.md``) and ``plot_path`` (success by selector, all episodes and long-horizon);
- ``work_dir/<selector>/episodes.jsonl``: per-episode results, appended and fsynced as each episode ends
  (``evaluate/store.py``), so a killed run resumes where it stopped; ``work_dir/live_<verifier>.jsonl`` likewise
  for the live candidates' scores;
- ``calls_path`` (``reports/bon_calls.csv``): the per-call table of the greedy run's live candidates — count, oracle
  label and each verifier's P(yes) per (call, distinct first action) — and, in the details, ``within_call``: each
  verifier's within-call AUROC and each selector's top-1 oracle-correct rate and value over one sample, on first and
  replanning calls apart (``vegas/calls.py``: where Best-of-N acts; the pooled live AUROC stays, reported).

Before any selector plays, :func:`check_models` checks that every model the selectors need is on this machine and
looks loadable (the policy; the SFT policy for ``bon_zs``; the trained verifier for ``bon_ft``; SmolLM2's GGUF file for
``bon_zs_smollm2``): a missing one ends the stage with one line naming its setting and how to make it, instead of
after the selectors before it have played.

Every selector plays the same episodes (a selector capped by ``max_episodes_by_selector`` plays a seeded, subset-
balanced part of them; its paired test uses the shared ones). All numbers are a symbolic-simulator proxy.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config import ConfigError, as_dict
from ..core.metrics import write_metrics
from ..core.stats import paired
from ..data.prompt import PromptConfig
from ..evaluate.aggregate import aggregate
from ..evaluate.config import EpisodeLimits
from ..evaluate.episode import run_lockstep
from ..evaluate.report import PROXY_LABEL
from ..evaluate.stage import load_episodes, select_episodes
from ..evaluate.store import ResultStore, dir_fingerprint, episode_hash, fingerprint
from .bon_config import BonConfig
from .calls import table_rows, within_call, write_table
from .report import render_report, success_plot
from .score import auroc, balanced_accuracy
from .select import VERIFIED, BonPolicy
from .text import verification_messages

log = logging.getLogger(__name__)
LONG = "long_horizon"

# what metrics/bon.json shows, `dvc metrics show`'s glance (one row among every stage's): the paper's comparison
# (the trained verifier against greedy), its no-verifier control (one sample), the headroom and the verifier's live
# AUROC; every selector's figures (the oracle's ceiling, long horizon, cost, zero-shot verifiers), per-episode
# outcomes and the config stay in bon.details.json and reports/bon.md
BON_HEADLINE = {
    "selectors": {s: {"success": True} for s in ("greedy", "sample", "bon_ft")},
    "paired_vs_greedy": {"bon_ft": {"gap": True, "p_mcnemar": True}},
    "coverage": {"headroom_at_4": True},
    "live_auroc": {"bon_ft": {"auroc": True}},
}


def play(
    episodes: Sequence[dict],
    policy: BonPolicy,
    prompt_cfg: PromptConfig,
    limits: EpisodeLimits,
    store: ResultStore,
    per_task: int,
) -> list[dict]:
    """Play ``episodes`` (those ``store`` lacks) in lockstep tasks of ``per_task``; every result, with the policy's
    per-episode counts, is appended to ``store`` as soon as its episode ends. Returns all results in order."""
    todo = [ep for ep in episodes if store.done(ep) is None]
    if len(todo) < len(episodes):
        log.info("%s: %d of %d episodes already done", store.path, len(episodes) - len(todo), len(episodes))
    by_id = {ep["episode_id"]: ep for ep in todo}
    for i in range(0, len(todo), per_task):
        for rec in run_lockstep(todo[i : i + per_task], policy, prompt_cfg, limits):
            rec.update(policy.pop_stats(rec["episode_id"]))
            rec["episode_hash"] = episode_hash(by_id[rec["episode_id"]])
            store.append(rec)
    out = []
    for ep in episodes:
        rec = store.done(ep)
        if rec is None:  # pragma: no cover - run_lockstep yields every episode it was given
            raise RuntimeError(f"episode {ep['episode_id']} has no result after the run")
        out.append(rec)
    return out


def cost(recs: Sequence[dict]) -> dict[str, float]:
    """The cost columns of one selector's results (module docstring)."""
    calls = sum(r["planner_calls"] for r in recs)
    ps = sum(r.get("policy_samples", 0) for r in recs)
    ver = sum(r.get("verifications", 0) for r in recs)
    secs = sum(r.get("seconds", 0.0) for r in recs)
    ptok = sum(r.get("policy_tokens", 0) for r in recs)
    vtok = sum(r.get("verifier_prompt_tokens", 0) for r in recs)
    per = (lambda x: round(x / calls, 4)) if calls else (lambda x: 0.0)  # noqa: E731
    return {
        "planner_calls": calls,
        "policy_samples_per_call": per(ps),
        "verifications_per_call": per(ver),
        "model_calls_per_call": per(ps + ver),
        "policy_tokens_per_call": per(ptok),
        "verifier_prompt_tokens_per_call": per(vtok),
        "wall_s": round(secs, 2),
        "wall_s_per_call": per(secs),
    }


def coverage(live_calls: Sequence[dict], ks: Sequence[int]) -> dict[str, Any]:
    """Greedy's oracle-correct first-action rate on its own states, and coverage@k of the sampled candidates."""
    if not live_calls:
        return {}
    correct = [c["greedy"]["label"] == "correct" for c in live_calls]
    at = {}
    for k in ks:
        hit = 0
        for c in live_calls:
            labels = {x["a"]: x["label"] for x in c["cands"]}
            hit += any(a is not None and labels.get(a) == "correct" for a in c["firsts"][:k])
        at[str(k)] = round(hit / len(live_calls), 4)
    greedy_rate = round(sum(correct) / len(correct), 4)
    four = at.get("4")
    return {
        "planner_calls": len(live_calls),
        "greedy_correct_rate": greedy_rate,
        "coverage_at": at,
        "distinct_first_actions": round(sum(len(c["cands"]) for c in live_calls) / len(live_calls), 3),
        # the "headroom first" check: coverage@4 at least 10 points above greedy's correct rate
        "headroom_at_4": None if four is None else round(four - greedy_rate, 4),
    }


def live_items(live_calls: Sequence[tuple[dict, dict]], limit: int, seed: int) -> list[dict]:
    """One item per (live state, distinct first action): its verification prompt and oracle label. With ``limit``
    (a costly verifier), whole planner calls are drawn (seeded) until ``limit`` items are reached, so the
    within-call metrics (``vegas/calls.py``) see every candidate of the calls it scores."""
    calls = []
    for ep, c in live_calls:
        calls.append(
            [
                {
                    "episode_id": f"{ep['episode_id']}:{c['call']}:{x['a']}",
                    "positive": x["label"] == "correct",
                    "prompt": verification_messages(
                        ep["instruction"], c["history"], c["observation"], x["reasoning"], x["a"], x["name"]
                    ),
                }
                for x in c["cands"]
            ]
        )
    if limit and sum(map(len, calls)) > limit:
        keep, n = set(), 0
        for i in random.Random(f"{seed}:live-calls").sample(range(len(calls)), len(calls)):
            if n >= limit:
                break
            keep.add(i)
            n += len(calls[i])
        calls = [c for i, c in enumerate(calls) if i in keep]
    return [it for c in calls for it in c]


def score_live(name: str, verifier: Any, items: Sequence[dict], store: ResultStore, batch: int) -> dict[str, Any]:
    """P(yes) of every live item (resumable through ``store``), then AUROC and balanced accuracy."""
    todo = [it for it in items if store.done(it) is None]
    for i in range(0, len(todo), batch):
        chunk = todo[i : i + batch]
        for it, (p, verdict, _) in zip(chunk, verifier.p_yes([it["prompt"] for it in chunk]), strict=True):
            store.append({"episode_id": it["episode_id"], "episode_hash": episode_hash(it), "p": p, "v": verdict})
    done = [store.done(it) for it in items]
    labels = [it["positive"] for it in items]
    a = auroc([d["p"] for d in done], labels)
    ba = balanced_accuracy([d["v"] == "yes" for d in done], labels)
    log.info("live AUROC of %s: %s on %d candidates", name, a, len(items))
    return {
        "items": len(items),
        "positives": sum(labels),
        "auroc": None if a is None else round(a, 4),
        "balanced_accuracy": None if ba is None else round(ba, 4),
        "verdict_rate": round(sum(d["v"] is not None for d in done) / len(done), 4) if done else None,
    }


def run_bon(
    cfg: BonConfig,
    models: Mapping[str, str | Path],
    episodes_paths: Sequence[str | Path],
    metrics_path: str | Path,
    report_path: str | Path,
    plot_path: str | Path,
    work_dir: str | Path,
    *,
    prompt_cfg: PromptConfig,
    extra: Mapping[str, object] | None = None,
    calls_path: str | Path | None = None,
) -> dict:
    """Run every selector of ``cfg`` (module docstring). ``models``: ``policy``, ``sft`` and ``verifier`` folders;
    ``calls_path``: where the per-call table goes (``vegas/calls.py``)."""
    from ..generation import make_generator

    check_models(cfg, models)  # before anything loads or plays
    work_dir = Path(work_dir)
    if cfg.num_threads:
        import torch

        torch.set_num_threads(cfg.num_threads)
    episodes, counts = load_episodes(episodes_paths, cfg.max_episodes, cfg.seed)
    limits = EpisodeLimits(cfg.max_env_steps, cfg.max_invalid_actions, cfg.max_planner_calls)
    gen = make_generator(Path(models["policy"]), cfg.generation)
    common = {
        "limits": as_dict(limits),
        "prompt": as_dict(prompt_cfg),
        "policy": dir_fingerprint(models["policy"]),
        "generation": as_dict(cfg.generation),
        **{k: getattr(cfg, k) for k in ("n", "temperature", "top_p", "unit", "seed")},
    }
    verifiers: dict[str, Any] = {}
    results: dict[str, list[dict]] = {}
    try:
        for sel in cfg.selectors:
            cap = cfg.max_episodes_by_selector.get(sel)
            eps = select_episodes(episodes, cap, cfg.seed) if cap else episodes
            fp: dict[str, Any] = {**common, "selector": sel}
            if sel in VERIFIED:
                verifiers.setdefault(sel, _verifier(sel, cfg, models, gen))
                fp.update(verifier=_verifier_id(sel, cfg, models), m=cfg.m, vt=cfg.verifier_temperature)
                fp["verifier_max_new_tokens"] = cfg.verifier_max_new_tokens
                if cfg.score != "sample":  # (non-defaults only: earlier runs' fingerprints still resume)
                    fp["score"] = cfg.score
                if cfg.prior_weight:
                    fp["prior_weight"] = cfg.prior_weight
            if cfg.trigger != "always" and sel != "greedy":
                fp["trigger"] = cfg.trigger
            store = ResultStore(work_dir / sel / "episodes.jsonl", fingerprint(fp), resume=cfg.resume)
            policy = BonPolicy(sel, gen, cfg, verifier=verifiers.get(sel), live=sel == "greedy")
            log.info("bon %s: %d episodes", sel, len(eps))
            results[sel] = play(eps, policy, prompt_cfg, limits, store, cfg.episodes_per_task)
        by_id = {ep["episode_id"]: ep for ep in episodes}
        live_calls = [(by_id[r["episode_id"]], c) for r in results.get("greedy", []) for c in r.get("live", [])]
        live_auroc: dict[str, dict] = {}
        live_scores: dict[str, dict[str, float]] = {}
        if live_calls:
            for sel in cfg.live_verifiers:
                verifiers.setdefault(sel, _verifier(sel, cfg, models, gen))
            for sel, ver in verifiers.items():
                items = live_items(live_calls, cfg.live_max_by_selector.get(sel, cfg.live_max), cfg.seed)
                fp = fingerprint({"verifier": _verifier_id(sel, cfg, models), "items": len(items), "seed": cfg.seed})
                store = ResultStore(work_dir / f"live_{sel}.jsonl", fp, resume=cfg.resume)
                live_auroc[sel] = score_live(sel, ver, items, store, cfg.generation.batch_size)
                live_scores[sel] = {it["episode_id"]: store.done(it)["p"] for it in items}
    finally:
        gen.close()
    metrics = summarize_bon(cfg, results, [c for _, c in live_calls], live_auroc, counts)
    if live_calls:
        # where Best-of-N acts: the per-call table (a versioned output) and the within-call metrics read from it
        rows = table_rows(results["greedy"], live_scores)
        if calls_path is not None:
            write_table(calls_path, rows, list(live_scores))
        weights = {v: cfg.prior_weight for v in live_scores} if cfg.prior_weight else {}
        metrics["within_call"] = within_call(rows, list(live_scores), weights, seed=cfg.seed)
    metrics.update(extra or {})
    write_metrics(metrics_path, metrics, BON_HEADLINE)
    render_report(metrics, report_path)
    success_plot(metrics, plot_path)
    return metrics


def check_models(cfg: BonConfig, models: Mapping[str, str | Path], *, checkpoints: bool = True) -> None:
    """ConfigError, naming the setting and how to make it, unless every model ``cfg``'s selectors (and
    ``live_verifiers``) need is on this machine and looks loadable: the checkpoint folders of ``models`` (a config,
    complete weights and a tokenizer: ``models/integrity.py``) and the zero-shot SmolLM2 verifier (``bon.zs_model``:
    its GGUF file, or a local checkpoint; nothing is ever downloaded). ``checkpoints=False`` checks only the latter,
    for a caller whose stages still make the folders (a VeGAS study before it runs: ``vegas/study.py``)."""
    from ..models.integrity import DamagedCheckpointError, check_checkpoint
    from ..models.pretrained import ModelNotAvailableError, gguf_ready, resolve_checkpoint

    used = [s for s in dict.fromkeys((*cfg.selectors, *cfg.live_verifiers)) if s in VERIFIED]
    where = {s: "bon.selectors" if s in cfg.selectors else "bon.live_verifiers" for s in used}
    if checkpoints:
        need = [("policy", f"paths.{cfg.policy}_model", f"bon.policy={cfg.policy}", cfg.policy, "")]
        if "bon_zs" in used:
            need.append(("sft", "paths.sft_model", f"bon_zs ({where['bon_zs']})", "sft", "bon_zs"))
        if "bon_ft" in used:
            need.append(("verifier", "paths.verifier_model", f"bon_ft ({where['bon_ft']})", "verifier", "bon_ft"))
        for key, setting, who, stage, sel in need:
            path = Path(models[key])
            drop = f", or leave {sel} out of {where[sel]}" if sel else ""
            if not (path / "config.json").is_file():
                raise ConfigError(
                    f"{setting}: {path} holds no checkpoint (no config.json), which {who} needs before any selector "
                    f"plays; make it first (`dvc repro {stage}` or `python -m stages.{stage}`){drop}"
                )
            try:
                check_checkpoint(path)
            except DamagedCheckpointError as exc:
                raise ConfigError(f"{setting}: {exc} ({who} needs it{drop})") from None
    if "bon_zs_smollm2" in used:
        zs = cfg.zs_model
        try:
            if zs.kind == "gguf":
                gguf_ready(zs)
            elif zs.kind == "pretrained":
                check_checkpoint(resolve_checkpoint(str(zs.path)))
            else:
                raise ModelNotAvailableError(
                    f"kind={zs.kind} has no pretrained weights to verify with; use smollm2_135m"
                )
        except (ModelNotAvailableError, DamagedCheckpointError) as exc:
            w = where["bon_zs_smollm2"]
            raise ConfigError(f"bon.zs_model: {exc} (bon_zs_smollm2 needs it; or leave it out of {w})") from None


def _verifier(sel: str, cfg: BonConfig, models: Mapping[str, Any], gen: Any) -> Any:
    from .score import Verifier

    kw = {
        "backend": cfg.verifier_backend,
        "max_new_tokens": cfg.verifier_max_new_tokens,
        "batch_size": cfg.generation.batch_size,
        "device": cfg.generation.device,
    }
    if sel == "bon_ft":
        return Verifier.load(Path(models["verifier"]), **kw)
    if sel == "bon_zs_smollm2":
        return Verifier.load(cfg.zs_model, **kw)
    if Path(models["sft"]).resolve() == Path(models["policy"]).resolve() and hasattr(gen, "model"):
        return Verifier(gen.model, gen.tokenizer, **kw)  # the policy itself, prompted as verifier
    return Verifier.load(Path(models["sft"]), **kw)


def _verifier_id(sel: str, cfg: BonConfig, models: Mapping[str, Any]) -> Any:
    if sel == "bon_zs_smollm2":
        return as_dict(cfg.zs_model)
    return dir_fingerprint(models["verifier" if sel == "bon_ft" else "sft"])


def summarize_bon(
    cfg: BonConfig,
    results: Mapping[str, list[dict]],
    live_calls: Sequence[dict],
    live_auroc: Mapping[str, dict],
    counts: Mapping[str, int],
) -> dict[str, Any]:
    """The metrics record (module docstring) from the selectors' per-episode results."""
    sel_out: dict[str, dict] = {}
    outcomes: dict[str, dict[str, bool]] = {}
    for sel, recs in results.items():
        agg = aggregate(recs)
        per = agg["per_subset"]
        outcomes[sel] = {r["episode_id"]: bool(r["success"]) for r in recs}
        sel_out[sel] = {
            "episodes": len(recs),
            "success": agg["overall"].get("success_rate"),
            LONG: per[LONG]["success_rate"] if LONG in per else None,
            **cost(recs),
            "interactive": agg,
        }
    pairs, pairs_long = {}, {}
    if "greedy" in outcomes:
        long_ids = {r["episode_id"] for r in results["greedy"] if r.get("subset") == LONG}
        for sel, out in outcomes.items():
            if sel == "greedy":
                continue
            pairs[sel] = paired(outcomes["greedy"], out)
            g_long = {k: v for k, v in outcomes["greedy"].items() if k in long_ids}
            s_long = {k: v for k, v in out.items() if k in long_ids}
            if set(g_long) & set(s_long):
                pairs_long[sel] = paired(g_long, s_long)
    return {
        "label": PROXY_LABEL,
        "episodes": sum(counts.values()),
        "per_split": dict(counts),
        "selectors": sel_out,
        "paired_vs_greedy": pairs,
        "paired_vs_greedy_long_horizon": pairs_long,
        "coverage": coverage(live_calls, [k for k in cfg.coverage_k if k <= cfg.n]),
        "live_auroc": dict(live_auroc),
        "episode_success": outcomes,
        "episode_subset": {r["episode_id"]: r.get("subset", "base") for recs in results.values() for r in recs},
        "config": as_dict(cfg),
    }


__all__ = [
    "BON_HEADLINE",
    "check_models",
    "coverage",
    "cost",
    "live_items",
    "play",
    "run_bon",
    "score_live",
    "summarize_bon",
]
