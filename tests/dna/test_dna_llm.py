"""The LLM reward models' side of D&A's contract (dna/llm.py), with a scripted stand-in LLM (tests/helpers/dna_chat)
and, for the openai backend, a loopback OpenAI-compatible server that injects faults: the describer never sees the
instruction, the length check, retries then raise, /100 and the mean over samples, cache hits, the transport."""

from __future__ import annotations

import json

import pytest

from embodied_rft.config import build
from embodied_rft.dna.frames import key_indices, replay
from embodied_rft.dna.llm import (
    Chat,
    LLMRewardModel,
    ParseError,
    RewardModelFailed,
    openai_chat,
    parse_answer,
    progress_values,
)
from embodied_rft.dna.rms import assess
from embodied_rft.teacher.cache import ResponseCache
from embodied_rft.teacher.config import TeacherConfig
from tests.helpers.dna_chat import ScriptedChat, answer_text
from tests.helpers.fault_server import FaultPlan, FaultServer, openai_teacher
from tests.helpers.tiny_checkpoints import episodes


def _traj():
    ep = next(e for e in episodes("valid_unseen", 20) if len(e["expert_plan"]) >= 8)
    return replay(ep, ep["expert_plan"])


def test_the_pipeline_asks_e_d_a_and_the_describer_never_sees_the_instruction():
    t = _traj()
    keys = key_indices(t.n, 8)
    chat = ScriptedChat(final=100.0)
    rm = LLMRewardModel("dna", Chat(chat, "scripted"))
    instruction = "Put a washed apple on the counter, please."
    rewards, a = assess(rm, t, keys, instruction)
    assert a.calls == 3 and a.parse_failures == 0 and a.criterion == "the apple on the counter"
    e, d, asr = chat.prompts
    assert instruction in e and instruction in asr and instruction not in d
    assert "Apple" in d and all(t.frames([k])[0] in d for k in keys)  # E's objects and every key frame
    assert a.progress == pytest.approx([i / (len(keys) - 1) for i in range(len(keys))], abs=0.006)
    assert rewards[0] == 0.0 and rewards[-1] == 1.0 and len(rewards) == t.n + 1
    # naive: one call, the frames and the instruction together
    naive = ScriptedChat(final=50.0)
    _, a = assess(LLMRewardModel("naive", Chat(naive, "scripted")), t, keys, instruction)
    assert a.calls == 1 and max(a.progress) == 0.5 and instruction in naive.prompts[0]
    fb = ScriptedChat()
    _, a = assess(LLMRewardModel("dna_feedback", Chat(fb, "scripted")), t, keys, instruction)
    assert '"feedback"' in fb.prompts[2] and a.parse_failures == 0


def test_a_wrong_length_fails_the_attempt_and_the_retry_reuses_the_objects():
    t = _traj()
    keys = key_indices(t.n, 8)
    bad_a = json.dumps({"completion state": "x", "progress": [10, 20]})
    chat = ScriptedChat(faults={2: bad_a})  # call 2 = the first attempt's assessor
    _, a = assess(LLMRewardModel("dna", Chat(chat, "scripted")), t, keys, "Move the apple.")
    assert a.parse_failures == 1 and a.calls == 5  # E once, then D + A twice
    assert [p.split("\n")[0] for p in chat.prompts].count("You are an expert in object recognition.") == 1


def test_retries_then_raise_naming_the_trajectory():
    t = _traj()
    chat = ScriptedChat(faults={i: "I think the robot did well." for i in range(10)})
    rm = LLMRewardModel("naive", Chat(chat, "scripted"), retries=3)
    with pytest.raises(RewardModelFailed, match=rf"naive_llm \(scripted\): episode {t.episode['episode_id']}.*after 3"):
        assess(rm, t, key_indices(t.n, 8), "Move the apple.")
    assert len(chat.prompts) == 3


def test_values_are_divided_by_100_clipped_and_averaged_over_samples():
    assert parse_answer('```json\n[{"progress": [1, 2]}]\n```') == {"progress": [1, 2]}
    assert parse_answer('{"progress": [3]}') == {"progress": [3]}
    for text in ("no json here", "[]", '["a"]', "[{"):
        with pytest.raises(ParseError):
            parse_answer(text)
    assert progress_values({"progress": [0, 50, 120]}, 3) == ([0.0, 0.5, 1.0], 1)
    with pytest.raises(ParseError, match="has 2 values for 3 frames"):
        progress_values({"progress": [0, 50]}, 3)
    with pytest.raises(ParseError, match="list of numbers"):
        progress_values({"progress": ["50"]}, 1)
    t = _traj()
    keys = key_indices(t.n, 8)

    class TwoFinals(ScriptedChat):
        def __call__(self, messages, index):
            self.final = 100.0 if index < 100 else 50.0  # sample 0, then sample 1
            return super().__call__(messages, index)

    _, a = assess(LLMRewardModel("naive", Chat(TwoFinals(), "scripted"), n_samples=2), t, keys, "x")
    assert a.progress[-1] == pytest.approx(0.75) and a.calls == 2


def test_answers_are_cached_by_request_so_a_rerun_asks_nothing(tmp_path):
    t = _traj()
    keys = key_indices(t.n, 8)
    chat = ScriptedChat()
    c = Chat(chat, "scripted", ResponseCache(tmp_path / "cache"))
    first, _ = assess(LLMRewardModel("dna", c), t, keys, "Move the apple.")
    assert c.asked == 3 and c.hits == 0
    again, a = assess(LLMRewardModel("dna", c), t, keys, "Move the apple.")
    assert again == first and c.asked == 3 and c.hits == 3
    # another instruction: E and A are asked again; the describer's request holds no instruction, so it is a hit
    assess(LLMRewardModel("dna", c), t, keys, "Put the apple away.")
    assert c.asked == 5 and c.hits == 4
    c.close()
    # without a persistent cache a request is still asked once per process
    bare = ScriptedChat()
    m = Chat(bare, "scripted")
    for _ in range(2):
        assess(LLMRewardModel("dna", m), t, keys, "Move the apple.")
    assert len(bare.prompts) == m.asked == 3 and m.hits == 3


def test_the_openai_backend_rides_out_faults_and_reads_the_same_values(tmp_path, monkeypatch):
    t = _traj()
    keys = key_indices(t.n, 8)
    monkeypatch.setenv("DNA_TEST_KEY", "sk-dna-secret")
    plan = FaultPlan(rate=1.0, seed=3, kinds=("429ms", "500", "truncated", "nonjson"))
    with FaultServer(lambda body: answer_text(body["messages"][-1]["content"]), plan) as server:
        tcfg = build(TeacherConfig, openai_teacher(server.url, "rm-model", "DNA_TEST_KEY"), "teacher")
        c = openai_chat(tcfg, ResponseCache(tmp_path / "cache"))
        rewards, a = assess(LLMRewardModel("dna", c), t, keys, "Move the apple.")
        c.close()
    assert a.calls == 3 and rewards[-1] == 1.0 and a.progress[0] == 0.0
    assert sum(server.stats.faults.values()) > 0  # faults were injected and ridden out
    assert b"sk-dna-secret" not in (tmp_path / "cache" / "answers.sqlite").read_bytes()


def test_rm_eval_scores_an_llm_model_on_a_seeded_draw_of_whole_groups(tmp_path, monkeypatch):
    from embodied_rft.dna.bench import run_rm_bench
    from embodied_rft.dna.config import DnaConfig
    from embodied_rft.dna.rm_eval import run_rm_eval

    src = tmp_path / "valid_unseen.jsonl"
    src.write_text("".join(json.dumps(e) + "\n" for e in episodes("valid_unseen", 60)))
    dcfg = build(
        DnaConfig,
        {
            "bench": {"paraphrases": 3},
            "eval": {"rms": ["planner", "dna_llm"]},
            "llm": {"backend": "openai", "groups": 4},
        },
        "dna",
    )
    run_rm_bench(dcfg.bench, src, tmp_path / "bench", tmp_path / "m" / "rm_bench.json")
    monkeypatch.setenv("DNA_TEST_KEY", "sk-dna-secret")
    with FaultServer(lambda body: answer_text(body["messages"][-1]["content"])) as server:
        tcfg = build(TeacherConfig, openai_teacher(server.url, "rm-model", "DNA_TEST_KEY"), "teacher")
        out = run_rm_eval(
            dcfg.frames,
            dcfg.eval,
            tmp_path / "bench",
            tmp_path / "m" / "rm_eval.json",
            tmp_path / "r" / "rm_eval.md",
            tmp_path / "r" / "scores.jsonl",
            llm=dcfg.llm,
            teacher=tcfg,
            cache_dir=tmp_path / "cache",
        )
        asked = sum(server.stats.ok.values())
    llm = out["rms"]["dna_llm"]
    assert llm["records"] == 4 * 6 and out["rms"]["planner"]["records"] > 24
    assert llm["per_trajectory"]["calls"] == 3.0 and llm["per_trajectory"]["parse_failures"] == 0
    assert llm["backend"] == "openai:rm-model" and asked > 0
    # 24 trajectories x 3 requests: asked of the endpoint once each, a repeat (a describer request shared by two
    # paraphrases of one task) answered from the cache
    assert llm["answers_asked"] + llm["answers_cached"] == 72 and llm["answers_asked"] == asked
    # the stand-in's progress rises to 100 on every trajectory: it cannot tell a failure from a success
    assert llm["failure_as_success"]["wrong_object"] == 1.0 and llm["tau"] < out["rms"]["planner"]["tau"]


def test_a_trajectory_without_a_valid_answer_scores_zero_counted_and_too_many_fail_the_stage():
    from embodied_rft.dna.bench import build_bench
    from embodied_rft.dna.config import BenchConfig, EvalConfig, FramesConfig
    from embodied_rft.dna.rm_eval import evaluate_rm

    eps = episodes("valid_unseen", 60)
    records = [r for r in build_bench(list(eps), BenchConfig(paraphrases=1))[0]][:12]
    by_id = {e["episode_id"]: e for e in eps}
    garbage = ScriptedChat(faults={i: "no idea" for i in range(10_000)})
    rm = LLMRewardModel("naive", Chat(garbage, "scripted"), retries=2)
    figures, rows = evaluate_rm(rm, records, FramesConfig(), EvalConfig(max_failed_share=1.0), by_id)
    assert figures["failed_trajectories"] == 12 and all(row["final"] == 0.0 for row in rows)
    assert "no valid answer after 2 attempt" in figures["failed_examples"][0]["error"]
    with pytest.raises(RewardModelFailed, match=r"naive_llm: 12 of 12 trajectories without a valid answer"):
        evaluate_rm(rm, records, FramesConfig(), EvalConfig(max_failed_share=0.5), by_id)
