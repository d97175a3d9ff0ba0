"""The evaluation's behaviour columns after a failed action: repeat-after-failure and recovered-next-call
(evaluate/episode.py, evaluate/aggregate.py), counted on a scripted episode whose every number is known."""

from __future__ import annotations

from embodied_rft.data.prompt import PromptConfig
from embodied_rft.data.response import format_response
from embodied_rft.evaluate.aggregate import behaviour, failure_repeats, summarize
from embodied_rft.evaluate.config import EpisodeLimits
from embodied_rft.evaluate.episode import EpisodeRun
from embodied_rft.evaluate.report import render_markdown
from embodied_rft.world import Simulator
from tests.helpers.world_scenes import simple


def _episode() -> dict:
    ep = simple("Mug", "DiningTable")
    ep["expert_plan"] = ["find a Mug", "pick up the Mug", "find a DiningTable", "put down the object in hand"]
    return ep


def _plan(space, *names: str) -> str:
    return format_response([(space.id(n), n) for n in names])


def test_repeat_and_recovery_after_failures_are_counted_exactly():
    ep = _episode()
    space = Simulator.from_episode(ep).actions
    run = EpisodeRun(ep, PromptConfig(style="compact"), EpisodeLimits())
    run.apply(_plan(space, "pick up the Mug"))  # fails: the Mug is not within reach
    run.apply(_plan(space, "pick up the Mug"))  # the same id again: a repeat; the call does not recover
    run.apply("no plan here")  # unreadable: a call after a failure that does not recover either
    run.apply(_plan(space, "find a DiningTable", "find a Mug"))  # executes, but the oracle calls it neutral
    assert not run.done
    run.apply(_plan(space, "pick up the Bowl"))  # fails: not within reach
    run.apply(_plan(space, "pick up the Mug", "find a DiningTable", "put down the object in hand"))  # recovers
    rec = run.result()
    assert rec["success"] and rec["end_reason"] == "success"
    # calls 2, 3 and 6 come right after a failed action (call 4 follows an unreadable call, not a failure);
    # only call 6's first action executes, and the oracle calls it correct
    assert (rec["recovery_calls"], rec["recovered_valid"], rec["recovered_correct"]) == (3, 1, 1)
    assert failure_repeats(rec["actions"]) == (3, 1)  # three failures followed by an action, one repeated

    third = round(1 / 3, 4)
    b = behaviour([rec])
    assert b == {
        "failures_followed": 3,
        "repeat_after_failure_rate": third,
        "recovery_calls": 3,
        "recovered_next_call_rate": third,
        "recovered_next_call_correct_rate": third,
    }
    s = summarize([rec])
    assert s["repeat_after_failure_rate"] == third and s["recovered_next_call_correct_rate"] == third


def test_recovered_correct_needs_the_oracle_not_only_a_valid_action():
    ep = _episode()
    space = Simulator.from_episode(ep).actions
    run = EpisodeRun(ep, PromptConfig(style="compact"), EpisodeLimits())
    run.apply(_plan(space, "pick up the Mug"))
    run.apply(_plan(space, "find a Fridge"))  # executes (valid) but brings the goal no closer (neutral)
    rec = run.result()
    assert (rec["recovery_calls"], rec["recovered_valid"], rec["recovered_correct"]) == (1, 1, 0)


def test_no_failure_means_no_rate_and_old_records_are_left_out():
    ep = _episode()
    space = Simulator.from_episode(ep).actions
    run = EpisodeRun(ep, PromptConfig(style="compact"), EpisodeLimits())
    run.apply(_plan(space, *ep["expert_plan"]))
    rec = run.result()
    old = {k: v for k, v in rec.items() if not k.startswith("recover")}  # a result stored before these columns
    b = behaviour([rec, old])
    assert b["repeat_after_failure_rate"] is None and b["recovered_next_call_rate"] is None
    assert b["recovery_calls"] == 0


def test_the_report_shows_both_columns():
    ep = _episode()
    space = Simulator.from_episode(ep).actions
    run = EpisodeRun(ep, PromptConfig(style="compact"), EpisodeLimits())
    run.apply(_plan(space, "pick up the Mug"))
    run.apply(_plan(space, *ep["expert_plan"]))
    text = render_markdown({"m": {"interactive": {"overall": summarize([run.result()]), "per_subset": {}}}})
    assert "repeat after failure" in text and "| 0.000 | 1.000 / 1.000 |" in text
