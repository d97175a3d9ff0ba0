"""The reflection-of-thought (RoT) data engine (ReGRPO's data stage; docs/regrpo.md §2): executed near-misses of
four error types at expert steps, each with the simulator's real feedback and a corrected remaining plan that is
checked by simulation to reach the goal.

Input: an episode, the simulator state before expert step n, the expert plan as (id, name) pairs and a seeded RNG
(``decompose.rot``: the engine is ``data/decompose.py``'s source of recovery samples, :meth:`RotEngine.recovery`
calls :meth:`RotEngine.near_miss` at each recovery step). Output: a
:class:`NearMiss` — the error type, the failed action a_fail, the state after executing it, its feedback, the
corrected plan and where it came from — whose :meth:`NearMiss.meta` becomes the decomposed sample's ``rot`` field
(docs/regrpo.md §4); and the engine's counts (:meth:`RotEngine.metrics`).

The error types, mapped onto EB-ALFRED (a_fail replaces the expert's a* at step n; each is a single action):

- ``GroundingDrift`` (silent): the right verb on the wrong thing — find another object of a* 's kind that the room
  holds (a look-alike first: Tomato for Apple), or pick up another object within reach. It must execute and the
  world oracle must not call it correct (another Apple instance would be);
- ``ToolMismatch``: the wrong verb on the right object — pick up / open / turn on before finding it, turn on what
  should be opened, open what should be turned on, pick up a fixture; the simulator rejects it with its reason;
- ``ArgInvalid``: the right verb on an argument that cannot work — find an object the scene does not hold, open /
  pick up / toggle one that is not within reach; rejected;
- ``InfoInsufficient``: a precondition the state does not meet yet — put into or take out of a container before
  opening it, slice without a knife, pick up with a full hand, put down with an empty one; rejected.

The type is decided by construction (the relation of a_fail to a*), not by the feedback's words (the same "not
within reach" answers a pick before a find and a pick of a far object). Candidates come first from decomposition's
near misses (``data/decompose.py`` ``near_misses``: its wrong finds and its next-action-too-early) and from the
teacher's look-alike tables (``teacher/errors.py``), the sources VeGAS's failure synthesis draws from. Only
global actions (ids < 162) are tried, as EB's policy names them. The corrected plan is the expert's remaining plan
a*..a_k when it still reaches the goal from the failure state, else the symbolic planner's plan from there
(``world/oracle.py`` ``best_plan``, simulated to the goal); a candidate with neither is dropped.

The mix: at each recovery step every type's first valid candidate is found; among the feasible types the engine
takes the one whose count so far is lowest relative to its target share ((count + 1) / target, seeded ties): the
target renormalised over what is feasible, made deterministic. A type that is feasible where the others are not
(a full or empty hand is almost always a precondition to violate) would still outgrow its share, so a step whose
choice would put it more than ``max_over_target`` (4 points) above its target gets no RoT sample. Infeasible and
skipped steps and per-type feasibility are counted.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.decompose import near_misses, step_id
from ..teacher.errors import LOOKALIKE_OBJECTS, LOOKALIKE_RECEPTACLES
from ..world.actions import N_GLOBAL, PUT_DOWN, split_action
from ..world.objects import KNIVES, TYPES, base_type
from ..world.oracle import WorldOracle
from ..world.simulator import Simulator
from .config import ERROR_TYPES, RotConfig

# wrong verbs a planner confuses with a* 's verb (ToolMismatch), on a* 's own target
_CONFUSED = {
    "find a": ("pick up the", "open the", "turn on the"),
    "open the": ("turn on the", "pick up the"),
    "close the": ("turn off the",),
    "turn on the": ("open the", "pick up the"),
    "turn off the": ("close the",),
    "pick up the": ("open the", "turn on the"),
    "slice the": ("open the",),
}
# verbs whose argument may be out of reach (ArgInvalid), and what the argument must be able to do
_ABLE: dict[str, Callable[[str], bool]] = {
    "pick up the": lambda t: TYPES[t].pickable,
    "open the": lambda t: TYPES[t].openable,
    "close the": lambda t: TYPES[t].openable,
    "turn on the": lambda t: TYPES[t].toggleable,
    "turn off the": lambda t: TYPES[t].toggleable,
    "slice the": lambda t: TYPES[t].sliceable,
}
_REACH_VERBS = tuple(_ABLE)
Pairs = list[tuple[int, str]]


@dataclass
class NearMiss:
    """One executed near-miss at an expert step and its corrected plan."""

    error_type: str
    action: tuple[int, str]
    expected: tuple[int, str]
    after: Simulator
    feedback: str
    executes: bool
    corrected: Pairs
    corrected_source: str  # expert | planner

    def meta(self, feasible: list[str]) -> dict[str, Any]:
        """The decomposed sample's ``rot`` field (docs/regrpo.md §4)."""
        g = self.after.goal
        held = self.after.holding()
        return {
            "error_type": self.error_type,
            "failed_action": list(self.action),
            "expected": list(self.expected),
            "executes": self.executes,
            "feedback": self.feedback,
            "o_fail": f"{self.feedback}\n{self.after.observe_text()}",
            "source": "simulator",
            "corrected": [list(p) for p in self.corrected],
            "corrected_source": self.corrected_source,
            "goal": {"object": g.object_target, "receptacle": g.parent_target, "lamp": g.toggle_target},
            "held": held.type if held is not None else None,
            "place": self.after.loc,
            "feasible": feasible,
        }


def _present(sim: Simulator, pred: Callable[[str], bool]) -> list[str]:
    return sorted(t for t, objs in sim.by_type.items() if objs and t in TYPES and pred(t))


def _dedupe(xs: list[str]) -> list[str]:
    return list(dict.fromkeys(x for x in xs if x))


def grounding_drift(sim: Simulator, pairs: Pairs, n: int, misses: Pairs, rng: random.Random) -> list[str]:
    verb, target = split_action(pairs[n][1])
    if target is None:
        return []
    t0 = base_type(target)
    if verb == "find a" and t0 in TYPES:
        pick = TYPES[t0].pickable
        kind = _present(sim, lambda t: t != t0 and TYPES[t].pickable == pick and (pick or TYPES[t].receptacle))
        rng.shuffle(kind)
        look = (LOOKALIKE_OBJECTS if pick else LOOKALIKE_RECEPTACLES).get(t0)
        wrong = [split_action(a)[1] or "" for _, a in misses if a.startswith("find a ")]
        return [f"find a {y}" for y in _dedupe([look or "", *wrong, *kind]) if y in kind]
    if verb == "pick up the":
        here = {o.type for o in sim.objs.values() if TYPES[o.type].pickable and sim.reachable(o) and o.type != t0}
        return [f"pick up the {y}" for y in sorted(here)]
    return []


def tool_mismatch(sim: Simulator, pairs: Pairs, n: int, misses: Pairs, rng: random.Random) -> list[str]:
    verb, target = split_action(pairs[n][1])
    if target is None:
        return []
    early = [a for _, a in misses if split_action(a)[1] == target and split_action(a)[0] != verb]
    return _dedupe([*early, *(f"{v} {target}" for v in _CONFUSED.get(verb, ()))])


def arg_invalid(sim: Simulator, pairs: Pairs, n: int, misses: Pairs, rng: random.Random) -> list[str]:
    verb, target = split_action(pairs[n][1])
    if target is None:
        return []
    t0 = base_type(target)
    if verb == "find a" and t0 in TYPES:  # the near misses' wrong finds, then others, of things the scene lacks
        pick = TYPES[t0].pickable
        absent = [t for t in TYPES if not sim.by_type.get(t) and TYPES[t].pickable == pick]
        rng.shuffle(absent)
        wrong = [split_action(a)[1] or "" for _, a in misses if a.startswith("find a ")]
        return [f"find a {t}" for t in _dedupe([*wrong, *absent[:4]]) if not sim.by_type.get(t)]
    if verb not in _REACH_VERBS:
        return []
    able = _ABLE[verb]
    far = sorted({o.type for o in sim.objs.values() if o.type != t0 and able(o.type) and not sim.reachable(o)})
    rng.shuffle(far)
    return [f"{verb} {t}" for t in far]


def info_insufficient(sim: Simulator, pairs: Pairs, n: int, misses: Pairs, rng: random.Random) -> list[str]:
    verb, target = split_action(pairs[n][1])
    nxt = pairs[n + 1][1] if n + 1 < len(pairs) else None
    out = []
    if verb == "open the" and nxt is not None and (nxt == PUT_DOWN or nxt.startswith("pick up the ")):
        out.append(nxt)  # put into / take out of the container before opening it
    if verb == "pick up the" and target is not None and base_type(target) in KNIVES:
        out += [a for _, a in pairs[n + 1 :] if a.startswith("slice the ")][:1]  # slice without the knife
    held = sim.holding()
    if held is not None and verb != "pick up the":
        here = sorted({o.type for o in sim.objs.values() if TYPES[o.type].pickable and o.type != held.type})
        rng.shuffle(here)
        out += [f"pick up the {t}" for t in here[:4]]  # a full hand
    if held is None and verb in ("find a", "pick up the"):
        out.append(PUT_DOWN)  # an empty hand
    return _dedupe(out)


CANDIDATES = {
    "GroundingDrift": grounding_drift,
    "ToolMismatch": tool_mismatch,
    "ArgInvalid": arg_invalid,
    "InfoInsufficient": info_insufficient,
}


class RotEngine:
    """The engine over a run of episodes (the mix is tracked across them); see the module docstring."""

    def __init__(self, cfg: RotConfig) -> None:
        self.cfg = cfg
        total = sum(cfg.mix.values())
        self.target = {t: cfg.mix.get(t, 0.0) / total for t in ERROR_TYPES}
        self.counts: Counter[str] = Counter()
        self.feasible: Counter[str] = Counter()
        self.sources: Counter[str] = Counter()
        self.steps = 0
        self.infeasible = 0
        self.skipped = 0
        self.onpolicy: dict[str, Any] | None = None

    def _try(self, etype: str, action: str, sim: Simulator, pairs: Pairs, n: int, oracle: WorldOracle):
        aid = sim.actions.get_id(action)
        if aid is None or aid >= N_GLOBAL or action == pairs[n][1]:
            return None
        after = sim.copy()
        res = after.step(aid)
        if (etype == "GroundingDrift") != bool(res.success):
            return None
        if etype == "GroundingDrift" and oracle.judge(sim, aid).label == "correct":
            return None
        rest = pairs[n:]
        check = after.copy()
        if all(check.step(a).success for a, _ in rest) and check.is_success():
            corrected, source = list(rest), "expert"
        else:
            best = oracle.best_plan(after)
            if not best or not best[0] or any(after.actions.get_id(a) is None for a in best[0]):
                return None
            corrected, source = [(after.actions.id(a), a) for a in best[0]], "planner"
        if corrected[0] == (aid, action):
            return None  # failed == corrected: not a near-miss
        return NearMiss(etype, (aid, action), pairs[n], after, res.feedback, bool(res.success), corrected, source)

    def near_miss(
        self, ep: dict, sim: Simulator, pairs: Pairs, n: int, rng: random.Random
    ) -> tuple[NearMiss, list[str]] | None:
        """The near-miss at step n of ``ep`` (module docstring) and the feasible types, or None (counted)."""
        self.steps += 1
        oracle = WorldOracle(ep)
        misses = near_misses(sim, pairs, n, rng)
        found: dict[str, NearMiss] = {}
        for etype in ERROR_TYPES:
            if self.target[etype] <= 0:
                continue
            for action in CANDIDATES[etype](sim, pairs, n, misses, rng):
                nm = self._try(etype, action, sim, pairs, n, oracle)
                if nm is not None:
                    found[etype] = nm
                    break
        if not found:
            self.infeasible += 1
            return None
        self.feasible.update(list(found))
        tie = {t: rng.random() for t in found}
        chosen = min(found, key=lambda t: ((self.counts[t] + 1) / self.target[t], tie[t]))
        total = sum(self.counts.values()) + 1
        if total > 20 and (self.counts[chosen] + 1) / total > self.target[chosen] + self.cfg.max_over_target:
            self.skipped += 1
            return None
        self.counts[chosen] += 1
        self.sources[found[chosen].corrected_source] += 1
        return found[chosen], sorted(found)

    # ``decompose.rot`` as a source of decomposition's recovery samples (``data/decompose.py`` ``SOURCES``)
    def recovery(self, ep: dict, sim: Simulator, pairs: Pairs, n: int, key: str):
        """(state after the near-miss, its history entry, the corrected plan, the sample's ``rot`` field), or None."""
        got = self.near_miss(ep, sim, pairs, n, random.Random(f"{key}:rot"))
        if got is None:
            return None
        nm, feasible = got
        entry = {"action_id": nm.action[0], "action_name": nm.action[1], "feedback": nm.feedback}
        return nm.after, entry, nm.corrected, {"rot": nm.meta(feasible)}

    def prefer(self, sample: dict) -> int | None:
        """``silent_twins``: the step after a silent near-miss's (its clean twin) is kept first."""
        silent = self.cfg.silent_twins and sample.get("rot", {}).get("executes")
        return sample["step"] + 1 if silent else None

    def extra(self, episodes: list[dict], seed: int) -> list[dict]:
        """``onpolicy_states``: the RoT samples of a policy's own failures (``onpolicy.py``); their counts and checks
        go into :meth:`report`."""
        if self.cfg.onpolicy_states is None:
            return []
        from ..core.digest import file_digest
        from ..data.jsonl import DataError
        from .onpolicy import read_states, rot_samples

        path = Path(self.cfg.onpolicy_states)
        if not path.is_file():
            raise DataError(
                f"decompose.rot.onpolicy_states: {path} does not exist (python -m embodied_rft.regrpo.collect)"
            )
        by_id = {e["episode_id"]: e for e in episodes}
        samples, counts = rot_samples(read_states(path), by_id, str(path))
        self.onpolicy = {"file": path.as_posix(), "digest": file_digest(path), **counts, **checks(samples, by_id, seed)}
        return samples

    def report(self, samples: list[dict], episodes: dict[str, dict], seed: int) -> dict[str, Any]:
        """The train split's ``rot`` metrics: :func:`report`'s, and the on-policy samples' (:meth:`extra`)."""
        out = report(self, samples, episodes, seed)
        if self.onpolicy is not None:
            out["onpolicy"] = self.onpolicy
        return out

    def metrics(self) -> dict[str, Any]:
        """Counts per type, achieved vs target shares, feasibility, the infeasible share."""
        n = sum(self.counts.values())
        share = {t: round(self.counts[t] / n, 4) if n else 0.0 for t in ERROR_TYPES}
        return {
            "recovery_steps": self.steps,
            "rot_samples": n,
            "infeasible_steps": self.infeasible,
            "infeasible_share": round(self.infeasible / self.steps, 4) if self.steps else 0.0,
            "skipped_over_target": self.skipped,
            "per_type": {t: self.counts[t] for t in ERROR_TYPES},
            "share": share,
            "target": {t: round(v, 4) for t, v in self.target.items()},
            "within_5pts": {t: abs(share[t] - self.target[t]) <= 0.05 for t in ERROR_TYPES},
            "feasible_share": {t: round(self.feasible[t] / self.steps, 4) if self.steps else 0.0 for t in ERROR_TYPES},
            "corrected_source": dict(self.sources),
        }


def verify(ep: dict, sample: dict) -> tuple[bool, bool]:
    """(the sample's failure feedback and observation are what the simulator gives when its history is replayed
    from the episode's start, its label's plan reaches the goal from there) — the engine's provenance check."""
    sim = Simulator.from_episode(ep)
    fb = ""
    for h in sample["history"]:
        fb = sim.step(h["action_id"]).feedback
    rot = sample["rot"]
    same = fb == rot["feedback"] and f"{fb}\n{sim.observe_text()}" == rot["o_fail"]
    same = same and sim.observe_text() == sample["observation"]
    for aid, _ in json.loads(sample["label"])["gold"]:
        if not sim.step(aid).success:
            return same, False
    return same, sim.is_success()


def checks(samples: list[dict], episodes: dict[str, dict], seed: int) -> dict[str, Any]:
    """The provenance and gate figures of RoT ``samples``: every failure observation re-made by the simulator
    (:func:`verify`), every corrected plan reaching the goal, the scripted triples' gate pass rate (``text.gate``)."""
    from .text import gate
    from .write import scripted_triple, triple_rng

    same = reach = passed = 0
    problems: Counter[str] = Counter()
    for s in samples:
        ok, goal = verify(episodes[s["episode_id"]], s)
        same += ok
        reach += goal
        bad = gate(
            scripted_triple(s, triple_rng(seed, s["sample_id"])), s["rot"], s["prompt"][-1]["content"], s["step"]
        )
        passed += not bad
        problems.update(b.split(":")[0] for b in bad)
    n = len(samples)
    rate = lambda k: round(k / n, 4) if n else 0.0  # noqa: E731
    return {
        "written": n,
        "feedback_from_simulator": rate(same),
        "corrected_reach_goal": rate(reach),
        "gates": {"pass_rate": rate(passed), "problems": dict(problems)},
        "floors": {
            "feedback_all_from_simulator": n > 0 and same == n,
            "gates_95pct": n > 0 and passed >= 0.95 * n,
            "corrected_all_reach_goal": n > 0 and reach == n,
        },
    }


def report(engine: RotEngine, samples: list[dict], episodes: dict[str, dict], seed: int) -> dict[str, Any]:
    """The engine's metrics over its written samples (those of ``samples`` with a ``rot`` field and no ``origin``:
    on-policy samples, ``regrpo/onpolicy.py``, are checked apart), with the issue's floors: :func:`checks`' three and
    the mix within 5 points of its target."""
    rots = [s for s in samples if "rot" in s and "origin" not in s["rot"]]
    out = engine.metrics()
    got = checks(rots, episodes, seed)
    floors = got.pop("floors")
    out.update(got, silent_share=round(sum(s["rot"]["executes"] for s in rots) / len(rots), 4) if rots else 0.0)
    ids = {s["sample_id"] for s in samples}
    silent = [s for s in rots if s["rot"]["executes"]]
    twins = sum(step_id(s["episode_id"], s["step"] + 1) in ids for s in silent)
    out["silent_with_clean_twin"] = round(twins / len(silent), 4) if silent else 0.0
    out["floors"] = {**floors, "mix_within_5pts": all(out["within_5pts"].values())}
    return out


__all__ = ["CANDIDATES", "NearMiss", "RotEngine", "checks", "report", "verify"]
