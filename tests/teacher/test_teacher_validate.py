"""Validation (rejection sampling): table-driven verdicts on literal answers."""

from __future__ import annotations

import json

import pytest

from embodied_rft.teacher import validate_answer
from embodied_rft.teacher.validate import check_prefix
from tests.helpers.teacher_fixtures import make_samples

# ep001 is the cool-tomato task whose scene has Cabinet_2 (extras 162..164); step 9 leaves 5 actions.
SAMPLE = next(s for s in make_samples(2, with_failures=False) if s["sample_id"] == "ep001:9")
GOLD = json.loads(SAMPLE["label"])["gold"]


def _answer(plan, **over) -> str:
    obj = {
        "visual_state_description": "I see a fridge.",
        "reasoning_and_reflection": "Chill the tomato, then store it.",
        "language_plan": "1. close the fridge ...",
        "executable_plan": [{"action_id": a, "action_name": n} for a, n in plan],
    }
    obj.update(over)
    return json.dumps(obj)


def test_fixture_is_what_the_table_assumes():
    assert [n for _, n in GOLD] == [
        "close the Fridge",
        "find a Cabinet_2",
        "open the Cabinet_2",
        "put down the object in hand",
        "close the Cabinet_2",
    ]
    assert [a for a, _ in GOLD] == [140, 162, 163, 133, 164]


CASES = [
    # (name, answer text, mode, min_prefix, accepted, kind)
    ("exact gold", _answer(GOLD), "prefix", None, True, None),
    ("in a code fence with prose", "Sure:\n```json\n" + _answer(GOLD) + "\n```", "prefix", None, True, None),
    ("one step short", _answer(GOLD[:4]), "prefix", None, False, "wrong_plan"),
    ("short but >= min_prefix", _answer(GOLD[:3]), "prefix", 3, True, None),
    ("short of min_prefix", _answer(GOLD[:2]), "prefix", 3, False, "wrong_plan"),
    ("min_prefix above gold length: whole plan", _answer(GOLD), "prefix", 50, True, None),
    (
        "an extra step past the goal",
        _answer(GOLD + [[133, "put down the object in hand"]]),
        "prefix",
        None,
        False,
        "wrong_plan",
    ),
    (
        "an extra step past the goal, min_prefix",
        _answer(GOLD + [[133, "put down the object in hand"]]),
        "prefix",
        1,
        False,
        "wrong_plan",
    ),
    ("wrong first step", _answer([[139, "open the Fridge"]] + GOLD[1:]), "prefix", 1, False, "wrong_plan"),
    ("swapped steps", _answer([GOLD[1], GOLD[0]] + GOLD[2:]), "prefix", None, False, "wrong_plan"),
    ("wrong plan, mode none", _answer([[139, "open the Fridge"]]), "none", None, True, None),
    ("id/name mismatch", _answer([[141, "close the Fridge"]] + GOLD[1:]), "prefix", None, False, "invalid_plan"),
    ("extra id not in this scene", _answer([[165, "find a Cabinet_3"]]), "none", None, False, "invalid_plan"),
    ("string id", _answer([["140", "close the Fridge"]] + GOLD[1:]), "prefix", None, False, "invalid_plan"),
    ("lower-cased name", _answer([[140, "close the fridge"]] + GOLD[1:]), "prefix", None, False, "invalid_plan"),
    ("empty plan", _answer([]), "none", None, False, "invalid_plan"),
    (
        "missing key",
        json.dumps({"reasoning_and_reflection": "", "language_plan": "", "executable_plan": []}),
        "none",
        None,
        False,
        "invalid_plan",
    ),
    ("non-string field", _answer(GOLD, language_plan=["1. close the fridge"]), "prefix", None, False, "invalid_plan"),
    ("plan not a list", _answer(GOLD, executable_plan={"action_id": 140}), "prefix", None, False, "invalid_plan"),
    ("prose only", "I would close the fridge and then open the cabinet.", "prefix", None, False, "bad_json"),
    ("empty text", "", "prefix", None, False, "bad_json"),
]


@pytest.mark.parametrize("name,text,mode,min_prefix,accepted,kind", CASES, ids=[c[0] for c in CASES])
def test_verdicts(name, text, mode, min_prefix, accepted, kind):
    v = validate_answer(text, SAMPLE, mode, min_prefix)
    assert (v.accepted, v.kind) == (accepted, kind), v.reason
    if accepted:
        # what is trained on is the canonical form: EB key order, only the two step fields
        obj = json.loads(v.canonical)
        assert list(obj) == ["visual_state_description", "reasoning_and_reflection", "language_plan", "executable_plan"]
        assert v.canonical == v.canonical.strip() and "```" not in v.canonical


def test_canonical_drops_extra_step_fields_and_keeps_text():
    text = json.dumps(
        {
            "reasoning_and_reflection": "r",
            "visual_state_description": "v",
            "language_plan": "l",
            "executable_plan": [{"action_id": a, "action_name": n, "note": "x"} for a, n in GOLD],
            "extra": 1,
        }
    )
    v = validate_answer(text, SAMPLE, "prefix")
    assert v.accepted
    assert json.loads(v.canonical) == {
        "visual_state_description": "v",
        "reasoning_and_reflection": "r",
        "language_plan": "l",
        "executable_plan": [{"action_id": a, "action_name": n} for a, n in GOLD],
    }


def test_check_prefix_reasons_name_the_step():
    g = [(1, "a"), (2, "b"), (3, "c")]
    assert check_prefix(g, g, None) is None
    assert "step 1" in check_prefix([(1, "a"), (9, "z")], g, None)
    assert "needs 3" in check_prefix(g[:2], g, None)
    assert check_prefix(g[:2], g, 2) is None
    assert "beyond" in check_prefix(g + [(4, "d")], g, 1)


def test_simulate_mode_requires_the_episode():
    with pytest.raises(KeyError, match="needs its episode"):
        validate_answer(_answer(GOLD), SAMPLE, "simulate")
