"""Trajectory decomposition (paper §3, docs/facts.md §1.3): an expert plan of k actions becomes k samples.

Inputs: normalised episodes (``data/episodes/<split>.jsonl``). Output: decomposed samples, the shape both the
local GRPO engine and OpenRLHF read (``--data.input_key prompt --data.label_key label
--data.image_key images``): for step n the prompt holds the instruction, the actions a_0..a_{n-1} as history
with the simulator's env feedback, and the observation o_n rendered from the state after those actions; the
label holds the remaining actions a_n..a_k with ids in the scene's action map.

The paper built 43,898 samples from ALFRED train; by default every step of every expert plan here yields one
sample (the count is reported beside the paper's in ``metrics/decompose.json``). Two CPU-budget options change
the train split only: ``steps_per_episode`` keeps step 0 and a few other steps per trajectory, and
``recovery_per_episode`` adds samples whose history ends with one mistaken action (ids ending ``:recover``,
counted as ``recovery_samples``). ``distill`` and ``decompose`` share :func:`decompose_episode`.

Plug-in point (core/plugins.py): a section an extension contributes to ``decompose`` whose ``enabled`` is true is a
source of the recovery samples, registered in :data:`SOURCES` under the section's key (ReGRPO's RoT engine,
``decompose.rot``). The source writes each recovery sample in place of the plain near miss (with its own fields),
may prefer a clean step to keep beside it, may add samples of its own, and reports on the train split.
"""

from __future__ import annotations

import json
import logging
import random
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_rft.core import plugins
from embodied_rft.core.atomic import atomic_directory, atomic_open
from embodied_rft.core.metrics import write_metrics
from embodied_rft.core.subset import seeded_subset
from embodied_rft.schema import format_label

from ..config import check
from ..progress import progress
from ..world.actions import N_GLOBAL, split_action
from ..world.objects import TYPES
from .jsonl import DataError, iter_jsonl
from .prompt import PromptConfig, build_messages

log = logging.getLogger(__name__)

PAPER_ALFRED_SAMPLES = 43_898
# sample ids of recovery samples (decompose.recovery_per_episode) end with this
RECOVERY_SUFFIX = ":recover"
# the sources of recovery samples by section key: ``factory(section) -> source`` with ``recovery(ep, sim, pairs, n,
# key)`` -> (state after the mistake, its history entry, the label's plan, the sample's extra fields) or None,
# ``prefer(sample)`` -> a clean step of its episode to keep first with steps_per_episode (or None), ``extra(episodes,
# seed)`` -> samples it adds to the train split, and ``report(samples, episodes_by_id, seed)`` -> its train metrics
SOURCES = plugins.Registry("sample source")


def _used(_: str, section: Any) -> bool:
    """Whether an extension's section of ``decompose`` is a source in use (its ``enabled``)."""
    return plugins.switched_on(section, "enabled")


@dataclass(frozen=True)
class DecomposeConfig:
    # episode split whose steps become RL training samples
    train_split: str = "train"
    # held-out episode split for the val samples (offline metrics, GRPO held-out reward)
    val_split: str = "valid_unseen"
    # cap on val samples (0 = all); a fixed-seed subsample keeps held-out evaluation cheap on CPU
    max_val_samples: int = 0
    # cap on train samples (0 = all)
    max_train_samples: int = 0
    # train samples kept per episode: 0 = every step (the paper); k = step 0 (the whole plan from the bare
    # instruction, the only step whose history does not already name the objects) plus k-1 other steps drawn
    # with a fixed seed per episode. For a small sample budget this spreads it over more episodes.
    steps_per_episode: int = 0
    # extra train samples per episode that start after one mistaken action (0 = none, the paper). At a seeded
    # step the history ends with a plausible mistake -- the next expert action taken too early, or finding the
    # wrong object -- with the simulator's feedback (a failure, or "ok" for a wrong find), and the label is the
    # expert's remaining plan, kept only when it still reaches the goal from there. EB's evaluator replans
    # after every failed action, so a policy trained only on clean expert histories meets histories it has
    # never seen as soon as it errs.
    recovery_per_episode: int = 0
    # the sections extensions contribute (core/plugins.py): a source of the recovery samples, used when its `enabled`
    # is true (decompose.rot: ReGRPO's reflection-of-thought engine, docs/regrpo.md); none = the plain near misses
    extensions: dict[str, Any] = plugins.extensions()
    # write a rendered PNG per sample (vision models); images/ next to the JSONL
    images: bool = False
    # seed for the subsampling above
    seed: int = 0

    def __post_init__(self) -> None:
        check(self.max_val_samples >= 0, "decompose.max_val_samples", "must be >= 0 (0 = all)")
        check(self.max_train_samples >= 0, "decompose.max_train_samples", "must be >= 0 (0 = all)")
        check(self.steps_per_episode >= 0, "decompose.steps_per_episode", "must be >= 0 (0 = every step)")
        check(self.recovery_per_episode >= 0, "decompose.recovery_per_episode", "must be >= 0 (0 = none)")
        check(bool(self.train_split), "decompose.train_split", "must name an episode split, e.g. train")
        object.__setattr__(self, "extensions", plugins.sections(self, "decompose", _used))

    def source(self) -> tuple[str | None, Any]:
        """(its section's key, the source of the recovery samples) (module docstring); (None, None) for the plain
        near misses."""
        for name, section in self.extensions.items():
            if _used(name, section):
                return name, SOURCES.lookup(name, f"decompose.{name}")(section)
        return None, None


def is_recovery(sample: dict) -> bool:
    """Whether a decomposed sample starts after a mistaken action (its id ends with RECOVERY_SUFFIX; with
    ``decompose.rot`` a RoT state). On-policy GRPO states never are."""
    return str(sample.get("sample_id", "")).endswith(RECOVERY_SUFFIX)


def step_id(episode_id: str, n: int) -> str:
    """The sample id of step ``n`` of an episode's expert path (its recovery sample's id adds RECOVERY_SUFFIX)."""
    return f"{episode_id}:{n}"


def _safe_name(sample_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", sample_id)


def decompose_episode(
    ep: dict,
    prompt_cfg: PromptConfig,
    image_dir: Path | None = None,
    image_prefix: str = "images",
    where: str = "",
    recovery: int = 0,
    seed: int = 0,
    source: Any = None,
) -> Iterator[dict]:
    """Yield the k samples of one episode, executing its expert plan in the simulator, plus ``recovery``
    samples after a mistaken action (``DecomposeConfig.recovery_per_episode``; ids ``<episode>:<step>:recover``):
    decomposition's plain near misses, or those of a ``source`` (module docstring) with its fields.

    Raises DataError when an expert action is unknown or fails (the episode is not replayable); ``where``
    (the episode's ``file:line``) prefixes the message.
    """
    from ..world import Simulator

    at = f"{where}: episode {ep.get('episode_id')}" if where else f"episode {ep.get('episode_id')}"
    sim = Simulator.from_episode(ep, where)
    space = sim.actions
    plan = list(ep["expert_plan"])
    pairs = []
    for j, name in enumerate(plan):
        aid = space.get_id(name)
        if aid is None:
            raise DataError(f"{at}: expert_plan[{j}]: unknown action {name!r}")
        pairs.append((aid, name))
    extras = [n for i, n in enumerate(space.names) if i >= N_GLOBAL]
    scene_types = sorted({o["type"] for o in ep["scene"]["objects"]})
    history: list[dict] = []
    k = len(plan)
    recover = _recovery_steps(ep["episode_id"], k, recovery, seed)
    for n, (aid, name) in enumerate(pairs):
        sid = step_id(ep["episode_id"], n)
        yield sample_record(
            ep, sid, n, k, sim, history, pairs[n:], extras, scene_types, prompt_cfg, image_dir, image_prefix
        )
        if n in recover:
            found = _recovery(source, ep, sim, pairs, n, f"{seed}:{sid}")
            if found is not None:
                after, entry, remaining, fields = found
                rec = sample_record(
                    ep,
                    sid + RECOVERY_SUFFIX,
                    n,
                    k,
                    after,
                    history + [entry],
                    remaining,
                    extras,
                    scene_types,
                    prompt_cfg,
                    image_dir,
                    image_prefix,
                )
                yield {**rec, **fields}
        res = sim.step(aid)
        if not res.success:
            raise DataError(f"{at}: expert_plan[{n}] {name!r} failed in the simulator: {res.feedback}")
        history.append({"action_id": aid, "action_name": name, "feedback": res.feedback})


def sample_record(
    ep: dict,
    sid: str,
    n: int,
    k: int,
    sim,
    history: list[dict],
    remaining: list,
    extras: list[str],
    scene_types: list[str],
    prompt_cfg: PromptConfig,
    image_dir: Path | None,
    image_prefix: str,
) -> dict:
    """The decomposed sample of ``sim``'s current state: step ``n`` of ``k``, the prompt as the evaluation builds
    it, and a label with the ``remaining`` (id, name) plan; the frame is saved under ``image_dir`` if given.
    (``grpo.onpolicy`` builds its states with it too.)"""
    obs = sim.observe_text()
    image = None
    if image_dir is not None:
        fname = f"{_safe_name(sid)}.png"
        with atomic_open(image_dir / fname, "wb") as fh:
            sim.render_image().save(fh, format="PNG")
        image = f"{image_prefix}/{fname}"
    return {
        "sample_id": sid,
        "episode_id": ep["episode_id"],
        "step": n,
        "num_steps": k,
        "task_type": ep["task_type"],
        "subset": ep.get("subset", "base"),
        "instruction": ep["instruction"],
        "history": [dict(h) for h in history],
        "observation": obs,
        "image": image,
        "prompt": build_messages(prompt_cfg, ep["instruction"], history, obs, sim.actions, scene_types),
        "label": format_label(remaining, extras),
    }


def _recovery_steps(episode_id: str, k: int, n: int, seed: int) -> set[int]:
    """The steps (of k) that get a recovery sample: n of them, drawn with a fixed seed per episode."""
    if not n or not k:
        return set()
    return set(random.Random(f"{seed}:{episode_id}:recover").sample(range(k), min(n, k)))


def near_misses(sim, pairs: list[tuple[int, str]], n: int, rng: random.Random) -> list[tuple[int, str]]:
    """The plausible mistakes at step n of the expert plan ``pairs``, in the order :func:`_mistake` tries them
    (failure synthesis, ``vegas/synth.py``, draws from them too).

    The mistakes a policy makes: the next expert action taken too early (picking up before opening, putting
    down before finding), or finding the wrong thing -- another object of the kind the expert finds at this
    step (something to pick up for something to pick up, a receptacle for a receptacle)."""
    plan_names = {name for _, name in pairs}
    verb, target = split_action(pairs[n][1])
    kind = TYPES[target].pickable if verb == "find a" and target in TYPES else None
    finds = []
    for i, name in enumerate(sim.actions.names[:N_GLOBAL]):
        v, t = split_action(name)
        if v == "find a" and name not in plan_names and (kind is None or (t in TYPES and TYPES[t].pickable == kind)):
            finds.append((i, name))
    early = [pairs[n + 1]] if n + 1 < len(pairs) else []
    wrong = rng.sample(finds, min(3, len(finds)))
    return (wrong + early) if early and rng.random() < 0.5 else (early + wrong)


def _mistake(sim, pairs: list[tuple[int, str]], n: int, rng: random.Random):
    """(simulator after one plausible mistake at step n, its history entry), or None when no mistake tried
    (:func:`near_misses`) leaves the expert's remaining plan ``pairs[n:]`` able to reach the goal."""
    for aid, name in near_misses(sim, pairs, n, rng):
        after = sim.copy()
        res = after.step(aid)
        check_sim = after.copy()
        if all(check_sim.step(a).success for a, _ in pairs[n:]) and check_sim.is_success():
            return after, {"action_id": aid, "action_name": name, "feedback": res.feedback}
    return None


def _recovery(source: Any, ep: dict, sim, pairs: list[tuple[int, str]], n: int, key: str):
    """(state after the mistake, its history entry, the label's plan, the sample's extra fields), or None."""
    if source is not None:
        return source.recovery(ep, sim, pairs, n, key)
    mistake = _mistake(sim, pairs, n, random.Random(f"{key}:mistake"))
    return None if mistake is None else (*mistake, pairs[n:], {})


def decompose_episodes(
    episodes: Iterable[dict],
    prompt_cfg: PromptConfig,
    image_dir: Path | None = None,
    desc: str = "decompose",
    wheres: Sequence[str] | None = None,
    recovery: int = 0,
    seed: int = 0,
    source: Any = None,
) -> list[dict]:
    """All samples of ``episodes``; ``wheres[i]`` (``file:line``) names episode i in errors."""
    eps = list(episodes)
    out: list[dict] = []
    for i, ep in enumerate(progress(eps, desc=desc, unit="ep")):
        out.extend(
            decompose_episode(
                ep,
                prompt_cfg,
                image_dir,
                where=wheres[i] if wheres else "",
                recovery=recovery,
                seed=seed,
                source=source,
            )
        )
    return out


def _steps_per_episode(samples: list[dict], k: int, seed: int, prefer: Any = None) -> list[dict]:
    """Step 0 and k-1 other steps of each episode (fixed seed per episode id), in the original order; recovery
    samples are kept apart from the k. With ``prefer`` (a source's: ``recovery sample -> step or None``) the other
    steps start with the steps it names (ReGRPO's silent twins), the rest drawn as before."""
    if not k:
        return samples
    by_episode: dict[str, list[int]] = {}
    silent: dict[str, set[int]] = {}
    keep: set[int] = set()
    for i, s in enumerate(samples):
        if is_recovery(s):
            keep.add(i)
            step = prefer(s) if prefer is not None else None
            if step is not None:
                silent.setdefault(s["episode_id"], set()).add(step)
        else:
            by_episode.setdefault(s["episode_id"], []).append(i)
    for eid, idx in by_episode.items():
        first = [i for i in idx if samples[i]["step"] == 0][:1]
        rest = [i for i in idx if samples[i]["step"] != 0]
        pref = [i for i in rest if samples[i]["step"] in silent.get(eid, ())][: k - len(first)]
        rest = [i for i in rest if i not in pref]
        n = min(len(rest), k - len(first) - len(pref))
        keep.update(first + pref + random.Random(f"{seed}:{eid}").sample(rest, n))
    return [s for i, s in enumerate(samples) if i in keep]


def _lengths(values: list[int]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    v = sorted(values)
    return {
        "mean": round(statistics.fmean(v), 1),
        "p50": float(v[len(v) // 2]),
        "p95": float(v[min(len(v) - 1, int(0.95 * len(v)))]),
        "max": float(v[-1]),
    }


def _split_metrics(samples: list[dict]) -> dict[str, Any]:
    prompt_chars = [sum(len(m["content"]) for m in s["prompt"]) for s in samples]
    target_steps = [len(json.loads(s["label"])["gold"]) for s in samples]
    return {
        "samples": len(samples),
        "recovery_samples": sum(map(is_recovery, samples)),
        "episodes": len({s["episode_id"] for s in samples}),
        "per_task_type": dict(sorted(Counter(s["task_type"] for s in samples).items())),
        "per_subset": dict(sorted(Counter(s["subset"] for s in samples).items())),
        "prompt_chars": _lengths(prompt_chars),
        "target_steps": _lengths(target_steps),
    }


def run_decompose(
    cfg: DecomposeConfig,
    prompt_cfg: PromptConfig,
    episodes_dir: str | Path,
    out_dir: str | Path,
    metrics_path: str | Path,
) -> dict[str, Any]:
    """Write ``out_dir/{train,val}.jsonl`` (+ ``images/``) and the metrics JSON; returns the metrics."""
    from embodied_rft.world.episode import check_expert_plan

    episodes_dir, out_dir = Path(episodes_dir), Path(out_dir)
    if prompt_cfg.observation == "image" and not cfg.images:
        raise DataError("prompt.observation=image needs decompose.images=true (the prompt refers to a rendered frame)")
    metrics: dict[str, Any] = {"config": {"train_split": cfg.train_split, "val_split": cfg.val_split}}
    # train.jsonl, val.jsonl and images/ are swapped in together at the end (dvc.yaml keeps the outputs in
    # place until then: persist), so a failed run leaves the previous samples whole
    with atomic_directory(out_dir) as tmp:
        image_dir = tmp / "images" if cfg.images else None
        for name, split, cap in (
            ("train", cfg.train_split, cfg.max_train_samples),
            ("val", cfg.val_split, cfg.max_val_samples),
        ):
            path = episodes_dir / f"{split}.jsonl"
            lines = [(f"{path}:{n}", rec) for n, rec in iter_jsonl(path)]
            eps = [check_expert_plan(rec, w) for w, rec in lines]
            if not eps:
                raise DataError(
                    f"{path}: no episodes in split '{split}'; check data settings or decompose.{name}_split"
                )
            wheres = [w for w, _ in lines]
            recovery = cfg.recovery_per_episode if name == "train" else 0
            key, source = cfg.source() if name == "train" and recovery else (None, None)
            samples = decompose_episodes(
                eps, prompt_cfg, image_dir, f"decompose {name}", wheres, recovery, cfg.seed, source
            )
            if name == "train":
                prefer = source.prefer if source is not None else None
                samples = _steps_per_episode(samples, cfg.steps_per_episode, cfg.seed, prefer)
                if source is not None:
                    samples += source.extra(eps, cfg.seed)
            samples = seeded_subset(samples, cap, cfg.seed)
            with atomic_open(tmp / f"{name}.jsonl") as fh:
                for s in samples:
                    fh.write(json.dumps(s, ensure_ascii=False, separators=(",", ":")) + "\n")
            metrics[name] = _split_metrics(samples)
            if source is not None:
                metrics[name][key] = source.report(samples, {e["episode_id"]: e for e in eps}, cfg.seed)
            log.info("decompose %s: %d samples from %d episodes", name, len(samples), len(eps))
    if any(
        json.loads(line).get("source") == "alfred" for line in _first_line(episodes_dir / f"{cfg.train_split}.jsonl")
    ):
        n = metrics["train"]["samples"]
        metrics["paper_comparison"] = {
            "paper_alfred_train_samples": PAPER_ALFRED_SAMPLES,
            "ours": n,
            "ratio": round(n / PAPER_ALFRED_SAMPLES, 4),
            "why_different": (
                "one sample per EB action of each converted expert plan; EB plans expand ALFRED's high-level steps "
                "(e.g. clean = put down, turn on/off faucet, pick up) and the paper filtered some samples (inferred: "
                "48.6k high-level steps -> 43.9k), so counts differ by the expansion and the filter"
            ),
        }
    write_metrics(metrics_path, metrics, {"train": {"samples": True}, "val": {"samples": True}})
    return metrics


def _first_line(path: Path) -> list[str]:
    with path.open(encoding="utf-8") as fh:
        line = fh.readline()
    return [line] if line.strip() else []
