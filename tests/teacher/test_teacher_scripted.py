"""The scripted teacher: meaningful fields, controlled variety, validity at noise 0, rejections at noise > 0."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from embodied_rft.data.response import RESPONSE_KEYS, parse_response
from embodied_rft.teacher import ScriptedConfig, validate_answer
from embodied_rft.teacher.errors import corrupt
from embodied_rft.teacher.scripted import ScriptedTeacher, nl_steps, parse_label
from tests.helpers.teacher_fixtures import make_samples

SAMPLES = make_samples(24)  # 24 episodes, ~200 samples


def _first_words(text: str, n: int = 3) -> str:
    return " ".join(text.split()[:n])


def test_answers_are_complete_and_pass_validation_at_noise_zero():
    teacher = ScriptedTeacher(ScriptedConfig(seed=0, noise_rate=0.0))
    for s in SAMPLES:
        ans = teacher.ask(s, 0)
        obj = parse_response(ans.text)
        assert obj is not None and set(obj) == set(RESPONSE_KEYS)
        gold, _ = parse_label(s)
        assert [(st["action_id"], st["action_name"]) for st in obj["executable_plan"]] == gold
        v = validate_answer(ans.text, s, "prefix")
        assert v.accepted, (s["sample_id"], v)


def test_fields_refer_to_the_sample():
    teacher = ScriptedTeacher(ScriptedConfig())
    for s in SAMPLES:
        r = teacher.respond(s)
        instr = s["instruction"].rstrip(".").lower()
        assert instr in r["reasoning_and_reflection"].lower()
        # the language plan is numbered, one step per gold action
        gold, _ = parse_label(s)
        nums = re.findall(r"(?:^|\s|\()(\d+)(?:\.|:|\))", r["language_plan"])
        assert [int(n) for n in nums] == list(range(1, len(gold) + 1)), r["language_plan"]
        # the visual description is the observation, in the first person
        assert "You are" not in r["visual_state_description"]
        assert s["observation"].split(". ")[1].replace("You see", "I see") in r["visual_state_description"]
        if s["history"]:
            last = s["history"][-1]
            assert last["action_name"] in r["reasoning_and_reflection"]
            if "invalid" in last["feedback"]:
                assert re.search(r"failed|did not work|invalid", r["reasoning_and_reflection"])
        else:
            assert re.search(r"[Nn]othing has been done|[Nn]o actions|first step", r["reasoning_and_reflection"])


def test_failed_history_is_reflected_on():
    failed = [s for s in SAMPLES if s["history"] and "invalid" in s["history"][-1]["feedback"]]
    assert len(failed) >= 10
    teacher = ScriptedTeacher(ScriptedConfig())
    for s in failed:
        text = teacher.respond(s)["reasoning_and_reflection"]
        assert "not visible" in text  # the env feedback itself is quoted


def test_put_down_reads_as_the_held_object_into_the_last_found_receptacle():
    assert nl_steps(
        ["find a Apple", "pick up the Apple", "find a Fridge", "put down the object in hand"], None, None, 0
    ) == ["find the apple", "pick up the apple", "find the fridge", "put the apple in the fridge"]
    assert nl_steps(["put down the object in hand"], "Mug", "CounterTop", 1) == ["place the mug on the counter top"]
    assert nl_steps(["find a Cabinet_2"], None, None, 2) == ["locate the cabinet 2"]


def test_phrasings_vary_and_are_deterministic():
    teacher = ScriptedTeacher(ScriptedConfig(seed=0))
    answers = [teacher.respond(s) for s in SAMPLES]
    openings = Counter(_first_words(a["reasoning_and_reflection"], 2) for a in answers)
    visual = Counter(_first_words(a["visual_state_description"], 2) for a in answers)
    numbering = Counter(re.match(r"\(?\w+", a["language_plan"]).group(0).rstrip("0123456789") for a in answers)
    whole = {json.dumps(a, sort_keys=True) for a in answers}
    assert len(openings) >= 4, openings
    assert len(visual) >= 4, visual
    assert len(numbering) >= 3, numbering  # "1." / "Step 1:" / "(1)"
    assert len(whole) == len(answers)  # no two answers identical
    # no single opening dominates (each of 4 appears in roughly a quarter of answers)
    assert max(openings.values()) < 0.45 * len(answers)
    # same seed, sample and index: same answer; a new index or seed: a different wording, same plan
    again = [ScriptedTeacher(ScriptedConfig(seed=0)).respond(s) for s in SAMPLES]
    assert again == answers
    other = [teacher.respond(s, 1) for s in SAMPLES]
    assert sum(a != b for a, b in zip(answers, other)) > 0.8 * len(answers)
    assert all(a["executable_plan"] == b["executable_plan"] for a, b in zip(answers, other))


def test_answers_stay_compact():
    teacher = ScriptedTeacher(ScriptedConfig())
    lengths = [len(teacher.ask(s, 0).text) for s in SAMPLES]
    mean_chars = sum(lengths) / len(lengths)
    # ~4 characters per BPE token: a mean of 400-1000 chars is ~100-250 tokens
    assert 400 <= mean_chars <= 1000, mean_chars


@pytest.mark.parametrize("rate", [0.2, 0.5])
def test_noise_makes_a_measurable_fraction_fail_validation(rate):
    teacher = ScriptedTeacher(ScriptedConfig(seed=3, noise_rate=rate))
    kinds = Counter(validate_answer(teacher.ask(s, 0).text, s, "prefix").kind for s in SAMPLES)
    failed = len(SAMPLES) - kinds[None]
    assert abs(failed / len(SAMPLES) - rate) < 0.12, kinds
    assert kinds["wrong_plan"] > 0 and kinds["invalid_plan"] > 0, kinds


def test_corrupt_always_changes_the_plan():
    import random

    for s in SAMPLES:
        gold, space = parse_label(s)
        for k in range(5):
            bad = corrupt([list(p) for p in gold], space, random.Random(k))
            assert [tuple(p) for p in bad] != gold


def test_brief_verbosity_keeps_all_fields_valid_and_short():
    full, brief = ScriptedTeacher(ScriptedConfig()), ScriptedTeacher(ScriptedConfig(verbosity="brief"))
    n_full = n_brief = 0
    for s in SAMPLES:
        text = brief.ask(s, 0).text
        obj = parse_response(text)
        assert obj is not None and all(obj[k] for k in RESPONSE_KEYS)
        assert validate_answer(text, s, "prefix").accepted
        if s["history"] and "invalid" in s["history"][-1]["feedback"]:  # reflects on the failed step
            assert f"'{s['history'][-1]['action_name']}' failed; replan" in obj["reasoning_and_reflection"]
        else:  # refers to the progress so far
            assert f"{len(s['history'])} " in obj["reasoning_and_reflection"]
        assert obj["visual_state_description"].startswith("I am ")
        n_full += len(full.ask(s, 0).text)
        n_brief += len(text)
    assert n_brief < 0.75 * n_full, (n_brief, n_full)


def test_forget_open_drops_each_opening_and_its_closing_only():
    from embodied_rft.teacher.errors import forget_open

    plan = [
        (1, "find a Fridge"),
        (2, "open the Fridge"),
        (3, "pick up the Apple"),
        (4, "close the Fridge"),
        (5, "find a Drawer_2"),
        (6, "close the Drawer_2"),
        (7, "open the Cabinet_2"),
        (8, "put down the object in hand"),
    ]
    # the Drawer_2 close stays: its opening was not in the plan (it was open already)
    assert forget_open(plan) == [
        (1, "find a Fridge"),
        (3, "pick up the Apple"),
        (5, "find a Drawer_2"),
        (6, "close the Drawer_2"),
        (8, "put down the object in hand"),
    ]
    assert forget_open([(1, "find a Apple")]) == [(1, "find a Apple")]


@pytest.mark.parametrize("verbosity", ["full", "brief"])
def test_forget_open_rate_is_a_systematic_habit_on_plans_that_open(verbosity):
    from embodied_rft.teacher.errors import forget_open

    rate = 0.6
    plain = ScriptedTeacher(ScriptedConfig(seed=5, verbosity=verbosity))
    habit = ScriptedTeacher(ScriptedConfig(seed=5, verbosity=verbosity, forget_open_rate=rate))
    opening = forgot = 0
    for s in SAMPLES:
        gold, _ = parse_label(s)
        a = habit.respond(s)
        plan = [(st["action_id"], st["action_name"]) for st in a["executable_plan"]]
        if not any(n.startswith("open the") for _, n in gold):
            assert a == plain.respond(s)  # the habit only touches plans that open something
            continue
        opening += 1
        assert plan in (gold, forget_open(gold))
        if plan != gold:
            forgot += 1
            # the NL plan leaves the opening out too, and the answer is still well-formed
            assert not re.search(r"\bopen\b", a["language_plan"]), a["language_plan"]
            assert validate_answer(json.dumps(a), s, "none").accepted
            assert validate_answer(json.dumps(a), s, "prefix").kind == "wrong_plan"
    assert opening >= 20, opening
    assert abs(forgot / opening - rate) < 0.2, (forgot, opening)


def test_forget_open_rate_out_of_range_is_named():
    from embodied_rft.config import ConfigError

    with pytest.raises(ConfigError, match="teacher.scripted.forget_open_rate"):
        ScriptedConfig(forget_open_rate=1.5)


def test_make_error_writes_each_kind_as_a_valid_wrong_plan():
    import random

    from embodied_rft.teacher.config import ERROR_KINDS
    from embodied_rft.teacher.errors import LOOKALIKE_OBJECTS, LOOKALIKE_RECEPTACLES, make_error
    from embodied_rft.world.actions import PUT_DOWN, split_action

    seen = Counter()
    for i, s in enumerate(SAMPLES):
        gold, space = parse_label(s)
        for kind in ERROR_KINDS:
            plan, got = make_error(gold, space, random.Random(i), {kind: 1.0})
            if got is None:
                assert plan == gold
                continue
            seen[got] += 1
            assert got == kind and plan != gold
            assert all(space.valid_pair(a, n) for a, n in plan)  # every step still an entry of the action map
            if kind == "wrong_object":
                picked = next(split_action(n)[1] for _, n in gold if n.startswith("pick up the "))
                assert f"pick up the {LOOKALIKE_OBJECTS[picked]}" in [n for _, n in plan]
                assert f"pick up the {picked}" not in [n for _, n in plan]
            elif kind == "wrong_receptacle":
                last_find = [
                    n
                    for k, (_, n) in enumerate(gold)
                    if n.startswith("find a ") and k < max(j for j, (_, m) in enumerate(gold) if m == PUT_DOWN)
                ][-1]
                assert f"find a {LOOKALIKE_RECEPTACLES[split_action(last_find)[1]]}" in [n for _, n in plan]
            elif kind == "skip_step":
                assert len(plan) == len(gold) - 1
            elif kind == "extra_step":
                assert len(plan) == len(gold) + 1
            else:
                assert sorted(plan) == sorted(gold) and len(plan) == len(gold)
    assert all(seen[k] >= 5 for k in ERROR_KINDS), seen  # the fixture's plans allow every kind


@pytest.mark.parametrize("verbosity", ["full", "brief"])
def test_error_rate_puts_mistakes_in_that_share_of_answers(verbosity):
    rate = 0.4
    plain = ScriptedTeacher(ScriptedConfig(seed=2, verbosity=verbosity))
    noisy = ScriptedTeacher(ScriptedConfig(seed=2, verbosity=verbosity, error_rate=rate))
    exact = ScriptedTeacher(ScriptedConfig(seed=2, verbosity=verbosity, error_rate=0.0))
    wrong = 0
    for s in SAMPLES:
        assert exact.respond(s) == plain.respond(s)  # rate 0: the exact teacher, answer for answer
        a = noisy.respond(s)
        assert validate_answer(json.dumps(a), s, "none").accepted  # well-formed: validate=none keeps it
        if not validate_answer(json.dumps(a), s, "prefix").accepted:
            wrong += 1
    assert abs(wrong / len(SAMPLES) - rate) < 0.12, (wrong, len(SAMPLES))
    assert "errors=0.4" in noisy.model and "errors" not in plain.model  # a new cache key, the old answers kept


def test_error_mix_is_checked():
    from embodied_rft.config import ConfigError

    with pytest.raises(ConfigError, match="teacher.scripted.error_mix: unknown kinds"):
        ScriptedConfig(error_mix={"wrong_colour": 1.0})
    with pytest.raises(ConfigError, match="teacher.scripted.error_rate: must be in"):
        ScriptedConfig(error_rate=2.0)
