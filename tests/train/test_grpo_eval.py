"""The held-out paired comparison of GRPO's before/after greedy runs, against hand-computed values."""

import pytest

from embodied_rft.train.grpo.heldout import paired_gain


def test_counts_mean_and_exact_tests_by_hand():
    before = [[0.5, 0.0], [1.5, 1.0], [1.0, 0.0], [0.5, 0.0], [1.5, 1.0]]
    after = [[1.5, 1.0], [1.5, 1.0], [0.75, 0.0], [1.0, 0.0], [0.5, 0.0]]
    out = paired_gain(before, after)
    # differences +1.0, 0, -0.25, +0.5, -1.0: 2 up, 2 down, 1 same, mean +0.05
    assert out["n"] == 5
    assert out["reward"] == {**out["reward"], "up": 2, "down": 2, "same": 1}
    assert out["reward"]["mean_diff"] == pytest.approx(0.05)
    # 2 vs 2: the sign test cannot tell them apart
    assert out["reward"]["p_sign"] == 1.0
    # prompt 0 solved only after, prompt 4 only before: McNemar 1 vs 1 -> p = 1
    acc = out["accuracy_full"]
    assert (acc["only_a"], acc["only_b"], acc["both"], acc["neither"], acc["p_mcnemar"]) == (1, 1, 1, 2, 1.0)
    lo, hi = out["reward"]["ci95"]
    assert -1.0 <= lo < 0.05 < hi <= 1.0


def test_a_gain_on_every_prompt_is_significant_and_its_interval_excludes_zero():
    before = [[0.5, 0.0]] * 12
    after = [[0.75, 0.0]] * 6 + [[1.5, 1.0]] * 6
    out = paired_gain(before, after)
    assert out["reward"]["up"] == 12 and out["reward"]["down"] == 0
    # sign test 12 vs 0: 2 / 2**12
    assert out["reward"]["p_sign"] == pytest.approx(round(2 / 2**12, 4))
    assert out["reward"]["ci95"][0] > 0.0
    assert out["accuracy_full"]["only_b"] == 6 and out["accuracy_full"]["p_mcnemar"] == pytest.approx(
        round(2 / 2**6, 4)
    )
    assert out["accuracy_full"]["gap"] == pytest.approx(50.0)


def test_the_interval_is_reproducible_and_mismatched_runs_are_refused():
    before = [[float(i % 3) / 2, 0.0] for i in range(40)]
    after = [[float((i + 1) % 3) / 2, 0.0] for i in range(40)]
    assert paired_gain(before, after) == paired_gain(before, after)
    with pytest.raises(ValueError, match="40 prompts before GRPO but 39 after"):
        paired_gain(before, after[:-1])
    with pytest.raises(ValueError, match="no held-out prompts"):
        paired_gain([], [])


def test_exact_plan_gain_interval_by_hand():
    from embodied_rft.core.stats import paired_diff_ci

    # the default run's held-out check: 13 exact plans lost, 30 gained, 300 prompts
    # d = 17/300; se = sqrt(43 - 17**2/300) / 300 = 0.0216119...; 1.96 se = 0.042359
    lo, hi = paired_diff_ci(13, 30, 300)
    assert (lo, hi) == (pytest.approx(0.014308, abs=1e-6), pytest.approx(0.099026, abs=1e-6))
    # 1 vs 1 of 5: no gain, interval symmetric about 0 (sqrt(2) / 5 * 1.96 = 0.554362)
    lo, hi = paired_diff_ci(1, 1, 5)
    assert lo == pytest.approx(-0.554362, abs=1e-6) and hi == pytest.approx(0.554362, abs=1e-6)
    # every pair discordant the same way: zero width at d = 1
    assert paired_diff_ci(0, 4, 4) == (pytest.approx(1.0), pytest.approx(1.0))
    with pytest.raises(ValueError, match="only_a \\+ only_b <= n"):
        paired_diff_ci(3, 3, 5)


def test_paired_gain_reports_the_exact_plan_gain_and_its_interval():
    before = [[0.5, 0.0]] * 12
    after = [[0.75, 0.0]] * 6 + [[1.5, 1.0]] * 6
    acc = paired_gain(before, after)["accuracy_full"]
    # 6 of 12 gained, none lost: d = 0.5, se = sqrt(6 - 36/12) / 12 = sqrt(3) / 12
    assert acc["mean_diff"] == pytest.approx(0.5)
    half = 1.959964 * 3**0.5 / 12
    assert acc["ci95"] == [pytest.approx(0.5 - half, abs=1e-6), pytest.approx(0.5 + half, abs=1e-6)]
