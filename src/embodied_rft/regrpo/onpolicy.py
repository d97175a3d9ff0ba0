"""RoT samples from a policy's own failures (docs/regrpo.md §2, "On-policy near-misses").

The engine (``regrpo/rot.py``) makes its near-misses at the expert's steps: a random absent object to find, a verb
tried before its find. A policy that ignores its history still answers those right, since its plan from the
instruction is the corrected plan. The failures a trained policy repeats in play are its own: a find of an object
it misread from the instruction, an open of what it already opened. There its plan from the instruction *is* the
failed action, so only a sample from such a state teaches it to read the failure.

Input: a policy folder and training episodes. ``regrpo/collect.py`` plays them with the policy greedily under EB's rules
(``train/grpo/onpolicy.py``, the states GRPO's ``grpo.onpolicy`` collects) and keeps every state right after a
failed action. :func:`rot_samples` turns each state into a RoT sample in the engine's format (docs/regrpo.md §4).
The history is the policy's own and ends with its failed action and the simulator's feedback. The label is the
symbolic planner's plan from that state. ``decompose.rot.onpolicy_states`` adds the samples to the train file.

The error type is decided by construction, as the engine decides it: how the failed action relates to the corrected
plan's first action a*. The same verb on another object is ``ArgInvalid`` (a find of an object the scene lacks).
The same object with another verb is ``ToolMismatch`` (open a drawer not yet found, open a fridge already open). Any
other pair is ``InfoInsufficient`` (put down with an empty hand, pick up from a closed drawer). Every state here
followed a rejected action, so none is ``GroundingDrift``. A state whose a* is the failed action itself is dropped
and counted.

``regrpo/collect.py`` collects the states (a study task runs it per seed: ``regrpo/study.py`` ``onpolicy_states``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ..data.decompose import RECOVERY_SUFFIX
from ..data.jsonl import DataError, iter_jsonl
from ..schema import read_label
from ..world.actions import split_action
from ..world.objects import base_type
from ..world.simulator import Simulator

# what a sample built here says of its origin (the engine's samples have no such field)
ORIGIN = "onpolicy"


def error_type(failed: str, expected: str) -> str:
    """The error type of a rejected action ``failed`` where ``expected`` (a*) was right (module docstring)."""
    fv, ft = split_action(failed)
    ev, et = split_action(expected)
    same_object = ft is not None and et is not None and base_type(ft) == base_type(et)
    if fv == ev and ft != et:
        return "ArgInvalid"
    if same_object and fv != ev:
        return "ToolMismatch"
    return "InfoInsufficient"


def rot_sample(state: dict, episode: dict, where: str = "state") -> dict | None:
    """The RoT sample of one on-policy state after a failed action, or None when the planner's first action is the
    failed one. The state is replayed from the episode's start: a feedback that differs from the recorded one is a
    DataError naming ``where``."""
    history = state.get("history")
    if not isinstance(history, list) or not history:
        raise DataError(f"{where}: field 'history' must be a non-empty list (a state after a failed action)")
    sim = Simulator.from_episode(episode)
    feedback = ""
    for i, h in enumerate(history):
        res = sim.step(int(h["action_id"]))
        feedback = res.feedback
        if feedback != h.get("feedback"):
            raise DataError(
                f"{where}: history[{i}] '{h.get('action_name')}': the simulator answers {feedback!r}, "
                f"the state records {h.get('feedback')!r} (states of another world or episode?)"
            )
    if res.success:
        raise DataError(f"{where}: the last action of field 'history' executed; expected a failed one")
    gold, _ = read_label(state["label"], where)
    failed = [int(history[-1]["action_id"]), str(history[-1]["action_name"])]
    if not gold or list(gold[0]) == failed:
        return None
    g = sim.goal
    held = sim.holding()
    etype = error_type(failed[1], str(gold[0][1]))
    rot = {
        "error_type": etype,
        "failed_action": failed,
        "expected": list(gold[0]),
        "executes": False,
        "feedback": feedback,
        "o_fail": f"{feedback}\n{sim.observe_text()}",
        "source": "simulator",
        "corrected": [list(p) for p in gold],
        "corrected_source": "planner",
        "goal": {"object": g.object_target, "receptacle": g.parent_target, "lamp": g.toggle_target},
        "held": held.type if held is not None else None,
        "place": sim.loc,
        "feasible": [etype],
        "origin": ORIGIN,
    }
    # every earlier action is the policy's own, which may name the corrected action legitimately (the gates'
    # prefix): the sample's step is the count of actions before the failed one
    return {**state, "sample_id": f"{state['sample_id']}{RECOVERY_SUFFIX}", "step": len(history) - 1, "rot": rot}


def rot_samples(states: Sequence[dict], episodes: dict[str, dict], where: str = "states") -> tuple[list[dict], dict]:
    """The RoT samples of the ``states`` that follow a failed action, and their counts."""
    out: list[dict] = []
    dropped = 0
    for i, s in enumerate(states):
        if not s.get("failed_last"):
            continue
        ep = episodes.get(str(s.get("episode_id")))
        if ep is None:
            raise DataError(f"{where}:{i + 1}: episode {s.get('episode_id')!r} is not among the training episodes")
        got = rot_sample(s, ep, f"{where}:{i + 1}")
        if got is None:
            dropped += 1
        else:
            out.append(got)
    per_type = Counter(s["rot"]["error_type"] for s in out)
    counts = {
        "states": len(states),
        "after_failed_action": sum(bool(s.get("failed_last")) for s in states),
        "samples": len(out),
        "dropped_corrected_is_failed": dropped,
        "episodes": len({s["episode_id"] for s in out}),
        "per_type": dict(sorted(per_type.items())),
    }
    return out, counts


def read_states(path: str | Path) -> list[dict]:
    """The states of a collected file (JSONL, ``train/grpo/onpolicy.py``'s format)."""
    return [rec for _, rec in iter_jsonl(path)]


__all__ = ["ORIGIN", "error_type", "read_states", "rot_sample", "rot_samples"]
