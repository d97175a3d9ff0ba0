"""Failure synthesis, executed (VeGAS §3.1; docs/vegas.md §3): verification records from expert trajectories and
failures injected into them, every step run in the simulator and labelled by the world oracle.

Input: episodes (``data/episodes/<synth.split>.jsonl``) and a :class:`~.config.SynthConfig`. Output:
``out_dir/{train,val}.jsonl`` of verification records (docs/vegas.md §4: the verifier's prompt and its target
chain of thought + verdict, as SFT chat ``messages``, with the facts behind them), written together by one
folder swap, and ``metrics_path`` with the mix per mode, silent vs loud, and the issue's floors.

Per episode: τ⁺ is the expert trajectory; every step is judged by the oracle (``world/oracle.py``). τ⁻ is the
expert prefix up to an injection step n, then one error, executed:

- ``wrong_object`` (silent): find and pick up another object the room holds instead of the one the task needs
  (a look-alike first: Apple for Tomato);
- ``wrong_receptacle`` (silent): find another receptacle that can take the held object and put it there;
- ``precondition`` (loud): an action the simulator rejects — the next expert action taken too early (pick up
  from a closed drawer, put down before opening, turn on a lamp not yet found), or picking up with a full hand.

Candidates come first from decomposition's near misses (``data/decompose.py`` ``near_misses``: the next action
too early, a wrong find of the same kind), then from look-alikes present in the scene (``teacher/errors.py``).
Each episode gets the feasible mode with the fewest negatives so far, at a seeded step where that mode applies. Every τ⁻ step
after the prefix that the oracle does not call correct is a negative (verdict ``no``); τ⁺ steps the oracle calls
correct are positives, as many per episode as it has negatives (the one at the injection state first: the same
state with the right and the wrong action), so the data are balanced. Expert steps the oracle does not call
correct are left out and counted. The candidate's reasoning is written as the scripted teacher writes a plan's
``reasoning_and_reflection`` (what the SFT policy imitates). A held-out share of episodes goes to ``val.jsonl``.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embodied_rft.core.atomic import atomic_directory, atomic_open
from embodied_rft.core.metrics import write_metrics

from ..config import as_dict
from ..data.decompose import near_misses
from ..data.jsonl import DataError, iter_jsonl
from ..progress import progress
from ..teacher.config import ScriptedConfig
from ..teacher.errors import LOOKALIKE_OBJECTS, LOOKALIKE_RECEPTACLES
from ..teacher.scripted import ScriptedTeacher
from ..world.actions import N_GLOBAL, PUT_DOWN, split_action
from ..world.objects import SLICED_TYPE, TYPES, can_contain
from ..world.oracle import WorldOracle
from ..world.simulator import Simulator
from .config import SynthConfig
from .text import facts_for, scripted_candidate, verification_record

log = logging.getLogger(__name__)

# what metrics/synth.json shows (everything else, with the config, is in metrics/synth.details.json)
SYNTH_HEADLINE = {
    "episodes": True,
    "failure_rate": True,
    "records": True,
    "positives": True,
    "negatives": True,
    "mode_share": True,
    "silent_share": True,
    "expert_steps_not_correct": True,
    "floors": True,
}


class _Episode:
    """One episode's expert states and the records built from them."""

    def __init__(self, ep: dict, cfg: SynthConfig, reasoner: ScriptedTeacher) -> None:
        self.ep = ep
        self.cfg = cfg
        self.reasoner = reasoner
        self.oracle = WorldOracle(ep)
        sim = Simulator.from_episode(ep)
        self.space = sim.actions
        self.pairs = [(self.space.id(a), a) for a in ep["expert_plan"]]
        self.states: list[Simulator] = []
        self.histories: list[list[dict]] = []
        history: list[dict] = []
        for n, (aid, name) in enumerate(self.pairs):
            self.states.append(sim.copy())
            self.histories.append([dict(h) for h in history])
            res = sim.step(aid)
            if not res.success:
                raise DataError(f"episode {ep['episode_id']}: expert_plan[{n}] {name!r} failed: {res.feedback}")
            history.append({"action_id": aid, "action_name": name, "feedback": res.feedback})

    def record(
        self, sim: Simulator, history: list[dict], action: str, plan: list[str], source: str, mode: str | None, tag: str
    ) -> dict:
        """One verification record for ``action`` in ``sim`` (the candidate's plan from there: ``plan``)."""
        ep = self.ep
        j = self.oracle.judge(sim, action)
        facts = facts_for(sim, action, j)
        rid = f"{ep['episode_id']}:{len(history)}:{tag}"
        obs = sim.observe_text()
        candidate = scripted_candidate(self.reasoner, ep, rid, history, obs, action, plan, self.space)
        return verification_record(
            ep,
            rid,
            len(history),
            source,
            mode,
            history,
            obs,
            candidate,
            facts,
            self.cfg.seed,
            self.cfg.find_sentence,
            self.cfg.verdict,
        )

    # ------------------------------------------------------------------ failure options at step n
    def _silent(self, sim: Simulator, actions: list[str]) -> bool:
        s = sim.copy()
        return all(s.actions.get_id(a) is not None and s.step(a).success for a in actions)

    def _present(self, sim: Simulator, pred: Callable[[str], bool]) -> list[str]:
        return sorted(t for t, objs in sim.by_type.items() if objs and t in TYPES and pred(t))

    def _finds(self, sim: Simulator, n: int, rng: random.Random) -> list[str]:
        """Targets of the near misses' wrong finds at step n (the shared candidate source)."""
        out = []
        for _, name in near_misses(sim, self.pairs, n, rng):
            verb, target = split_action(name)
            if verb == "find a" and target is not None:
                out.append(target)
        return out

    def wrong_object(self, n: int, rng: random.Random) -> list[str] | None:
        verb, x = split_action(self.pairs[n][1])
        if verb != "find a" or n + 1 >= len(self.pairs) or self.pairs[n + 1][1] != f"pick up the {x}":
            return None
        sim, g = self.states[n], self.states[n].goal
        targets = {g.object_target, SLICED_TYPE.get(g.object_target)}
        present = self._present(sim, lambda t: TYPES[t].pickable and t not in targets and t != x)
        rng.shuffle(present)
        look = [LOOKALIKE_OBJECTS[x]] if LOOKALIKE_OBJECTS.get(x) in present else []
        for y in [*self._finds(sim, n, rng), *look, *present]:
            if y in present and self._silent(sim, [f"find a {y}", f"pick up the {y}"]):
                return [f"find a {y}", f"pick up the {y}"]
        return None

    def wrong_receptacle(self, n: int, rng: random.Random) -> list[str] | None:
        verb, r = split_action(self.pairs[n][1])
        rest = [name for _, name in self.pairs[n + 1 : n + 3]]
        sim = self.states[n]
        held = sim.holding()
        if verb != "find a" or held is None or not (rest[:1] == [PUT_DOWN] or rest == [f"open the {r}", PUT_DOWN]):
            return None
        g = sim.goal
        base = r.split("_")[0]
        taboo = {base, g.parent_target, g.mrecep_target}
        present = self._present(sim, lambda t: TYPES[t].receptacle and t not in taboo and can_contain(t, held.type))
        rng.shuffle(present)
        look = [LOOKALIKE_RECEPTACLES[base]] if LOOKALIKE_RECEPTACLES.get(base) in present else []
        for y in [*self._finds(sim, n, rng), *look, *present]:
            if y in present and self._silent(sim, [f"find a {y}", PUT_DOWN]):
                return [f"find a {y}", PUT_DOWN]
        return None

    def precondition(self, n: int, rng: random.Random) -> list[str] | None:
        sim = self.states[n]
        options = [name for _, name in near_misses(sim, self.pairs, n, rng) if split_action(name)[0] != "find a"]
        if sim.held is not None:
            here = [o.type for o in sim.objs.values() if TYPES[o.type].pickable and sim.reachable(o)]
            others = self._present(sim, lambda t: TYPES[t].pickable)
            rng.shuffle(others)
            options += [f"pick up the {t}" for t in [*here, *others] if t != sim.objs[sim.held].type]
        for a in options:
            s = sim.copy()
            if s.actions.get_id(a) is None or s.actions.id(a) >= N_GLOBAL:
                continue
            res = s.step(a)
            if not res.success and "Cannot find" not in res.feedback:
                return [a]
        return None

    def failure(self, mode: str, rng: random.Random) -> tuple[int, list[str]] | None:
        steps = list(range(len(self.pairs)))
        rng.shuffle(steps)
        for n in steps:
            inject = getattr(self, mode)(n, random.Random(f"{self.cfg.seed}:{self.ep['episode_id']}:{mode}:{n}"))
            if inject is not None:
                return n, inject
        return None


def synthesize_episode(ep: dict, cfg: SynthConfig, reasoner: ScriptedTeacher, mode_counts: Counter) -> dict[str, Any]:
    """The records of one episode (``records``), the mode used (``mode``, None when none applies) and the expert
    steps the oracle does not call correct (``expert_not_correct``: reasons). ``mode_counts`` is updated."""
    e = _Episode(ep, cfg, reasoner)
    rng = random.Random(f"{cfg.seed}:{ep['episode_id']}:synth")
    names = [name for _, name in e.pairs]
    pos: dict[int, dict] = {}
    expert_bad: list[str] = []
    for n, name in enumerate(names):
        rec = e.record(e.states[n], e.histories[n], name, names[n:], "expert", None, "expert")
        if rec["label"] == "correct":
            pos[n] = rec
        else:
            expert_bad.append(f"{rec['label']}:{rec['reason']}")
    order = sorted(cfg.modes, key=lambda m: (mode_counts[m], rng.random()))
    chosen = None
    for mode in order:
        found = e.failure(mode, rng)
        if found is not None:
            chosen = (mode, *found)
            break
    records: list[dict] = []
    if chosen is not None:
        mode, n, inject = chosen
        sim, history = e.states[n].copy(), [dict(h) for h in e.histories[n]]
        rest = names[n + (len(inject) if mode != "precondition" else 0) :]
        neg: list[dict] = []
        for i, a in enumerate(inject):
            rec = e.record(sim, history, a, inject[i:] + rest, "failure", mode, f"{mode}:{i}")
            (neg if rec["label"] != "correct" else records).append(rec)
            res = sim.step(a)
            history.append({"action_id": sim.actions.id(a), "action_name": a, "feedback": res.feedback})
        mode_counts[mode] += len(neg)  # modes are balanced by the negatives they give (silent ones give two)
        keep = max(0, len(neg) - len(records))
        picks = ([n] if n in pos else []) + rng.sample(sorted(set(pos) - {n}), len(pos) - (n in pos))
        records = [pos[i] for i in sorted(picks[:keep])] + records + neg
    return {"records": records, "mode": chosen[0] if chosen else None, "expert_not_correct": expert_bad}


def _is_val(cfg: SynthConfig, episode_id: str) -> bool:
    return cfg.val_fraction > 0 and random.Random(f"{cfg.seed}:{episode_id}:val").random() < cfg.val_fraction


def run_synth(
    cfg: SynthConfig,
    episodes_path: str | Path,
    out_dir: str | Path,
    metrics_path: str | Path,
    *,
    rewrite_cots: Callable[[list[dict]], dict] | None = None,
) -> dict[str, Any]:
    """Write ``out_dir/{train,val}.jsonl`` and the metrics; returns the metrics. ``rewrite_cots(records)``
    replaces the templated chains of thought in place (``synth.cot: teacher``, ``vegas/cot.py``) and returns its
    counters."""
    episodes_path, out_dir = Path(episodes_path), Path(out_dir)
    eps = [(f"{episodes_path}:{n}", rec) for n, rec in iter_jsonl(episodes_path)]
    if cfg.max_episodes:
        eps = eps[: cfg.max_episodes]
    if not eps:
        raise DataError(f"{episodes_path}: no episodes to synthesise failures from; check synth.split")
    reasoner = ScriptedTeacher(ScriptedConfig(seed=cfg.seed, verbosity=cfg.reasoning))
    mode_counts: Counter = Counter()
    splits: dict[str, list[dict]] = {"train": [], "val": []}
    no_failure: list[str] = []
    expert_bad: Counter = Counter()
    expert_steps = 0
    for where, ep in progress(eps, desc="synth", unit="ep"):
        try:
            out = synthesize_episode(ep, cfg, reasoner, mode_counts)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{where}: episode {ep.get('episode_id')}: {exc}") from exc
        expert_steps += len(ep["expert_plan"])
        expert_bad.update(out["expert_not_correct"])
        if out["mode"] is None:
            no_failure.append(ep["episode_id"])
        splits["val" if _is_val(cfg, ep["episode_id"]) else "train"].extend(out["records"])
    cot_info = {"source": "template"}
    if rewrite_cots is not None:
        cot_info = {"source": "teacher", **rewrite_cots(splits["train"] + splits["val"])}
    with atomic_directory(out_dir) as tmp:
        for name, recs in splits.items():
            with atomic_open(tmp / f"{name}.jsonl") as fh:
                for r in recs:
                    fh.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    metrics = synth_metrics(splits, len(eps), no_failure, expert_steps, expert_bad, cfg)
    metrics["cot"] = cot_info
    write_metrics(metrics_path, metrics, SYNTH_HEADLINE)
    log.info(
        "synth: %d records (%d positives, %d negatives) from %d episodes; floors %s",
        sum(len(v) for v in splits.values()),
        metrics["positives"],
        metrics["negatives"],
        len(eps),
        metrics["floors"],
    )
    return metrics


def synth_metrics(
    splits: dict[str, list[dict]],
    n_episodes: int,
    no_failure: list[str],
    expert_steps: int,
    expert_bad: Counter,
    cfg: SynthConfig,
) -> dict[str, Any]:
    """The mix per mode, silent vs loud, labels, and the issue's floors (docs/vegas.md §3)."""
    recs = [r for v in splits.values() for r in v]
    neg = [r for r in recs if r["verdict"] == "no"]
    by_mode = Counter(r["mode"] for r in neg)
    silent = sum(r["executes"] for r in neg)
    share = {m: round(by_mode[m] / len(neg), 4) if neg else 0.0 for m in cfg.modes}
    failure_rate = round(1 - len(no_failure) / n_episodes, 4) if n_episodes else 0.0
    silent_share = round(silent / len(neg), 4) if neg else 0.0
    not_correct = sum(expert_bad.values())
    return {
        "episodes": n_episodes,
        "failure_rate": failure_rate,
        "episodes_without_failure": len(no_failure),
        "episodes_without_failure_ids": no_failure[:50],
        "records": {k: len(v) for k, v in splits.items()},
        "positives": len(recs) - len(neg),
        "negatives": len(neg),
        "negatives_by_mode": dict(by_mode),
        "mode_share": share,
        "silent": silent,
        "loud": len(neg) - silent,
        "silent_share": silent_share,
        "labels": dict(Counter(r["label"] for r in recs)),
        "reasons": dict(Counter(r["reason"] for r in recs)),
        "expert_steps": expert_steps,
        "expert_steps_not_correct": not_correct,
        "expert_not_correct_by_reason": dict(expert_bad),
        "floors": {
            "failures_for_90pct_of_episodes": failure_rate >= 0.9,
            "each_mode_20pct_of_negatives": all(share[m] >= 0.2 for m in cfg.modes),
            "silent_30pct_of_negatives": silent_share >= 0.3,
            "expert_steps_all_correct": not_correct == 0,
        },
        "config": as_dict(cfg),
    }


__all__ = ["SYNTH_HEADLINE", "run_synth", "synth_metrics", "synthesize_episode"]
