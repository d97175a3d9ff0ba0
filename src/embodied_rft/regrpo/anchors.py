"""Constructed group members for ReGRPO's RL (``grpo.anchors``; docs/regrpo.md §5).

The paper describes GRPO over sampled groups; its released trainer (showlab/ReGRPO, ``regrpo/rl``) scores
*constructed* groups per RoT record instead: the correct action alone, the failed action again, the reflection
followed by the correct action, and a corrupted action. This module writes those members for a RoT state (a
decomposed sample with a ``rot`` field, ``regrpo/rot.py``) as full EB answers in the SFT data's own style, so the
GRPO engine can put them into the state's group beside the policy's samples and score them with the same reward:

- ``correct``: the scripted teacher's plain answer for the corrected plan (what the plain-recovery SFT arm trains on);
- ``reflect``: the same answer with ``reasoning_and_reflection`` replaced by the scripted triple — byte for byte the
  rot SFT arm's target (``regrpo/distill.py``: same teacher, same triple seed);
- ``failed``: the teacher's answer for the failed action tried again, then the corrected plan (repeat-after-failure);
- ``corrupted``: the teacher's answer for a plan that starts with another global action (seeded per sample), then the
  corrected plan's remaining steps.

Every member is a pure function of the sample, the teacher settings and the seeds, so a resumed run builds the same
groups. Input: a RoT sample. Output: ``[(kind, answer_text)]`` in the order asked.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence

from ..schema import format_label, read_label
from ..teacher.config import ScriptedConfig
from ..teacher.scripted import ScriptedTeacher
from ..world.actions import N_GLOBAL, ActionSpace
from .config import ANCHOR_KINDS, check_anchor_kinds
from .text import format_triple
from .write import scripted_triple, triple_rng


class AnchorWriter:
    """The constructed members of a RoT state's group (module docstring).

    ``teacher``: the scripted teacher's settings of the SFT data (its phrasing seed and verbosity; its noise and error
    models are switched off: a constructed member is exact by definition); ``rot_seed``: ``teacher.rot.seed``, the
    triples' wording seed; ``seed``: the corrupted action's draw."""

    def __init__(self, kinds: Sequence[str], teacher: ScriptedConfig, rot_seed: int, seed: int) -> None:
        check_anchor_kinds(tuple(kinds))
        self.kinds = tuple(kinds)
        exact = ScriptedConfig(seed=teacher.seed, verbosity=teacher.verbosity)
        self.teacher = ScriptedTeacher(exact)
        self.rot_seed = rot_seed
        self.seed = seed

    def applies(self, sample: dict) -> bool:
        return bool(self.kinds) and isinstance(sample.get("rot"), dict)

    def _answer(self, sample: dict, plan: list[tuple[int, str]] | None = None, extras: tuple[str, ...] = ()) -> dict:
        """The teacher's answer for ``sample``, or for it with ``plan`` as its gold remaining plan."""
        if plan is not None:
            sample = {**sample, "label": format_label(plan, extras)}
        return self.teacher.respond(sample)

    def _corrupt(self, sample: dict, gold: list[tuple[int, str]], space: ActionSpace) -> tuple[int, str]:
        avoid = {gold[0][1] if gold else None, sample["rot"]["failed_action"][1]}
        digest = hashlib.sha256(f"{self.seed}\x00{sample['sample_id']}\x00corrupt".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        name = rng.choice([n for n in space.names[:N_GLOBAL] if n not in avoid])
        return space.id(name), name

    def answers(self, sample: dict) -> list[tuple[str, str]]:
        """``[(kind, answer text)]`` for a RoT sample, in ``kinds`` order."""
        if not self.applies(sample):
            raise ValueError(f"sample {sample.get('sample_id')!r}: constructed members need a RoT sample ('rot' field)")
        gold, extras = read_label(sample["label"], str(sample.get("sample_id", "sample")))
        rot = sample["rot"]
        out = []
        for kind in self.kinds:
            if kind == "correct":
                obj = self._answer(sample)
            elif kind == "reflect":
                obj = self._answer(sample)
                obj["reasoning_and_reflection"] = format_triple(
                    scripted_triple(sample, triple_rng(self.rot_seed, sample["sample_id"]))
                )
            elif kind == "failed":
                a_fail = (int(rot["failed_action"][0]), str(rot["failed_action"][1]))
                obj = self._answer(sample, [a_fail, *gold], extras)
            else:  # corrupted
                wrong = self._corrupt(sample, gold, ActionSpace(extras))
                obj = self._answer(sample, [wrong, *gold[1:]], extras)
            out.append((kind, json.dumps(obj, ensure_ascii=False)))
        return out


__all__ = ["ANCHOR_KINDS", "AnchorWriter"]
