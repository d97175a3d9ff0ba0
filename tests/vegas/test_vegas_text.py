"""The verifier's text (vegas/text.py, vegas/templates.py): verdict parsing, the verdict line, the templated chain
of thought over simulator facts, the prompt, and the template corpus the tokenizer may learn from."""

from __future__ import annotations

import json
import random

import pytest

from embodied_rft.vegas.templates import BY_REASON, TEMPLATE_REPEAT, VERDICT_KEY, template_corpus
from embodied_rft.vegas.text import (
    Facts,
    argument_role,
    parse_verdict,
    verification_cot,
    verification_messages,
    with_verdict,
)
from embodied_rft.world.episode import Goal


@pytest.mark.parametrize(
    "text, verdict",
    [
        ("The Mug is here.\naction_is_correct: yes", "yes"),
        ("action_is_correct: NO", "no"),
        ('{"action_is_correct": "yes"}', "yes"),
        ("action_is_correct = no.", "no"),
        ("first action_is_correct: yes, then on reflection action_is_correct: no", "no"),  # the last one wins
        ("'action_is_correct': 'yes'", "yes"),
        ("action_is_correct: maybe", None),
        ("action_is_correct:yesterday", None),
        ("the action is correct", None),
        ("", None),
        (None, None),
        (42, None),
    ],
)
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) == verdict


def test_with_verdict_replaces_any_verdict_the_text_states():
    assert with_verdict("Looks fine.\naction_is_correct: yes", "no") == f"Looks fine.\n{VERDICT_KEY}: no"
    assert with_verdict("It fails. action_is_correct: yes", "no").endswith("It fails.\naction_is_correct: no")
    assert with_verdict("action_is_correct: yes", "yes") == "action_is_correct: yes"
    # synth.verdict=first: the verdict line opens the text, any verdict the text states is still removed
    assert with_verdict("Looks fine.\naction_is_correct: yes", "no", "first") == f"{VERDICT_KEY}: no\nLooks fine."
    assert with_verdict("", "yes", "first") == "action_is_correct: yes"
    with pytest.raises(ValueError, match="synth.verdict"):
        with_verdict("Looks fine.", "yes", "middle")


def _facts(**kw) -> Facts:
    base = dict(
        action="pick up the Apple",
        task_type="pick_clean_then_place_in_recep",
        object_target="Apple",
        parent_target="Fridge",
        toggle_target=None,
        held=None,
        place="CounterTop",
        executes=False,
        feedback="Last action is invalid. Cannot pick up the Apple: it is not within reach. Find the object first",
        label="wrong",
        reason="invalid",
    )
    base.update(kw)
    return Facts(**base)


def test_cot_states_the_facts_and_ends_with_the_oracles_verdict():
    bad = verification_cot(_facts(), random.Random(0))
    lines = bad.splitlines()
    assert len(lines) == 3 and lines[-1] == "action_is_correct: no" and parse_verdict(bad) == "no"
    assert "clean a Apple and put it in the Fridge" in lines[0] and "the CounterTop" in lines[0]
    assert "cannot pick up the Apple: it is not within reach" in lines[1] and "pick up the Apple" in lines[1]
    good = verification_cot(
        _facts(action="find a Apple", executes=True, feedback="ok", label="correct", reason="shortens", place=None),
        random.Random(0),
    )
    assert good.endswith("action_is_correct: yes") and "the middle of the room" in good
    look = verification_cot(
        _facts(task_type="look_at_obj_in_light", toggle_target="DeskLamp", parent_target=None, held="Apple"),
        random.Random(1),
    )
    assert "hold a Apple under a lit DeskLamp" in look and "the Apple" in look.splitlines()[0]


def test_verdict_first_moves_only_the_verdict_line():
    for seed in range(8):
        for facts in (_facts(), _facts(action="find a Apple", executes=True, label="correct", reason="shortens")):
            last = verification_cot(facts, random.Random(seed)).splitlines()
            first = verification_cot(facts, random.Random(seed), verdict="first").splitlines()
            assert first == [last[-1], *last[:-1]]  # same sentences, same wording draws
            assert parse_verdict("\n".join(first)) == facts.verdict


def test_cot_wordings_vary_with_the_seed():
    texts = {verification_cot(_facts(), random.Random(s)) for s in range(30)}
    assert len(texts) >= 5 and all(t.endswith("action_is_correct: no") for t in texts)


def test_relevance_sentence_replaces_the_simulators_answer_on_finds_only():
    # a find of an object the scene lacks: exec states the rejection (not knowable from the prompt), relevance states
    # that the task does not need it; the goal/state line and the verdict are the same
    absent = _facts(
        action="find a Vase",
        feedback="Last action is invalid. Vase is not in this room",
        arg="Vase",
        arg_role="other",
    )
    for seed in range(6):
        ex = verification_cot(absent, random.Random(seed), "exec").splitlines()
        rel = verification_cot(absent, random.Random(seed), "relevance").splitlines()
        assert ex[0] == rel[0] and ex[2] == rel[2] == "action_is_correct: no"
        assert "fail" in ex[1] or "reject" in ex[1] or "not possible" in ex[1]
        assert "Vase" in rel[1].split(". ")[0] and "not" in rel[1].split(". ")[0]
        assert "reject" not in rel[1] and "fail" not in rel[1]
        assert rel[1].split(". ", 1)[1] in BY_REASON["no_progress"]  # a failed find: worded as no progress
    needed = _facts(
        action="find a Fridge", executes=True, label="correct", reason="shortens", arg="Fridge", arg_role="task"
    )
    assert "Fridge" in verification_cot(needed, random.Random(0), "relevance").splitlines()[1]
    assert "not" not in verification_cot(needed, random.Random(0), "relevance").splitlines()[1].split(".")[0]
    # non-find actions keep the simulator's answer
    pick = _facts(arg="Apple", arg_role="task")
    assert verification_cot(pick, random.Random(3), "relevance") == verification_cot(pick, random.Random(3), "exec")
    with pytest.raises(ValueError, match="find_sentence"):
        verification_cot(pick, random.Random(0), "oracle")
    with pytest.raises(ValueError, match="arg_role"):
        verification_cot(_facts(action="find a Vase"), random.Random(0), "relevance")


def test_prompt_shows_history_observation_reasoning_and_candidate():
    history = [{"action_id": 2, "action_name": "find a Apple", "feedback": "Last action executed successfully."}]
    (msg,) = verification_messages(
        "Chill an apple.", history, "You are at the CounterTop.", "next pick", 82, "pick up the Apple"
    )
    text = msg["content"]
    assert msg["role"] == "user" and "'action_is_correct: yes'" in text.splitlines()[-1]  # the format, last
    assert text.startswith("Task: Chill an apple.\nHistory:\n1. 2 find a Apple: ok\nObservation: You are at the")
    assert "Candidate reasoning: next pick\nCandidate action: 82 pick up the Apple\n" in text


def test_template_corpus_holds_every_phrase_at_least_twice():
    texts = list(template_corpus())
    assert TEMPLATE_REPEAT >= 2 and len(texts) > 400
    for needle in ("action_is_correct: yes", "action_is_correct: no", "The simulator would reject", "is possible now"):
        assert sum(needle in t for t in texts) >= 2, needle


def _goal(**kw) -> Goal:
    base = dict(object_target="Apple", parent_target="Fridge", mrecep_target=None, toggle_target=None)
    base.update(kw)
    return Goal(object_sliced=base.pop("object_sliced", False), **base)


@pytest.mark.parametrize(
    "action, task_type, goal, place, role",
    [
        ("find a Apple", "pick_clean_then_place_in_recep", {}, None, "task"),
        ("put down the object in hand", "pick_clean_then_place_in_recep", {}, None, None),
        ("open the Fridge", "pick_and_place_simple", {}, "Fridge", "task"),
        ("find a Sink", "pick_clean_then_place_in_recep", {}, None, "tool"),
        ("turn on the Faucet", "pick_clean_then_place_in_recep", {}, "Sink", "tool"),
        ("find a Sink", "pick_heat_then_place_in_recep", {}, None, "other"),  # heating needs no sink
        ("find a Microwave", "pick_heat_then_place_in_recep", {}, None, "tool"),
        ("find a Fridge", "pick_cool_then_place_in_recep", {"parent_target": "CounterTop"}, None, "tool"),
        ("find a Tomato", "pick_clean_then_place_in_recep", {}, None, "other"),  # a look-alike is not the task's
        ("find a Cabinet_2", "pick_and_place_simple", {}, "Cabinet_2", "here"),
        ("find a Cabinet_2", "pick_and_place_simple", {}, "Cabinet", "other"),  # another instance: not here
        ("find a Knife", "pick_and_place_simple", {"object_sliced": True}, None, "tool"),
        ("pick up the AppleSliced", "pick_and_place_simple", {"object_sliced": True}, None, "task"),
        ("find a Bowl", "pick_and_place_with_movable_recep", {"mrecep_target": "Bowl"}, None, "task"),
        (
            "turn on the DeskLamp",
            "look_at_obj_in_light",
            {"toggle_target": "DeskLamp", "parent_target": None},
            None,
            "task",
        ),
    ],
)
def test_argument_role_compares_the_action_with_the_task(action, task_type, goal, place, role):
    arg, got = argument_role(action, task_type, _goal(**goal), place)
    assert got == role and (arg is None) == (role is None)


def test_the_base_stage_learns_the_templates_from_the_text_set_the_plugin_registers(tmp_path):
    """``model.tokenizer_extra: [verification]``: the ``base`` stage finds the set through the ``plugins:`` table."""
    from stages.base import corpus

    (tmp_path / "sft.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    texts = list(corpus(tmp_path / "sft.jsonl", ("verification",)))
    assert texts == ["hi", *list(template_corpus()) * TEMPLATE_REPEAT]
