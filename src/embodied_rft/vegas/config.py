"""The ``synth:`` config section (``conf/vegas/paper.yaml``) as a frozen, self-checking dataclass: failure synthesis
(VeGAS, arXiv 2605.12620; docs/vegas.md). ``verifier:`` is in :mod:`.verifier_config` and ``bon:`` in
:mod:`.bon_config` (they name training and generation configs, which the synth stage does not import).

Input: each section of the composed config, via ``config.build(SynthConfig, cfg["synth"], "synth")`` and so on.
Output: the objects ``vegas.synth.run_synth`` and ``vegas.verifier.run_verifier`` take.
Defaults are the paper's values where it states them (N = 16 candidates at T = 0.7, M = 5 verifications, one
failure trajectory per expert trajectory in three modes, the verifier initialised like the policy); the tiny CPU
preset sizes them down in ``conf/experiment/tiny.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import check

MODES = ("wrong_object", "wrong_receptacle", "precondition")


@dataclass(frozen=True)
class SynthConfig:
    # episode split whose expert trajectories get failures (the paper: the policy's SFT trajectories)
    split: str = "train"
    # at most this many episodes, in file order (0 = all)
    max_episodes: int = 0
    # failure modes (each episode gets one failure trajectory, in the feasible mode used least so far)
    modes: tuple[str, ...] = MODES
    # share of the episodes held out (by episode) for the verifier's own validation (balanced accuracy, AUROC)
    val_fraction: float = 0.05
    # who writes the verification chains of thought: template (simulator facts, several wordings; offline) |
    # teacher (the OpenAI-compatible teacher of the `teacher:` section, cached like distillation)
    cot: Literal["template", "teacher"] = "template"
    # wording of the candidate's reasoning (the scripted teacher's, which the SFT policy imitates): full | brief
    reasoning: Literal["full", "brief"] = "full"
    # the templated chain of thought's sentence on a `find a X` action: exec (whether the simulator accepts it, which
    # depends on objects the prompt does not list) | relevance (what X is to the task: needed, a tool, already here, not
    # needed); the verifier stage words its on-policy records the same way (docs/vegas.md §4)
    find_sentence: Literal["exec", "relevance"] = "exec"
    # where the verdict line goes in a verification: last (the paper's: the chain of thought, then the verdict) | first
    # (the verdict, then the chain of thought as its rationale: P(yes) is read from the prompt alone, not after a
    # chain of thought the verifier may get wrong); the on-policy records and teacher CoTs follow it (docs/vegas.md §4)
    verdict: Literal["last", "first"] = "last"
    # teacher CoTs: at most this many characters kept per chain of thought
    cot_max_chars: int = 600
    # seed of every draw (modes, injection steps, wrong objects, wordings, the held-out split)
    seed: int = 0

    def __post_init__(self) -> None:
        check(bool(self.split), "split", "must name an episode split, e.g. train")
        check(self.max_episodes >= 0, "max_episodes", f"must be >= 0 (0 = all), got {self.max_episodes}")
        check(len(self.modes) >= 1, "modes", f"name at least one of {list(MODES)}")
        bad = [m for m in self.modes if m not in MODES]
        check(not bad, "modes", f"unknown mode(s) {bad}; choose from {list(MODES)}")
        check(len(set(self.modes)) == len(self.modes), "modes", f"must be unique, got {list(self.modes)}")
        check(0.0 <= self.val_fraction < 1.0, "val_fraction", f"must be in [0, 1), got {self.val_fraction}")
        check(self.cot_max_chars >= 40, "cot_max_chars", f"must be >= 40, got {self.cot_max_chars}")


__all__ = ["MODES", "SynthConfig"]
