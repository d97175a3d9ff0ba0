"""The ``bon`` stage's library (vegas/bon.py) with a real tiny checkpoint: every selector on the same episodes,
metrics / report / plot, and resume after a killed run (finished episodes are not played again, a record cut
short by the kill is dropped and its episode replayed)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from embodied_rft.evaluate.config import EpisodeLimits
from embodied_rft.evaluate.store import ResultStore
from embodied_rft.generation import GenerationConfig, make_generator
from embodied_rft.vegas.bon import BON_HEADLINE, play, run_bon
from embodied_rft.vegas.bon_config import BonConfig
from embodied_rft.vegas.calls import calls_of, read_table
from embodied_rft.vegas.select import BonPolicy
from embodied_rft.vegas.study import read_bon
from tests.helpers import tiny_checkpoints as tc

PROMPT = tc.PROMPT
LIMITS = EpisodeLimits(max_env_steps=30, max_invalid_actions=3, max_planner_calls=6)
GEN = GenerationConfig(backend="fast", max_new_tokens=8, batch_size=8, device="cpu")


class Killed(Exception):
    pass


class Counting:
    """A generator that counts its calls and can be killed after a number of them."""

    def __init__(self, gen, kill_after: int | None = None) -> None:
        self.gen, self.kill_after, self.calls, self.prompts = gen, kill_after, 0, 0

    def complete(self, batch, *a, **kw):
        if self.kill_after is not None and self.calls >= self.kill_after:
            raise Killed("SIGKILL stand-in")
        self.calls += 1
        self.prompts += len(batch)
        return self.gen.complete(batch, *a, **kw)


@pytest.fixture(scope="module")
def gen():
    with tc.one_thread():
        g = make_generator(tc.text_model(), GEN)
        yield g


def _eps(n: int = 4) -> list[dict]:
    return [dict(e) for e in tc.episodes("valid_seen", 12)[:n]]


def test_a_killed_run_resumes_without_replaying_finished_episodes(tmp_path, gen):
    cfg = BonConfig(n=2, m=1, coverage_k=(1, 2), selectors=("sc",), seed=0)
    eps = _eps(4)
    path = tmp_path / "sc" / "episodes.jsonl"
    # an untrained model writes no plan: each episode ends after 3 unreadable answers; the first lockstep task of
    # two episodes finishes (3 calls), the second is killed at its second call
    killed = Counting(gen, kill_after=4)
    with tc.one_thread(), pytest.raises(Killed):
        play(eps, BonPolicy("sc", killed, cfg), PROMPT, LIMITS, ResultStore(path, "fp"), per_task=2)
    done = [json.loads(x)["episode_id"] for x in path.read_text().splitlines()]
    assert done == [e["episode_id"] for e in eps[:2]]
    # a kill in the middle of writing the next record leaves half a line: it is dropped, that episode replays
    with path.open("a") as fh:
        fh.write('{"episode_id": "' + eps[2]["episode_id"] + '", "succ')
    again = Counting(gen)
    with tc.one_thread():
        recs = play(eps, BonPolicy("sc", again, cfg), PROMPT, LIMITS, ResultStore(path, "fp"), per_task=2)
    assert [r["episode_id"] for r in recs] == [e["episode_id"] for e in eps]
    assert again.prompts == sum(r["planner_calls"] for r in recs[2:])  # only the two unfinished episodes ran
    assert all(r["policy_samples"] == 2 * r["planner_calls"] for r in recs)
    # a different fingerprint (new settings or model) discards the old results
    assert len(ResultStore(path, "other")) == 0


def _small_cfg(**kw) -> BonConfig:
    """Two candidates per call, short verifications, episodes cut after 3 calls or 2 invalid actions."""
    gen = GenerationConfig(backend="fast", max_new_tokens=300, batch_size=8, device="cpu")
    return BonConfig(n=2, verifier_max_new_tokens=6, generation=gen, max_invalid_actions=2, max_planner_calls=3, **kw)


def test_run_bon_writes_metrics_report_and_plot_and_resumes(tmp_path, monkeypatch):
    # the fitted tiny model writes whole plans (episode 0's), so candidates have first actions to verify
    fitted = tc.fitted_model()
    models = {"policy": fitted, "sft": fitted, "verifier": tc.text_model()}
    cfg = _small_cfg(
        selectors=("greedy", "sc", "bon_zs", "bon_ft", "bon_oracle"),
        max_episodes=3,
        max_episodes_by_selector={"bon_ft": 2},
        m=1,
        coverage_k=(1, 2, 4),
        live_max=5,
        episodes_per_task=3,
    )
    ep_file = tmp_path / "valid_seen.jsonl"
    ep_file.write_text("".join(json.dumps(e) + "\n" for e in _eps(6)))
    out = tmp_path / "out"
    kw = dict(prompt_cfg=PROMPT)
    with tc.one_thread():
        m = run_bon(
            cfg,
            models,
            [ep_file],
            out / "bon.json",
            out / "bon.md",
            out / "bon.svg",
            out / "work",
            **kw,
            calls_path=out / "calls.csv",
        )
    assert m["episodes"] == 3 and set(m["selectors"]) == set(cfg.selectors)
    assert m["selectors"]["bon_ft"]["episodes"] == 2 and m["paired_vs_greedy"]["bon_ft"]["episodes"] == 2
    assert set(m["paired_vs_greedy"]) == {"sc", "bon_zs", "bon_ft", "bon_oracle"}
    g, sc = m["selectors"]["greedy"], m["selectors"]["sc"]
    assert g["model_calls_per_call"] == 1.0 and sc["policy_samples_per_call"] == 2.0
    assert m["selectors"]["bon_zs"]["verifications_per_call"] > 0
    assert set(m["coverage"]["coverage_at"]) == {"1", "2"}  # k > n is not reported
    assert set(m["live_auroc"]) == {"bon_zs", "bon_ft"}
    # the per-call table: one row per (greedy-run call, distinct first action), every verifier's column; a capped
    # verifier scores whole calls (tests/vegas/test_bon_calls.py checks the draw on many calls)
    rows = read_table(out / "calls.csv")
    live = [
        c
        for r in (json.loads(x) for x in (out / "work" / "greedy" / "episodes.jsonl").read_text().splitlines())
        for c in r.get("live", [])
    ]
    assert len(rows) == sum(len(c["cands"]) for c in live) >= 1
    assert sum(r["p_bon_ft"] is not None for r in rows) == m["live_auroc"]["bon_ft"]["items"]
    for c in calls_of(rows):
        assert len({r["p_bon_ft"] is None for r in c.rows}) == 1  # a call is scored whole or not at all
    # a call whose samples were all unreadable has no row: nothing to select among
    assert m["within_call"]["all"]["calls"] == len(calls_of(rows)) == sum(bool(c["cands"]) for c in live)
    assert set(m["within_call"]["replan"]["top1"]) >= {"greedy", "sample", "sc", "bon_ft", "bon_zs"}
    assert "Where Best-of-N acts" in (out / "bon.md").read_text()
    # each episode's subset beside its success: what a study's `subset: long_horizon` comparison pairs on
    played = {
        e["episode_id"]: e.get("subset", "base") for e in _eps(6) if e["episode_id"] in m["episode_success"]["greedy"]
    }
    assert m["episode_subset"] == played and len(played) == 3
    ft = read_bon(out / "bon.details.json", "bon_ft")
    assert ft["episodes"] == 2 and ft["episode_subset"] == {e: played[e] for e in m["episode_success"]["bon_ft"]}
    head = json.loads((out / "bon.json").read_text())
    assert set(head) <= set(BON_HEADLINE) and "episode_success" not in head
    assert set(head["selectors"]) == {"greedy", "bon_ft"}  # this run has no `sample`: skipped
    assert head["paired_vs_greedy"]["bon_ft"] == {k: m["paired_vs_greedy"]["bon_ft"][k] for k in ("gap", "p_mcnemar")}
    report = (out / "bon.md").read_text()
    assert "symbolic-simulator proxy" in report and "BoN, trained verifier" in report
    assert (out / "bon.svg").read_text().lstrip().startswith("<?xml")
    # a second run finds every episode and every live score in the work dir: no generation at all
    import embodied_rft.generation.fast as fast

    def boom(*a, **k):
        raise AssertionError("generated although every result was stored")

    monkeypatch.setattr(fast.FastGenerator, "_generate_batch", boom)
    with tc.one_thread():
        m2 = run_bon(cfg, models, [ep_file], out / "bon.json", out / "bon.md", out / "bon.svg", out / "work", **kw)
    assert m2["episode_success"] == m["episode_success"] and m2["live_auroc"] == m["live_auroc"]
    monkeypatch.undo()
    # a verifier scored on the live candidates without being played (bon.live_verifiers): the greedy run's calls
    # and the same seeded items, so the same AUROC as when bon_ft was played; nothing but greedy is played
    only = dataclasses.replace(cfg, selectors=("greedy",), live_verifiers=("bon_ft",))
    with tc.one_thread():
        m3 = run_bon(only, models, [ep_file], out / "b3.json", out / "b3.md", out / "b3.svg", tmp_path / "w3", **kw)
    assert set(m3["selectors"]) == {"greedy"} and set(m3["live_auroc"]) == {"bon_ft"}
    assert m3["live_auroc"]["bon_ft"] == m["live_auroc"]["bon_ft"]


def test_prob_score_and_replan_trigger_run_end_to_end_and_are_reported(tmp_path):
    # bon.score=prob with bon.trigger=replan through run_bon: each episode's first call answered by one greedy
    # sample, every later call by n samples and one P(yes) per distinct first action; the default settings' store
    # is not resumed for them (the fingerprint names both)
    fitted = tc.fitted_model()
    models = {"policy": fitted, "sft": fitted, "verifier": tc.text_model()}
    cfg = _small_cfg(selectors=("greedy", "bon_ft"), max_episodes=2, m=2, coverage_k=(1, 2), episodes_per_task=2)
    ep_file = tmp_path / "valid_seen.jsonl"
    ep_file.write_text("".join(json.dumps(e) + "\n" for e in _eps(4)))
    out, work = tmp_path / "out", tmp_path / "work"

    def stored() -> list[dict]:
        return [json.loads(x) for x in (work / "bon_ft" / "episodes.jsonl").read_text().splitlines()]

    with tc.one_thread():
        run_bon(cfg, models, [ep_file], out / "a.json", out / "a.md", out / "a.svg", work, prompt_cfg=PROMPT)
        paper = stored()
        new = dataclasses.replace(cfg, score="prob", trigger="replan")
        run_bon(new, models, [ep_file], out / "b.json", out / "b.md", out / "b.svg", work, prompt_cfg=PROMPT)
        ours = stored()
    assert len(paper) == len(ours) == 2
    for r in paper:  # the paper's: n samples on every call, m sampled verdicts per verified first action
        assert r["policy_samples"] == 2 * r["planner_calls"] and r["verifications"] % 2 == 0
    for r in ours:
        assert r["policy_samples"] == 1 + 2 * (r["planner_calls"] - 1)
        assert r["verifications"] <= 2 * (r["planner_calls"] - 1)  # <= n first actions, one P(yes) each
    report = (out / "b.md").read_text()
    assert "scored by the verifier's P(yes)" in report and "replanning calls only" in report
    assert "M = 2 verifications" in (out / "a.md").read_text()


def test_live_auroc_tool_scores_a_stored_greedy_run_as_the_stage_does(tmp_path, capsys):
    # the stage plays greedy and scores its live candidates with bon_ft (bon.live_verifiers); the tool, given only
    # the greedy store and the episode file, rebuilds the same items and gets the same P(yes) for each
    from embodied_rft.core.integrity import IntegrityError, seal_record
    from embodied_rft.tools.live_auroc import main as live_auroc
    from embodied_rft.vegas.score import Verifier, auroc
    from embodied_rft.vegas.text import verification_messages

    fitted = tc.fitted_model()
    models = {"policy": fitted, "sft": fitted, "verifier": fitted}
    cfg = _small_cfg(selectors=("greedy",), live_verifiers=("bon_ft",), live_max=0, max_episodes=3, episodes_per_task=3)
    ep_file = tmp_path / "valid_seen.jsonl"
    ep_file.write_text("".join(json.dumps(e) + "\n" for e in _eps(3)))
    work, out = tmp_path / "work", tmp_path / "out"
    with tc.one_thread():
        m = run_bon(cfg, models, [ep_file], out / "b.json", out / "b.md", out / "b.svg", work, prompt_cfg=PROMPT)
    store = work / "greedy" / "episodes.jsonl"
    stage = {
        json.loads(x)["episode_id"]: json.loads(x)["p"] for x in (work / "live_bon_ft.jsonl").read_text().splitlines()
    }
    assert len(stage) == m["live_auroc"]["bon_ft"]["items"] >= 1
    live = tmp_path / "live.jsonl"
    args = f"--verifier {fitted} --episodes {ep_file} --greedy {store} --out {live} --backend fast --device cpu".split()
    args += ["--max-new-tokens", "6"]
    with tc.one_thread():
        assert live_auroc(args) == 0
    tool = {json.loads(x)["episode_id"]: json.loads(x)["p"] for x in live.read_text().splitlines()}
    assert tool.keys() == stage.keys() and all(tool[k] == pytest.approx(stage[k], abs=1e-6) for k in stage)
    capsys.readouterr()
    # the same run's live call with more candidates (other actions, both labels): each item's P(yes) is the
    # verifier's on the verification prompt of that call and action, and the AUROC is theirs against the labels
    recs = [json.loads(x) for x in store.read_text().splitlines()]
    rec = next(r for r in recs if r.get("live"))
    call = rec["live"][0]
    extra = [(7, "find a Apple", "wrong"), (9, "find a Mug", "correct"), (11, "open the Fridge", "neutral")]
    call["cands"] += [{**call["cands"][0], "a": a, "name": n, "label": lab} for a, n, lab in extra]
    grown = tmp_path / "grown.jsonl"
    grown.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(IntegrityError, match=r"grown\.jsonl:\d+: the record does not match the digest"):
        live_auroc([*args[:4], "--greedy", str(grown), "--out", str(tmp_path / "g.jsonl"), *args[8:]])
    grown.write_text("".join(json.dumps(seal_record(r)) + "\n" for r in recs))  # grown on purpose: sealed again
    with tc.one_thread():
        assert live_auroc([*args[:4], "--greedy", str(grown), "--out", str(tmp_path / "g.jsonl"), *args[8:]]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    got = {json.loads(x)["episode_id"]: json.loads(x)["p"] for x in (tmp_path / "g.jsonl").read_text().splitlines()}
    ep = next(e for e in _eps(3) if e["episode_id"] == rec["episode_id"])
    ver = Verifier.load(fitted, backend="fast", max_new_tokens=6, device="cpu")
    cands = call["cands"]
    prompts = [
        verification_messages(
            ep["instruction"], call["history"], call["observation"], x["reasoning"], x["a"], x["name"]
        )
        for x in cands
    ]
    with tc.one_thread():
        want = [p for p, _, _ in ver.p_yes(prompts)]
    for x, w in zip(cands, want, strict=True):
        assert got[f"{rec['episode_id']}:{call['call']}:{x['a']}"] == pytest.approx(w, abs=1e-6)
    everything = [
        (f"{r['episode_id']}:{k['call']}:{c['a']}", c["label"] == "correct")
        for r in recs
        for k in r.get("live", [])
        for c in k["cands"]
    ]
    assert got.keys() == {i for i, _ in everything} and {True, False} <= {y for _, y in everything}
    assert res["items"] == len(got) and res["positives"] == sum(y for _, y in everything)
    assert res["auroc"] == round(auroc([got[i] for i, _ in everything], [y for _, y in everything]), 4)
    # the live calls follow the episode file, whatever order the store finished them in (the stage's order, so that
    # --limit draws the stage's subsample)
    from embodied_rft.tools.live_auroc import live_calls_of

    every = [{**r, "live": [call]} for r in recs]  # one live call in each episode's record
    (tmp_path / "reversed.jsonl").write_text("".join(json.dumps(seal_record(r)) + "\n" for r in reversed(every)))
    got_order = [ep["episode_id"] for ep, _ in live_calls_of(ep_file, tmp_path / "reversed.jsonl")]
    assert got_order == [e["episode_id"] for e in _eps(3)]
    # a greedy store naming an episode the episode file lacks: the error names both files and the line
    bad = tmp_path / "other.jsonl"
    bad.write_text(json.dumps(ep) + "\n")
    rec_line = 1 + next(i for i, r in enumerate(recs) if r["episode_id"] != ep["episode_id"])
    with pytest.raises(ValueError, match=rf"episodes\.jsonl:{rec_line}: episode_id .* is not in .*other\.jsonl"):
        live_auroc([*args[:2], "--episodes", str(bad), *args[4:]])
