"""On-policy verification records: the policy's own candidates on training episodes, labelled by the world oracle
(``verifier.policy_data``; docs/vegas.md §4).

Input: a :class:`~.config.PolicyDataConfig`, the SFT policy's checkpoint, the training episodes, the episode ids to
leave out (the synth stage's held-out episodes), the prompt config and a work folder. Output: verification records
in the synth stage's format (``source: policy``; the verifier's prompt and a templated chain of thought + verdict
as SFT chat ``messages``, with the facts behind them), and their counts.

Why: the synthesised failures of ``vegas/synth.py`` sit on the expert's path — the expert's own states, one injected
error and what follows it. The policy the verifier judges at test time leaves that path (after its own failures it
replans from states no expert visits), and most of its wrong candidates are of kinds the three modes do not make
(an action that changes nothing, a failed action tried again). The paper could not label such candidates; the
symbolic world can: the greedy run of Best-of-N's ``greedy`` selector with ``live=True`` (``vegas/select.py``)
samples N candidates at every planner call and the oracle judges each distinct first action in the state it was
proposed in — exactly what the bon stage's live AUROC measures, here on training episodes instead of held-out ones.

The play is resumable (``ResultStore`` in the work folder, keyed by the policy's fingerprint and the settings).
With ``balance`` the larger class is subsampled (seeded) to the size of the smaller one. With ``contrast: k``
each planner call also gets up to k oracle-labelled alternatives in its own state (:func:`contrast_records`), added
after the balancing.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..config import as_dict
from ..data.prompt import PromptConfig
from ..evaluate.config import EpisodeLimits
from ..evaluate.stage import load_episodes
from ..evaluate.store import ResultStore, dir_fingerprint, fingerprint
from ..teacher.config import ScriptedConfig
from ..teacher.scripted import ScriptedTeacher
from ..world.actions import split_action
from ..world.oracle import ReplayError, WorldOracle
from .bon import play
from .bon_config import BonConfig
from .select import BonPolicy
from .text import Facts, facts_for, scripted_candidate, verification_record
from .verifier_config import PolicyDataConfig


def candidate_records(
    ep: dict, result: dict, seed: int, find_sentence: str = "exec", verdict: str = "last"
) -> list[dict]:
    """One verification record per (planner call, distinct sampled first action) of an episode's greedy run
    (``find_sentence``, ``verdict``: :func:`~.text.verification_cot`)."""
    return [
        verification_record(
            ep,
            f"{ep['episode_id']}:{c['call']}:{x['a']}",
            c["call"],
            "policy",
            None,
            c["history"],
            c["observation"],
            {"action_id": x["a"], "action_name": x["name"], "reasoning": x["reasoning"]},
            Facts(**x["facts"]),
            seed,
            find_sentence,
            verdict,
        )
        for c in result.get("live", [])
        for x in c["cands"]
    ]


def contrast_records(
    ep: dict,
    result: dict,
    k: int,
    seed: int,
    reasoner: ScriptedTeacher,
    find_sentence: str = "exec",
    verdict: str = "last",
) -> list[dict]:
    """Up to ``k`` alternatives per planner call of an episode's greedy run, each judged by the oracle in the state
    the call was made in (rebuilt from the run's executed actions): first the planner's next action when no sample
    proposed it, then actions with the verb of a (seeded) sampled candidate and another argument. One context is
    then seen with right and wrong candidates — mostly the comparison of the action's object with the task's, which
    the policy's samples alone teach weakly. The candidate's reasoning is the scripted teacher's for the one action;
    ``source: contrast``."""
    if k <= 0:
        return []
    oracle = WorldOracle(ep)
    out: list[dict] = []
    for c in result.get("live", []):
        if not c["cands"]:
            continue
        where = f"episode {ep['episode_id']} call {c['call']}"
        sim, history = oracle.replay(result["actions"][: len(c["history"])], where)
        if sim.observe_text() != c["observation"] or history != c["history"]:
            raise ReplayError(f"{where}: the rebuilt state is not the one the policy saw")
        space = sim.actions
        taken = {x["a"] for x in c["cands"]}
        picks: list[int] = []
        best = oracle.best_plan(sim)
        nxt = space.get_id(best[0][0]) if best and best[0] else None
        if nxt is not None and nxt not in taken:
            picks.append(nxt)
        rng = random.Random(f"{seed}:{ep['episode_id']}:{c['call']}:contrast")
        for _ in range(k - len(picks)):
            verb = split_action(rng.choice(c["cands"])["name"])[0]
            pool = [
                i for i, n in enumerate(space.names) if split_action(n)[0] == verb and i not in taken and i not in picks
            ]
            if pool:
                picks.append(rng.choice(pool))
        obs = c["observation"]
        for a in picks:
            name = space.name(a)
            rid = f"{ep['episode_id']}:{c['call']}:{a}:contrast"
            out.append(
                verification_record(
                    ep,
                    rid,
                    c["call"],
                    "contrast",
                    None,
                    c["history"],
                    obs,
                    scripted_candidate(reasoner, ep, rid, c["history"], obs, name, [name], space),
                    facts_for(sim, name, oracle.judge(sim, a)),
                    seed,
                    find_sentence,
                    verdict,
                )
            )
    return out


def balanced(records: list[dict], seed: int) -> list[dict]:
    """As many positives as negatives: a seeded subsample of the larger class, the records' order kept."""
    pos = [i for i, r in enumerate(records) if r["verdict"] == "yes"]
    neg = [i for i, r in enumerate(records) if r["verdict"] != "yes"]
    k = min(len(pos), len(neg))
    rng = random.Random(f"{seed}:balance")
    keep = set(rng.sample(pos, k)) | set(rng.sample(neg, k))
    return [r for i, r in enumerate(records) if i in keep]


def policy_records(
    cfg: PolicyDataConfig,
    policy_dir: str | Path,
    episodes_path: str | Path,
    exclude: Collection[str],
    prompt_cfg: PromptConfig,
    work_dir: str | Path,
    *,
    find_sentence: str = "exec",
    verdict: str = "last",
    reasoning: str = "full",
) -> tuple[list[dict], dict[str, Any]]:
    """The records and their counts (module docstring); nothing is played when ``cfg.episodes`` is 0."""
    if not cfg.episodes:
        return [], {"episodes": 0}
    from ..generation import make_generator

    eps, _ = load_episodes([episodes_path], 0, cfg.seed)
    exclude = set(exclude)
    eps = [ep for ep in eps if ep["episode_id"] not in exclude]
    if len(eps) > cfg.episodes:
        keep = set(random.Random(f"{cfg.seed}:policy_data").sample(range(len(eps)), cfg.episodes))
        eps = [ep for i, ep in enumerate(eps) if i in keep]
    bon_cfg = BonConfig(
        selectors=("greedy",),
        n=cfg.n,
        temperature=cfg.temperature,
        generation=cfg.generation,
        episodes_per_task=cfg.episodes_per_task,
        seed=cfg.seed,
    )
    limits = EpisodeLimits()
    fp = fingerprint(
        {
            "policy": dir_fingerprint(policy_dir),
            "prompt": as_dict(prompt_cfg),
            "limits": as_dict(limits),
            **{k: as_dict(cfg)[k] for k in ("n", "temperature", "generation", "seed")},
        }
    )
    store = ResultStore(Path(work_dir) / "policy_episodes.jsonl", fp, resume=True)
    gen = make_generator(Path(policy_dir), cfg.generation)
    try:
        results = play(
            eps, BonPolicy("greedy", gen, bon_cfg, live=True), prompt_cfg, limits, store, cfg.episodes_per_task
        )
    finally:
        close = getattr(gen, "close", None)
        if close is not None:
            close()
    records = [
        r
        for ep, res in zip(eps, results, strict=True)
        for r in candidate_records(ep, res, cfg.seed, find_sentence, verdict)
    ]
    kept = balanced(records, cfg.seed) if cfg.balance else records
    reasons = Counter(f"{r['label']}:{r['reason']}" for r in records)
    reasoner = ScriptedTeacher(ScriptedConfig(seed=cfg.seed, verbosity=reasoning))
    contrast = [
        r
        for ep, res in zip(eps, results, strict=True)
        for r in contrast_records(ep, res, cfg.contrast, cfg.seed, reasoner, find_sentence, verdict)
    ]
    counts = {
        "episodes": len(eps),
        "success": round(sum(bool(r["success"]) for r in results) / len(results), 4) if results else None,
        "planner_calls": sum(len(r.get("live", [])) for r in results),
        "candidates": len(records),
        "positives": sum(r["verdict"] == "yes" for r in records),
        "kept": len(kept),
        "by_label_reason": dict(reasons.most_common()),
        "contrast": {
            "records": len(contrast),
            "positives": sum(r["verdict"] == "yes" for r in contrast),
            "by_label_reason": dict(Counter(f"{r['label']}:{r['reason']}" for r in contrast).most_common()),
        },
    }
    return kept + contrast, counts


__all__ = ["balanced", "candidate_records", "contrast_records", "policy_records"]
