"""The paper's reward and the RR-code variant: literal responses with exact breakdowns, label forms,
property tests (bounds, prefix monotonicity, determinism, never raising) and the replay command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embodied_rft import reward
from embodied_rft.config import ConfigError, build
from embodied_rft.data.response import format_response
from embodied_rft.reward import REWARDS, RewardBreakdown, RewardConfig, parse_label, score, score_batch
from embodied_rft.schema import format_label
from embodied_rft.tools.reward_replay import main as replay_main
from embodied_rft.world.actions import ActionSpace, global_actions

# A cool-the-mug task, k = 5 remaining actions; the scene has a second cabinet (ids 162-164).
GOLD5 = [
    (14, "find a Mug"),
    (97, "pick up the Mug"),
    (78, "find a Fridge"),
    (139, "open the Fridge"),
    (133, "put down the object in hand"),
]
EXTRAS = ["find a Cabinet_2", "open the Cabinet_2", "close the Cabinet_2"]
LABEL5 = (
    '{"gold": [[14, "find a Mug"], [97, "pick up the Mug"], [78, "find a Fridge"], [139, "open the Fridge"],'
    ' [133, "put down the object in hand"]], "extra_actions": ["find a Cabinet_2", "open the Cabinet_2", "close the Cabinet_2"]}'
)
LABEL1 = '[[133, "put down the object in hand"]]'  # a bare list of pairs, k = 1

HEAD = (
    '{"visual_state_description": "A mug is on the counter.", "reasoning_and_reflection": "Cool the mug first.",'
    ' "language_plan": "find it, pick it up, cool it", "executable_plan": '
)
MUG = '{"action_id": 14, "action_name": "find a Mug"}'
PICK = '{"action_id": 97, "action_name": "pick up the Mug"}'
FRIDGE = '{"action_id": 78, "action_name": "find a Fridge"}'
OPEN = '{"action_id": 139, "action_name": "open the Fridge"}'
PUT = '{"action_id": 133, "action_name": "put down the object in hand"}'
CLOSE = '{"action_id": 140, "action_name": "close the Fridge"}'
CAB2 = '{"action_id": 163, "action_name": "open the Cabinet_2"}'
CABINET = '{"action_id": 48, "action_name": "find a Cabinet"}'


def resp(*steps: str) -> str:
    return HEAD + "[" + ", ".join(steps) + "]}"


PERFECT = resp(MUG, PICK, FRIDGE, OPEN, PUT)
ZERO = (0, 0, 0, 0, 0, 0)

# (case, response, label, paper (structure, valid, match, accuracy, total, accuracy_full), rr_code (same))
TABLE = [
    ("perfect", PERFECT, LABEL5, (1 / 8, 1 / 8, 1 / 4, 1, 1.5, 1), (1 / 8, 1 / 8, 1 / 4, 1, 1.5, 1)),
    # The paper's worked example: k = 5, the first n = 3 match -> 3*4 / (5*6) = 12/30 = 0.4.
    (
        "worked example k=5 n=3",
        resp(MUG, PICK, FRIDGE, CLOSE, PUT),
        LABEL5,
        (1 / 8, 1 / 8, 1 / 4, 0.4, 0.9, 0),
        (1 / 8, 1 / 8, 1 / 4, 0.4, 0.9, 0),
    ),
    (
        "structure: language_plan missing",
        '{"visual_state_description": "x", "reasoning_and_reflection": "y", "executable_plan": ['
        + ", ".join([MUG, PICK, FRIDGE, OPEN, PUT])
        + "]}",
        LABEL5,
        (0, 1 / 8, 1 / 4, 1, 1.375, 1),
        (0, 1 / 8, 1 / 4, 1, 1.375, 1),
    ),
    # "14" (string), 78.0 (float) and true (bool) are not JSON integers; the RR code counts true as int
    # (Python's isinstance) and compares names only, so its prefix runs through all four steps.
    (
        "invalid step types",
        resp(
            '{"action_id": "14", "action_name": "find a Mug"}',
            PICK,
            '{"action_id": 78.0, "action_name": "find a Fridge"}',
            '{"action_id": true, "action_name": "open the Fridge"}',
        ),
        LABEL5,
        (1 / 8, 1 / 32, 1 / 16, 0, 7 / 32, 0),
        (1 / 8, 1 / 16, 1 / 16, 2 / 3, 1 / 8 + 1 / 8 + 2 / 3, 0),
    ),
    (
        "wrong id for the name",
        resp(MUG, '{"action_id": 98, "action_name": "pick up the Mug"}', FRIDGE, OPEN, PUT),
        LABEL5,
        (1 / 8, 1 / 8, 1 / 5, 1 / 15, 1 / 4 + 1 / 5 + 1 / 15, 0),
        (1 / 8, 1 / 8, 1 / 5, 1, 1.45, 1),
    ),
    (
        "wrong name for the id",
        resp(MUG, '{"action_id": 97, "action_name": "pick up the Apple"}', FRIDGE, OPEN, PUT),
        LABEL5,
        (1 / 8, 1 / 8, 1 / 5, 1 / 15, 1 / 4 + 1 / 5 + 1 / 15, 0),
        (1 / 8, 1 / 8, 1 / 5, 1 / 15, 1 / 4 + 1 / 5 + 1 / 15, 0),
    ),
    (
        "lower-cased names",
        resp(
            '{"action_id": 14, "action_name": "find a mug"}',
            '{"action_id": 97, "action_name": "pick up the mug"}',
            FRIDGE,
            OPEN,
            PUT,
        ),
        LABEL5,
        (1 / 8, 1 / 8, 3 / 20, 0, 0.4, 0),
        (1 / 8, 1 / 8, 1 / 4, 1, 1.5, 1),
    ),
    ("code-fenced", "```json\n" + PERFECT + "\n```", LABEL5, (1 / 8, 1 / 8, 1 / 4, 1, 1.5, 1), ZERO),
    ("trailing text", PERFECT + "\nThat is my plan.", LABEL5, (1 / 8, 1 / 8, 1 / 4, 1, 1.5, 1), ZERO),
    ("single quotes", PERFECT.replace('"', "'"), LABEL5, (1 / 8, 1 / 8, 1 / 4, 1, 1.5, 1), ZERO),
    ("empty plan", resp(), LABEL5, (1 / 8, 0, 0, 0, 1 / 8, 0), (1 / 8, 0, 0, 0, 1 / 8, 0)),
    # Steps beyond k are free for accuracy but count in the R_valid/R_match denominators.
    (
        "extra steps after the gold plan",
        resp(MUG, PICK, FRIDGE, OPEN, PUT, CAB2, '{"action_id": 7, "action_name": "nonsense"}'),
        LABEL5,
        (1 / 8, 1 / 8, 6 / 28, 1, 1.25 + 6 / 28, 1),
        (1 / 8, 1 / 8, 6 / 28, 1, 1.25 + 6 / 28, 1),
    ),
    (
        "scene extra action in the map",
        resp(CAB2),
        LABEL5,
        (1 / 8, 1 / 8, 1 / 4, 0, 1 / 2, 0),
        (1 / 8, 1 / 8, 1 / 4, 0, 1 / 2, 0),
    ),
    (
        "non-object step",
        resp(MUG, '"pick up the Mug"', FRIDGE),
        LABEL5,
        (1 / 8, 1 / 12, 1 / 6, 1 / 15, 1 / 8 + 1 / 12 + 1 / 6 + 1 / 15, 0),
        ZERO,
    ),
    (
        "null action_name",
        resp(MUG, '{"action_id": 97, "action_name": null}'),
        LABEL5,
        (1 / 8, 1 / 16, 1 / 8, 1 / 15, 1 / 8 + 1 / 16 + 1 / 8 + 1 / 15, 0),
        ZERO,
    ),
    ("plan is null", HEAD + "null}", LABEL5, (1 / 8, 0, 0, 0, 1 / 8, 0), ZERO),
    ("plan is an object", HEAD + MUG + "}", LABEL5, (1 / 8, 0, 0, 0, 1 / 8, 0), ZERO),
    ("not JSON", "I will find the mug first.", LABEL5, ZERO, ZERO),
    ("a JSON list", "[" + MUG + "]", LABEL5, ZERO, ZERO),
    ("empty response", "", LABEL5, ZERO, ZERO),
    # The RR code's k == 1 quirk: more than one predicted step costs 0.25 of accuracy.
    ("k=1 exact", resp(PUT), LABEL1, (1 / 8, 1 / 8, 1 / 4, 1, 1.5, 1), (1 / 8, 1 / 8, 1 / 4, 1, 1.5, 1)),
    (
        "k=1 right plus an extra step",
        resp(PUT, CABINET),
        LABEL1,
        (1 / 8, 1 / 8, 1 / 4, 1, 1.5, 1),
        (1 / 8, 1 / 8, 1 / 4, 0.75, 1.25, 0),
    ),
    (
        "k=1 wrong plus an extra step",
        resp(CABINET, PUT),
        LABEL1,
        (1 / 8, 1 / 8, 1 / 4, 0, 0.5, 0),
        (1 / 8, 1 / 8, 1 / 4, -0.25, 0.25, 0),
    ),
    (
        "k=1 penalty clamped at 0",
        '{"executable_plan": [{"action_id": "x", "action_name": "a"}, {"action_id": "y", "action_name": "b"}]}',
        LABEL1,
        (0, 0, 0, 0, 0, 0),
        (0, 0, 0, -0.25, 0, 0),
    ),
]
FIELDS = ("structure", "valid", "match", "accuracy", "total", "accuracy_full")


@pytest.mark.parametrize("variant", ["paper", "rr_code"])
@pytest.mark.parametrize("case,response,label,paper,rr", TABLE, ids=[t[0] for t in TABLE])
def test_table(case, response, label, paper, rr, variant):
    expected = paper if variant == "paper" else rr
    got = score(response, label, variant)
    assert tuple(getattr(got, f) for f in FIELDS) == pytest.approx(expected, abs=1e-12), case
    assert 0.0 <= got.total <= 1.5


def test_counts_of_the_worked_example():
    b = score(resp(MUG, PICK, FRIDGE, CLOSE, PUT), LABEL5)
    assert (b.n_matched, b.n_gold, b.n_steps, b.parsed) == (3, 5, 5, True)
    assert b.as_dict()["accuracy"] == pytest.approx(0.4)
    assert score("nonsense", LABEL5) == RewardBreakdown(0, 0, 0, 0, 0, 0, 0, 5, 0, False)


def test_prefix_accuracy_for_every_n():
    wrong = '{"action_id": 4, "action_name": "find a CoffeeMachine"}'
    steps = [MUG, PICK, FRIDGE, OPEN, PUT]
    accs = [score(resp(*steps[:n], *[wrong] * (5 - n)), LABEL5).accuracy for n in range(6)]
    assert accs == pytest.approx([0, 2 / 30, 6 / 30, 12 / 30, 20 / 30, 1])


def test_extras_come_from_the_label():
    with_extras = score(resp(CAB2), format_label([(163, "open the Cabinet_2")], EXTRAS))
    without = score(resp(CAB2), format_label([(163, "open the Cabinet_2")]))
    assert (with_extras.match, with_extras.accuracy) == (0.25, 1.0)
    assert (without.match, without.accuracy) == (0.0, 1.0)  # the pair is gold, but not in the global map


LABEL_FORMS = [
    LABEL5,
    LABEL5.encode(),
    json.loads(LABEL5),
    {"gold": [list(p) for p in GOLD5], "extra_actions": EXTRAS},
    [list(p) for p in GOLD5],
    [tuple(p) for p in GOLD5],
    [{"action_id": a, "action_name": n} for a, n in GOLD5],
    [n for _, n in GOLD5],  # names only: ids looked up in the action map
    str([n for _, n in GOLD5]),  # the RR code's label format, a Python literal string
]


@pytest.mark.parametrize("variant", ["paper", "rr_code"])
@pytest.mark.parametrize("form", range(len(LABEL_FORMS)))
def test_label_forms_agree(form, variant):
    response = resp(MUG, PICK, FRIDGE, CLOSE)
    got = score(response, LABEL_FORMS[form], variant)
    assert got == score(response, LABEL5, variant)
    assert parse_label(LABEL_FORMS[form]).pairs == tuple(GOLD5)


def test_format_label_round_trips():
    text = format_label(GOLD5, EXTRAS)
    assert json.loads(text) == json.loads(LABEL5)
    assert parse_label(text) == (tuple(GOLD5), tuple(EXTRAS))


@pytest.mark.parametrize(
    "label,k",
    [
        (None, 0),
        ("", 0),
        ("not a label", 0),
        ({"gold": "x"}, 0),
        ({"no_gold": []}, 0),
        (42, 0),
        ([], 0),
        ({"gold": [[1, 2], [True, "x"], [1.0, "y"], None]}, 4),
        ({"gold": GOLD5, "extra_actions": ["find a Mug"]}, 5),
        (b"\xff\xfe", 0),
        ("[" * 10000, 0),
    ],
)
def test_malformed_labels_never_raise(label, k):
    b = score(PERFECT, label)
    assert b.n_gold == k
    assert b.accuracy == (1.0 if k == 5 else 0.0)  # 'find a Mug' as an extra is ignored with a warning
    assert b.structure == 0.125 and 0 <= b.total <= 1.5


def test_bad_label_warnings_are_rate_limited(caplog):
    reward._warned.clear()
    with caplog.at_level("WARNING", logger="embodied_rft.reward"):
        for i in range(20):
            score(PERFECT, f"not a label {i}")
    assert len(caplog.records) == 5
    assert "suppressed" in caplog.records[-1].getMessage()


@pytest.mark.parametrize(
    "response",
    [
        None,
        0,
        1.5,
        float("nan"),
        b"\x80\x81",
        bytearray(PERFECT.encode()),
        ["x"],
        {"executable_plan": "x"},
        PERFECT * 200,
        "{" * 100000,
        '{"executable_plan": [' + '{"action_id": NaN, "action_name": "x"},' * 50 + "1]}",
        '{"executable_plan": [{"action_id": Infinity, "action_name": 5}, {"action_id": 1e400, "action_name": []}]}',
        '{"executable_plan": [{"action_id": ' + "9" * 5000 + ', "action_name": "x"}]}',
        '{"executable_plan": [{"action_id": -1, "action_name": "find a Mug"}, {"action_id": 99999, "action_name": "x"}]}',
    ],
)
@pytest.mark.parametrize("variant", ["paper", "rr_code"])
def test_odd_responses_never_raise(response, variant):
    b = REWARDS[variant](response, LABEL5)  # the unguarded function: no exception may reach score()'s guard
    assert 0.0 <= b.total <= 1.5
    assert b.accuracy_full in (0.0, 1.0)


def test_bytes_and_dict_responses_score_like_text():
    assert score(PERFECT.encode(), LABEL5) == score(PERFECT, LABEL5)
    assert score(json.loads(PERFECT), LABEL5) == score(PERFECT, LABEL5)
    assert score(json.loads(PERFECT), LABEL5, "rr_code") == score(PERFECT, LABEL5, "rr_code")


def test_long_response_is_cut_at_max_chars():
    padded = PERFECT[:-2] + '], "pad": "' + "x" * 70000 + '"}'
    assert score(padded, LABEL5).total == 0.0  # the object does not close inside 64 Ki characters
    assert score(padded, LABEL5, max_chars=80000).total == 1.5


def test_score_batch_and_config():
    responses = [PERFECT, resp(MUG, PICK, FRIDGE, CLOSE, PUT), "x"]
    labels = [LABEL5] * 3
    assert [b.total for b in score_batch(responses, labels)] == pytest.approx([1.5, 0.9, 0.0])
    cfg = build(RewardConfig, {"variant": "rr_code"}, "reward")
    assert cfg.score_batch(responses, labels) == [score(r, LABEL5, "rr_code") for r in responses]
    # k == 1 and 5 predicted steps: the first is wrong, so 0 - 0.25; the total stays at the format terms.
    assert (cfg.score(PERFECT, LABEL1).accuracy, cfg.score(PERFECT, LABEL1).total) == (-0.25, 0.25)
    with pytest.raises(ValueError, match="2 labels"):
        score_batch(responses, labels[:2])
    with pytest.raises(ValueError, match="unknown reward variant 'nope'"):
        score(PERFECT, LABEL5, "nope")
    with pytest.raises(ConfigError, match=r"reward.variant: 'nope' is not one of"):
        build(RewardConfig, {"variant": "nope"}, "reward")
    with pytest.raises(ConfigError, match="reward.max_response_chars"):
        RewardConfig(max_response_chars=10)
    with pytest.raises(ConfigError, match="did you mean 'variant'"):
        build(RewardConfig, {"varient": "paper"}, "reward")


# ------------------------------------------------------------------------------------ properties

ACTIONS = global_actions()
pairs_st = st.lists(st.integers(0, len(ACTIONS) - 1).map(lambda i: (i, ACTIONS[i])), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(pairs_st, st.sampled_from(["paper", "rr_code"]))
def test_accuracy_increases_with_the_matched_prefix(gold, variant):
    """n correct steps then wrong ones: accuracy strictly increases with n, the total never decreases."""
    k = len(gold)
    label = format_label(gold)
    prev_acc, prev_total = -1.0, -1.0
    for n in range(k + 1):
        # Wrong steps are valid map entries whose names differ from the gold one at that position.
        plan = gold[:n] + [((g[0] + 1) % 162, ACTIONS[(g[0] + 1) % 162]) for g in gold[n:]]
        b = REWARDS[variant](format_response(plan), label)
        assert b.n_matched == n and b.n_gold == k
        assert b.accuracy == pytest.approx(n * (n + 1) / (k * (k + 1)))
        assert b.accuracy > prev_acc and b.total >= prev_total
        assert b.accuracy_full == (1.0 if n == k else 0.0)
        prev_acc, prev_total = b.accuracy, b.total


json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_any = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=15,
)
step_st = st.one_of(
    json_any,
    st.fixed_dictionaries(
        {"action_id": json_any | st.integers(-5, 200), "action_name": json_any | st.sampled_from(ACTIONS)}
    ),
)
response_obj_st = st.dictionaries(
    st.sampled_from(["visual_state_description", "reasoning_and_reflection", "language_plan", "executable_plan", "x"]),
    st.one_of(json_any, st.lists(step_st, max_size=8)),
)
response_st = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300),
    response_obj_st.map(lambda o: json.dumps(o)),
    response_obj_st,
    st.builds(
        lambda o, pre, post: pre + json.dumps(o).replace('"', "'") + post,
        response_obj_st,
        st.text(max_size=20),
        st.text(max_size=20),
    ),
    json_any,
)
label_st = st.one_of(
    pairs_st.map(format_label),
    pairs_st.map(lambda p: [list(x) for x in p]),
    st.lists(json_any, max_size=5),
    json_any,
    st.text(max_size=50),
    st.fixed_dictionaries({"gold": st.lists(json_any, max_size=4), "extra_actions": json_any}),
)


@settings(max_examples=200, deadline=None)
@given(response_st, label_st, st.sampled_from(["paper", "rr_code"]))
def test_bounds_and_determinism_on_anything(response, label, variant):
    b = REWARDS[variant](response, label)  # unguarded: must not raise
    assert 0.0 <= b.total <= 1.5
    assert 0.0 <= b.structure <= 0.125 and 0.0 <= b.valid <= 0.125 and 0.0 <= b.match <= 0.25
    assert (0.0 if variant == "paper" else -0.25) <= b.accuracy <= 1.0
    assert b.accuracy_full in (0.0, 1.0)
    assert b == REWARDS[variant](response, label)
    if variant == "paper":
        assert b.total == pytest.approx(b.structure + b.valid + b.match + b.accuracy)
        assert (b.accuracy_full == 1.0) == (b.n_gold > 0 and b.n_matched == b.n_gold)


def test_action_map_is_cached_per_extras():
    reward._action_map.cache_clear()
    for _ in range(3):
        score(PERFECT, LABEL5)
        score(PERFECT, LABEL1)
    info = reward._action_map.cache_info()
    assert info.currsize == 2
    assert reward._action_map(tuple(EXTRAS)).names == ActionSpace(tuple(EXTRAS)).names


# ------------------------------------------------------------------------------------ replay


def _write_log(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    lines = [
        json.dumps({"response": PERFECT, "label": LABEL5}),
        json.dumps({"response": resp(MUG, PICK, FRIDGE, CLOSE, PUT), "label": LABEL5}),
        "{not json",
        json.dumps({"response": "x"}),
        json.dumps({"response": 5, "label": LABEL5}),
        "",
        json.dumps({"response": "no plan here", "label": json.loads(LABEL5)}),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_replay_table_means_and_errors(tmp_path, capsys):
    path = _write_log(tmp_path)
    assert replay_main([str(path)]) == 1
    out, err = capsys.readouterr()
    rows = out.strip().splitlines()
    assert rows[0].split()[:3] == ["line", "structure", "valid"]
    assert rows[1].split()[0] == "1" and rows[1].split()[5] == "1.5000" and rows[1].endswith("5/5")
    assert rows[2].split()[5] == "0.9000" and rows[2].endswith("3/5")
    assert rows[3].split()[0] == "7" and rows[3].endswith("unparsed")
    mean = rows[-1].split()
    assert mean[0] == "mean" and float(mean[5]) == pytest.approx((1.5 + 0.9 + 0.0) / 3, abs=1e-4)
    assert f"{path}:3: invalid JSON" in err
    assert f"{path}:4: missing field 'label'" in err
    assert f"{path}:5: field 'response' must be a string, got int" in err
    assert "3 bad record(s) skipped" in err


def test_replay_json_keys_and_variant(tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"out": resp(PUT, CABINET), "gt": LABEL1}) + "\n")
    assert replay_main([str(path), "--response-key", "out", "--label-key", "gt", "--variant", "rr_code", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == 1 and summary["errors"] == 0
    assert summary["accuracy"] == 0.75 and summary["total"] == 1.25
    assert replay_main([str(tmp_path / "missing.jsonl")]) == 2


def test_replay_runs_as_a_module(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"response": PERFECT, "label": LABEL5}) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "embodied_rft.tools.reward_replay", str(path), "--summary"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].split()[:6] == ["mean", "0.1250", "0.1250", "0.2500", "1.0000", "1.5000"]
