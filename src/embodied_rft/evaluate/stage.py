"""The ``evaluate`` stage's library entry: every model on the same held-out episodes, plus offline metrics.

Inputs: an :class:`~.config.EvalConfig`; ``models`` (name -> checkpoint directory; base, sft and grpo in the
pipeline); the episode files to play (``data/episodes/<split>.jsonl``); the held-out decomposed samples
(``data/decomposed/val.jsonl``) for offline metrics; the prompt config (the training prompt) and the reward
config. Outputs, each written atomically:

- ``metrics_path`` (``metrics/evaluate.json``): per model, interactive results overall / per subset / per task
  type (:mod:`.aggregate`) and offline metrics (:mod:`.offline`), plus the Table-1-shaped ``table``;
- ``report_path`` (``reports/evaluate.md``): the markdown report (:mod:`.report`), labelled a symbolic-simulator
  proxy, not EmbodiedBench numbers;
- ``plots_dir/evaluate_success_by_subset.json``: ``[{"model", "subset", "success_rate"}]`` for ``dvc plots``;
- ``work_dir/<model>/episodes.jsonl``: per-episode results, append-only, for resuming (:mod:`.store`).

``extra`` entries (the stage passes its ``lineage``) are added to the metrics before the one write.

Every model is evaluated greedily with the same seed on the same episodes. Reference rows (``expert``:
replaying the expert plan; ``random``: random actions) bound what the harness can tell apart. The paper
evaluates on EB-ALFRED's 6 × 50 episodes in AI2-THOR; here the episodes are the simulator's held-out split.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from embodied_rft.config import ConfigError, as_dict
from embodied_rft.core import plugins
from embodied_rft.core.atomic import write_json_atomic, write_text_atomic
from embodied_rft.core.metrics import write_metrics
from embodied_rft.core.stats import paired
from embodied_rft.core.subset import seeded_subset
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.evaluate.aggregate import aggregate
from embodied_rft.evaluate.config import EvalConfig
from embodied_rft.evaluate.offline import offline_metrics
from embodied_rft.evaluate.policy import ModelPolicy, PolicySpec
from embodied_rft.evaluate.report import PROXY_LABEL, plot_rows, render_markdown, table_rows
from embodied_rft.evaluate.runner import run_episodes
from embodied_rft.evaluate.store import ResultStore, dir_fingerprint, fingerprint
from embodied_rft.models.integrity import check_checkpoint
from embodied_rft.reward import RewardConfig
from embodied_rft.schema import SUBSETS, read_samples
from embodied_rft.world.episode import read_episodes

log = logging.getLogger(__name__)

PLOT_FILE = "evaluate_success_by_subset.json"


# what metrics/eval.json shows (per-episode and per-task-type results, timing, config and lineage are in
# metrics/eval.details.json)
EVAL_HEADLINE = {
    "episodes": True,
    # success (%) by subset and on average, for the trained models (the reference rows are in the details)
    "table": {"base": True, "sft": True, "grpo": True},
    "paired": {"*": {"episodes": True, "only_a": True, "only_b": True, "gap": True, "p_mcnemar": True}},
}


def select_episodes(episodes: Sequence[dict], limit: int, seed: int) -> list[dict]:
    """At most ``limit`` episodes (0 = all), drawn round-robin across subsets from seeded shuffles so every
    subset is represented; returned in file order."""
    if not limit or limit >= len(episodes):
        return list(episodes)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, ep in enumerate(episodes):
        groups[ep.get("subset", "base")].append(i)
    rng = random.Random(seed)
    order = [s for s in SUBSETS if s in groups] + sorted(set(groups) - set(SUBSETS))
    for s in order:
        rng.shuffle(groups[s])
    picked: list[int] = []
    while len(picked) < limit:
        for s in order:
            if groups[s] and len(picked) < limit:
                picked.append(groups[s].pop())
    return [episodes[i] for i in sorted(picked)]


def split_paths(cfg: EvalConfig, episodes_dir: str | Path) -> list[Path]:
    """The episode files ``cfg.splits`` names: ``<episodes_dir>/<split>.jsonl``."""
    return [Path(episodes_dir) / f"{s}.jsonl" for s in cfg.splits]


def load_episodes(paths: Sequence[str | Path], limit: int, seed: int) -> tuple[list[dict], dict[str, int]]:
    out: list[dict] = []
    counts: dict[str, int] = {}
    for p in paths:
        p = Path(p)
        eps = read_episodes(p)
        if not eps:
            raise ConfigError(f"evaluate.splits: {p} holds no episodes")
        eps = select_episodes(eps, limit, seed)
        for ep in eps:
            ep.setdefault("split", p.stem)
        counts[p.stem] = len(eps)
        out.extend(eps)
    return out, counts


def run_evaluate(
    cfg: EvalConfig,
    models: Mapping[str, str | Path],
    episodes_paths: Sequence[str | Path],
    val_samples_path: str | Path | None,
    metrics_path: str | Path,
    report_path: str | Path,
    plots_dir: str | Path,
    work_dir: str | Path,
    *,
    prompt_cfg: PromptConfig | None = None,
    reward_cfg: RewardConfig | None = None,
    extra: Mapping[str, object] | None = None,
) -> dict:
    prompt_cfg = prompt_cfg or PromptConfig()
    reward_cfg = reward_cfg or RewardConfig()
    work_dir = Path(work_dir)
    for name, d in models.items():
        if not (Path(d) / "config.json").is_file():
            raise ConfigError(f"evaluate.models: model {name!r}: {d} is not a checkpoint directory (no config.json)")
        # every checkpoint is checked before the first episode runs: a damaged last model must not fail the
        # stage after the others were evaluated
        check_checkpoint(d)
    episodes, counts = load_episodes(episodes_paths, cfg.max_episodes, cfg.seed)
    samples: list[dict] = []
    if val_samples_path is not None and cfg.max_offline_samples != 0:
        # checked before any model runs: a sample without a label would otherwise fail after generation
        # max_offline_samples: -1 = all, 0 = none (checked above); the subset's own rule is 0 = all
        samples = seeded_subset(
            read_samples(val_samples_path, what="held-out"), max(cfg.max_offline_samples, 0), cfg.seed
        )
    limits = cfg.limits
    common = {"limits": as_dict(limits), "prompt": as_dict(prompt_cfg)}
    results: dict[str, dict] = {}
    timing: dict[str, dict] = {}
    run_kw = dict(
        workers=cfg.workers,
        parallel=cfg.parallel,
        episodes_per_task=cfg.episodes_per_task,
        ray_gpus_per_worker=cfg.ray_gpus_per_worker,
    )

    for name, model_dir in models.items():
        t0 = time.perf_counter()
        gen_cfg = cfg.generation
        if name in cfg.max_new_tokens_by_model:
            gen_cfg = dataclasses.replace(gen_cfg, max_new_tokens=cfg.max_new_tokens_by_model[name])
        plugin = plugins.module_for(cfg.reflection)  # for a worker process: the module of the reflection's wrapper
        spec = PolicySpec("model", str(model_dir), gen_cfg, cfg.seed, reflection=cfg.reflection, plugin=plugin)
        ident = {**common, "policy": "model", "model": dir_fingerprint(model_dir), "generation": as_dict(gen_cfg)}
        if cfg.reflection != "none":  # stored results of plain runs keep their fingerprint
            ident["reflection"] = cfg.reflection
        fp = fingerprint(ident)
        store = ResultStore(work_dir / name / "episodes.jsonl", fp, resume=cfg.resume)
        # In-process runs share one loaded model between the interactive and the offline evaluation.
        policy = spec.build() if cfg.workers == 1 else None
        try:
            recs = run_episodes(episodes, policy or spec, prompt_cfg, limits, store, desc=f"evaluate {name}", **run_kw)
            t1 = time.perf_counter()
            offline = None
            if samples:
                gen = policy.generator if isinstance(policy, ModelPolicy) else _generator(spec)
                try:
                    offline = offline_metrics(samples, gen, reward_cfg, image_root=Path(str(val_samples_path)).parent)
                finally:
                    if gen is not getattr(policy, "generator", None):
                        gen.close()
        finally:
            if policy is not None:
                policy.close()
        t2 = time.perf_counter()
        results[name] = {
            "model_dir": str(model_dir),
            "interactive": aggregate(recs),
            "offline": offline,
            # per-episode outcomes, for paired comparisons here and across seeds (a study's table: embodied_rft.study)
            "episode_success": {r["episode_id"]: bool(r["success"]) for r in recs},
        }
        timing[name] = {
            "interactive_s": round(t1 - t0, 2),
            "offline_s": round(t2 - t1, 2),
            "episodes_per_s": round(len(recs) / max(t1 - t0, 1e-9), 3),
        }
        log.info(
            "evaluate %s: success %.1f%% on %d episodes",
            name,
            results[name]["interactive"]["overall"].get("success_rate", 0.0),
            len(recs),
        )

    for kind in cfg.reference_policies:
        t0 = time.perf_counter()
        spec = PolicySpec(kind, seed=cfg.seed)  # type: ignore[arg-type]
        store = ResultStore(
            work_dir / f"_{kind}" / "episodes.jsonl",
            fingerprint({**common, "policy": kind, "seed": cfg.seed}),
            resume=cfg.resume,
        )
        recs = run_episodes(episodes, spec, prompt_cfg, limits, store, desc=f"evaluate {kind}", **run_kw)
        dt = time.perf_counter() - t0
        results[kind] = {"model_dir": None, "reference": True, "interactive": aggregate(recs), "offline": None}
        timing[kind] = {"interactive_s": round(dt, 2), "episodes_per_s": round(len(recs) / max(dt, 1e-9), 3)}

    # each model against the one before it in evaluate.models (base -> sft -> grpo): the same episodes, paired
    names = list(models)
    pairs = {
        f"{a}->{b}": paired(results[a]["episode_success"], results[b]["episode_success"])
        for a, b in zip(names, names[1:], strict=False)
    }
    metrics = {
        "label": PROXY_LABEL,
        "episodes": {"total": len(episodes), "per_split": counts},
        "offline_samples": len(samples),
        "table": table_rows(results),
        "paired": pairs,
        "models": results,
        "timing": timing,
        "config": as_dict(cfg),
        **(extra or {}),
    }
    notes = {
        "episodes": f"{len(episodes)} held-out episodes ({', '.join(f'{k}: {v}' for k, v in counts.items())})",
        "parse failures": "an unreadable response counts as one invalid action and executes nothing (EB's rule)",
    }
    for key, c in pairs.items():
        a, b = key.split("->")
        notes[f"{a} -> {b} (paired)"] = (
            f"{c['gap']:+.1f} pts on the same {c['episodes']} episodes: {c['only_b']} solved by {b} alone, "
            f"{c['only_a']} by {a} alone, {c['both']} by both; exact McNemar p = {c['p_mcnemar']:.3g}"
        )
    write_metrics(metrics_path, metrics, EVAL_HEADLINE)
    write_text_atomic(report_path, render_markdown(results, notes))
    write_json_atomic(Path(plots_dir) / PLOT_FILE, plot_rows(results))
    return metrics


def _generator(spec: PolicySpec):
    from embodied_rft.generation import make_generator

    return make_generator(Path(str(spec.model_dir)), spec.generation)
