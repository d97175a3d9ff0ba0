"""ReGRPO's inference trigger (regrpo/trigger.py): when a reflection is allowed (a failed last action, an empty
observation, confidence below the episode's running mean; never by confidence at the first call), how it is
enforced (a prefilled regeneration opens or removes it; at most one per call; an unreadable regeneration falls
back), the counts that reach the episode results and the summary, and the backend's assistant prefill."""

from __future__ import annotations

import json
import math

import pytest

from embodied_rft.data.prompt import PromptConfig
from embodied_rft.data.response import format_response, parse_response
from embodied_rft.evaluate.aggregate import summarize
from embodied_rft.evaluate.config import EpisodeLimits
from embodied_rft.evaluate.episode import run_lockstep
from embodied_rft.evaluate.policy import PlanContext
from embodied_rft.generation.base import Completion
from embodied_rft.regrpo.text import parse_triple, reflection_span
from embodied_rft.regrpo.trigger import ReflectionPolicy, observation_empty
from embodied_rft.world import Simulator, expert_plan
from tests.helpers.world_scenes import KITCHEN, obj, simple

TRIPLE = "ErrorType: ToolMismatch. Evidence: 'pick up the Fork' failed: not within reach. FixPlan: find the fork first."
CONT_OPEN = ' ToolMismatch. Evidence: the Fork is not within reach. FixPlan: find it.", "language_plan": "find the fork", "executable_plan": [{"action_id": 40, "action_name": "find a Fork"}]}'
CONT_PLAN = 'find the fork", "executable_plan": [{"action_id": 40, "action_name": "find a Fork"}]}'


def _episode():
    ep = simple(
        "Fork", "Drawer", objects=[o for o in KITCHEN if o["id"] != "Fork"] + [obj("Fork", "Fork", "CounterTop")]
    )
    ep["expert_plan"] = expert_plan(ep)
    return ep


def _answer(reasoning: str, plan=((40, "find a Fork"),)) -> str:
    return format_response(list(plan), visual_state_description="I am here.", reasoning_and_reflection=reasoning)


class FakeGen:
    """First answers from ``answers`` (text, mean log-prob per token); a prefilled call continues with ``cont``."""

    tokenizer = None

    def __init__(self, answers, cont=CONT_OPEN):
        self.answers, self.cont, self.calls = list(answers), cont, []

    def complete(self, batch, images=None, n=1):
        out = []
        for msgs in batch:
            self.calls.append(msgs)
            if msgs[-1]["role"] == "assistant":
                out.append([Completion(self.cont, 10, 7, "stop", None)])
            else:
                text, mean_lp = self.answers.pop(0)
                out.append([Completion(text, 10, 10, "stop", 10 * mean_lp)])
        return out

    def close(self):
        pass


def _ctx(ep, executed, call):
    space = Simulator.from_episode(ep).actions
    return PlanContext(ep, space, [(space.id(n), n, ok) for n, ok in executed], call)


def _plan(policy, ep, executed, call):
    return policy.plan([[{"role": "user", "content": f"call {call}"}]], None, [_ctx(ep, executed, call)])[0]


def test_no_trigger_no_reflection_and_the_first_call_never_triggers_on_confidence():
    ep = _episode()
    gen = FakeGen([(_answer("0 done, 6 left."), -2.0)])
    pol = ReflectionPolicy(gen, "regrpo")
    assert _plan(pol, ep, [], 0) == _answer("0 done, 6 left.") and len(gen.calls) == 1
    st = pol.episode_stats(ep["episode_id"])
    assert (st["calls"], st["triggered"], st["trigger_low_confidence"], st["confidence_calls"]) == (1, 0, 0, 1)
    assert st["generated_tokens"] == 10 and pol.last_completion_tokens == [10]


def test_after_a_failed_action_the_reflection_is_opened_by_a_prefilled_regeneration():
    ep = _episode()
    r0 = _answer("'pick up the Fork' failed; replan: find the fork.")
    gen = FakeGen([(r0, -0.1)])
    pol = ReflectionPolicy(gen, "regrpo")
    out = _plan(pol, ep, [("pick up the Fork", False)], 0)
    prefill = gen.calls[1][-1]["content"]
    assert prefill == '{"visual_state_description": "I am here.", "reasoning_and_reflection": "ErrorType:'
    assert out == prefill + CONT_OPEN and parse_response(out)["executable_plan"][0]["action_name"] == "find a Fork"
    assert parse_triple(parse_response(out)["reasoning_and_reflection"]).error_type == "ToolMismatch"
    st = pol.episode_stats(ep["episode_id"])
    assert (st["trigger_failure"], st["regenerated_open"], st["final_reflections"], st["calls_after_failure"]) == (
        1,
        1,
        1,
        1,
    )
    assert st["generated_tokens"] == 17 and st["spontaneous_reflections"] == 0


def test_an_unwanted_reflection_is_removed_and_the_plan_decoded_again():
    ep = _episode()
    r0 = _answer("0 done. " + TRIPLE)
    gen = FakeGen([(r0, -0.1)], cont=CONT_PLAN)
    pol = ReflectionPolicy(gen, "regrpo")
    out = _plan(pol, ep, [], 0)
    assert gen.calls[1][-1]["content"].endswith('"reasoning_and_reflection": "0 done.", "language_plan": "')
    assert reflection_span(out) == "" and json.loads(out)["language_plan"] == "find the fork"
    st = pol.episode_stats(ep["episode_id"])
    assert st["regenerated_suppress"] == 1 and st["final_reflections"] == 0
    assert st["spontaneous_tokens_after_success"] == len(TRIPLE.split()) and st["spontaneous_reflections"] == 1


def test_low_confidence_against_the_running_mean_and_an_empty_observation():
    ep = _episode()
    plain = _answer("ok")
    gen = FakeGen([(plain, -0.1), (plain, -0.2), (plain, -1.0)])
    pol = ReflectionPolicy(gen, "free")
    for call in range(3):
        _plan(pol, ep, [("find a Fork", True)] * call, call)
    st = pol.episode_stats(ep["episode_id"])
    # call 1: exp(-0.2) < exp(-0.1); call 2: exp(-1) < mean(exp(-0.1), exp(-0.2))
    assert st["trigger_low_confidence"] == 2 and st["triggered"] == 2 and st["regenerated_open"] == 0
    assert math.exp(-1.0) < (math.exp(-0.1) + math.exp(-0.2)) / 2
    # at the closed Drawer nothing is in view: a trigger of its own
    gen = FakeGen([(plain, -0.1)])
    pol = ReflectionPolicy(gen, "regrpo")
    _plan(pol, ep, [("find a Drawer", True)], 0)
    st = pol.episode_stats(ep["episode_id"])
    assert (st["trigger_empty"], st["regenerated_open"]) == (1, 1)
    assert observation_empty("You are at the Drawer in the kitchen.\nYou see: Drawer (closed).\nIn hand: nothing.")
    assert not observation_empty("You are at the CounterTop.\nYou see: CounterTop [Apple].\nIn hand: nothing.")
    assert not observation_empty("You are in the middle of the kitchen.\nAround you: Cabinet.\nIn hand: nothing.")


def test_an_unreadable_regeneration_keeps_the_first_answer():
    ep = _episode()
    r0 = _answer("'pick up the Fork' failed.")
    pol = ReflectionPolicy(FakeGen([(r0, -0.1)], cont=" oops"), "regrpo")
    assert _plan(pol, ep, [("pick up the Fork", False)], 0) == r0
    st = pol.episode_stats(ep["episode_id"])
    assert (st["regenerated_open"], st["regeneration_fallback"], st["final_reflections"]) == (1, 1, 0)


def test_counts_reach_the_episode_result_and_the_summary():
    ep = _episode()
    ep["episode_id"] = "gen-x"
    space = Simulator.from_episode(ep).actions
    full = _answer("go", [(space.id(n), n) for n in ep["expert_plan"]])
    pol = ReflectionPolicy(FakeGen([(full, -0.1)]), "regrpo")
    prompt = PromptConfig(style="compact", action_list="none", system=False, instruction_at="end")
    (rec,) = run_lockstep([ep], pol, prompt, EpisodeLimits())
    assert rec["success"] and rec["reflection"]["calls"] == 1 and rec["reflection"]["final_reflections"] == 0
    s = summarize([rec])["reflection"]
    assert s["calls"] == 1 and s["trigger_rate"] == 0.0 and s["generated_tokens_per_call"] == 10.0


def test_the_modes_are_the_evaluation_s_policy_wrappers():
    """``evaluate.reflection`` names a wrapper this package registers (regrpo/plugin.py); others fail with the key."""
    from embodied_rft.config import ConfigError, build
    from embodied_rft.evaluate.config import WRAPPERS, EvalConfig

    pol = WRAPPERS["free"](FakeGen([]), "free")
    assert isinstance(pol, ReflectionPolicy) and pol.mode == "free"
    assert build(EvalConfig, {"reflection": "regrpo"}, "evaluate").reflection == "regrpo"
    with pytest.raises(ConfigError, match=r"^evaluate.reflection: 'often' is not one of \['free', 'none', 'regrpo'\]"):
        build(EvalConfig, {"reflection": "often"}, "evaluate")


def test_the_backend_continues_a_prefilled_assistant_message():
    from embodied_rft.generation.config import GenerationConfig
    from embodied_rft.generation.fast import FastGenerator
    from tests.helpers.tiny_checkpoints import text_model

    gen = FastGenerator.from_pretrained(text_model(), GenerationConfig(backend="fast", max_new_tokens=4))
    user = [{"role": "user", "content": "plan"}]
    prefix = '{"visual_state_description": "x", "reasoning_and_reflection": "ErrorType:'
    prefill = {"role": "assistant", "content": prefix, "prefix": True}
    text, _ = gen._prompt([*user, prefill], [])
    assert text.endswith("<|im_start|>assistant\n" + prefix)  # no end-of-turn, no new assistant header
    plain, _ = gen._prompt(user, [])
    assert plain.endswith("<|im_start|>assistant\n") and text.startswith(plain)
    # an assistant message without the mark is a finished turn, as before: a new answer follows it
    done, _ = gen._prompt([*user, {"role": "assistant", "content": prefix}], [])
    assert done.endswith(prefix + "<|im_end|>\n<|im_start|>assistant\n")
    ((c,),) = gen.complete([[*user, prefill]], n=1)
    assert c.prompt_tokens > gen.complete([user], n=1)[0][0].prompt_tokens and c.completion_tokens <= 4
