"""The local GRPO engine end to end on a tiny Qwen2 (grpo_local): updates, filter, metrics, resume."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from embodied_rft.config import ConfigError, build
from embodied_rft.core.integrity import seal_folder
from embodied_rft.filtering import FilterConfig
from embodied_rft.train.grpo.config import GRPOConfig
from tests.helpers.grpo import _weights, kill_at_3_and_resume, run, tiny_cfg
from tests.helpers.grpo_fixtures import base_policy, grpo_samples, sft_policy, write_jsonl


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "decomposed" / "train.jsonl", grpo_samples())


def test_end_to_end_changes_weights_and_writes_metrics(data, tmp_path):
    policy = sft_policy()
    m = run(tiny_cfg(), policy, data, tmp_path)
    assert m["updates"] == 4 and m["buffers"] == 2 and m["stop_reason"] == "max_updates"
    before, after = _weights(policy), _weights(tmp_path / "out")
    unchanged = [k for k in before if "embed_tokens" not in k and torch.equal(before[k], after[k])]
    assert not unchanged, f"parameters untouched by GRPO: {unchanged}"
    emb = "model.embed_tokens.weight"
    assert not torch.equal(before[emb], after[emb])  # rows of sampled tokens moved
    # the saved folder is a complete checkpoint, tokenizer included
    assert (tmp_path / "out" / "tokenizer.json").exists() and (tmp_path / "out" / "config.json").exists()

    on_disk = json.loads((tmp_path / "metrics.details.json").read_text())
    assert on_disk["updates"] == 4 and len(on_disk["history"]) == 4
    assert [r["update"] for r in on_disk["history"]] == [1, 2, 3, 4]
    first = on_disk["history"][0]
    # the first update of a buffer is on-policy: ratio exactly 1, nothing clipped, no KL to π_old yet
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert first["clip_frac"] == 0.0 and abs(first["approx_kl"]) < 1e-5
    for key in (
        "reward_mean",
        "reward_structure",
        "reward_valid",
        "reward_match",
        "reward_accuracy",
        "accuracy_full_rate",
        "filter_pass_rate",
        "rejected_all_wrong",
        "entropy",
        "response_length",
        "grad_norm",
        "lr",
        "clip_frac",
        "approx_kl",
    ):
        assert key in first, key
    assert 0.0 < first["accuracy_full_rate"] < 1.0
    f = on_disk["filter"]
    assert f["seen"] == f["accepted"] + f["rejected"] and f["accepted"] >= 4
    assert on_disk["counters"]["responses_sampled"] == 4 * on_disk["counters"]["prompts_sampled"]
    h = on_disk["heldout"]
    assert h["before"]["samples"] == 4 and h["after"]["samples"] == 4
    assert h["reward_mean_gain"] == pytest.approx(h["after"]["reward_mean"] - h["before"]["reward_mean"], abs=1e-6)
    # the same metric names as SFT's and evaluation's held-out checks
    assert {"json_valid_rate", "format_rate", "prefix_accuracy", "exact_plan_rate", "truncated_rate"} <= set(
        h["before"]
    )
    # the per-prompt comparison covers the same 4 prompts and agrees with the difference of means
    pr = h["paired"]
    assert pr["n"] == 4 and pr["reward"]["up"] + pr["reward"]["down"] + pr["reward"]["same"] == 4
    assert pr["reward"]["mean_diff"] == pytest.approx(h["reward_mean_gain"], abs=1e-5)
    assert pr["reward"]["ci95"][0] <= pr["reward"]["mean_diff"] <= pr["reward"]["ci95"][1]
    assert "per_prompt" not in h["before"] and "per_prompt" not in h["after"]
    rows = list(csv.DictReader((tmp_path / "plots.csv").open()))
    assert [int(r["update"]) for r in rows] == [1, 2, 3, 4]
    assert float(rows[-1]["reward_mean"]) == pytest.approx(on_disk["history"][-1]["reward_mean"])


def test_filter_on_never_trains_a_zero_advantage_group(data, tmp_path):
    seen = []

    def on_update(info):
        for gi, g in enumerate(info.groups):
            c_x = sum(g.accuracy_full)
            seen.append((c_x, float(info.advantages[gi].abs().max())))

    m = run(tiny_cfg(max_updates=6), sft_policy(), data, tmp_path, hooks={"on_update": on_update})
    assert m["updates"] == 6 and seen
    # every trained group passed lower <= C_x <= upper (1..3 for G = 4) and has a non-zero advantage
    assert all(1 <= c <= 3 and a > 0 for c, a in seen), seen
    assert m["counters"]["zero_adv_groups_trained"] == 0
    assert m["filter"]["rejected"] > 0  # the filter did have groups to reject


def test_group_minibatches_take_whole_groups_and_cover_each_buffer_once(data, tmp_path):
    # N_B = 3 groups of G = 4, 4 sequences per update: K_2 = 3 updates make one pass, one whole group each
    cfg = tiny_cfg(
        max_updates=6,
        minibatch="groups",
        filter=FilterConfig(buffer_size=3, updates_per_buffer=3),
        train_batch_size=4,
    )
    batches = []

    def on_update(info):
        batches.append((info.update, [gi for gi, _ in info.rows], sorted(ri for _, ri in info.rows)))
        # a whole group's advantages are centred: each update's advantages sum to zero
        assert abs(sum(float(info.advantages[gi, ri]) for gi, ri in info.rows)) < 1e-5

    m = run(cfg, sft_policy(), data, tmp_path, hooks={"on_update": on_update})
    assert m["updates"] == 6
    for _, gis, ris in batches:
        assert len(set(gis)) == 1 and ris == [0, 1, 2, 3]
    for first in (0, 3):  # each buffer's 3 updates are its 3 groups, each once
        assert sorted(batches[first + k][1][0] for k in range(3)) == [0, 1, 2]
    with pytest.raises(ConfigError, match="grpo.minibatch"):
        tiny_cfg(minibatch="groups", train_batch_size=6, filter=FilterConfig(buffer_size=2, updates_per_buffer=2))
    with pytest.raises(ConfigError, match="grpo.minibatch"):
        tiny_cfg(minibatch="prompts")


def test_counter_sees_zero_advantage_groups_when_nothing_filters(data, tmp_path):
    # untrained policy: every response scores 0, so every group has zero variance; with the filter and the
    # zero-variance drop off, the engine trains on them and its counter says so
    cfg = tiny_cfg(
        max_updates=2,
        max_new_tokens=8,
        eval_max_samples=0,
        filter=FilterConfig(enabled=False, drop_zero_variance=False, buffer_size=2, updates_per_buffer=2),
    )
    m = run(cfg, base_policy(), data, tmp_path)
    assert m["updates"] == 2
    assert m["counters"]["zero_adv_groups_trained"] == m["counters"]["groups_trained"] == 2
    assert m["heldout"] is None


def test_kill_and_resume_reaches_the_same_step(data, tmp_path):
    cfg = tiny_cfg(max_updates=4, save_every=2, eval_max_samples=0)
    ref, again, root = kill_at_3_and_resume(cfg, data, tmp_path)
    assert again["resumed"] is True
    assert again["updates"] == ref["updates"] == 4
    assert again["counters"] == ref["counters"]
    assert [r["update"] for r in again["history"]] == [1, 2, 3, 4]
    # RNG, cursor, optimiser and buffer were restored: the resumed run retraces the uninterrupted one
    for a, b in zip(again["history"], ref["history"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)
        assert a["reward_mean"] == pytest.approx(b["reward_mean"])
    resumed, uninterrupted = _weights(root / "out"), _weights(tmp_path / "ref" / "out")
    for k, v in resumed.items():
        assert torch.allclose(v, uninterrupted[k], atol=1e-6), k


def test_a_retrained_policy_of_the_same_shape_does_not_resume_the_old_run(data, tmp_path):
    """Same files, same sizes, other weights (the same SFT run trained longer): a new run, not a resume."""
    import shutil

    from safetensors.torch import load_file, save_file

    cfg = tiny_cfg(max_updates=2, save_every=2, eval_max_samples=0)
    policy = tmp_path / "policy"
    shutil.copytree(sft_policy(), policy)
    first = run(cfg, policy, data, tmp_path)
    assert first["resumed"] is False and first["updates"] == 2
    # an identical copy of the inputs resumes the finished run straight to its end
    assert run(cfg, policy, data, tmp_path)["resumed"] is True

    weights = policy / "model.safetensors"
    before = weights.stat().st_size
    tensors = load_file(weights)
    save_file({k: v + 0.01 for k, v in tensors.items()}, weights, metadata={"format": "pt"})
    assert weights.stat().st_size == before
    seal_folder(policy)  # retrained on purpose (a tool that rewrites a sealed folder seals it again)
    again = run(cfg, policy, data, tmp_path)
    assert again["resumed"] is False and again["updates"] == 2


def test_kl_to_reference_and_sequence_mean_aggregation(data, tmp_path):
    cfg = tiny_cfg(max_updates=2, kl_coef=0.05, loss_agg="seq_mean_token_mean", eval_max_samples=0)
    m = run(cfg, sft_policy(), data, tmp_path)
    first, second = m["history"]
    # the reference is the starting policy: KL is 0 before the first step and positive after it
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-6)
    assert second["kl_ref"] > 0.0
    assert "kl_ref" in m["final"]


def test_dr_grpo_advantage_samples_the_same_groups_and_weighs_them_differently(data, tmp_path):
    policy = sft_policy()
    runs = {}
    for est in ("group_norm", "dr_grpo"):
        m = run(tiny_cfg(max_updates=1, eval_max_samples=0, advantage=est), policy, data, tmp_path / est)
        runs[est] = (m["history"][0], _weights(tmp_path / est / "out"))
    (h_norm, w_norm), (h_dr, w_dr) = runs["group_norm"], runs["dr_grpo"]
    # same seed, same policy: the same rollouts and rewards; only the advantages (hence the step) differ
    assert h_dr["reward_mean"] == h_norm["reward_mean"]
    start = _weights(policy)
    moved = [k for k in w_dr if not torch.equal(w_dr[k], start[k])]
    assert moved, "dr_grpo did not update the policy"
    assert any(not torch.equal(w_dr[k], w_norm[k]) for k in moved)


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="grpo.group_size"):
        build(GRPOConfig, {"group_size": 1}, "grpo")
    with pytest.raises(ConfigError, match="grpo.train_batch_size"):
        build(GRPOConfig, {"group_size": 4, "filter": {"buffer_size": 2}, "train_batch_size": 16}, "grpo")
    with pytest.raises(ConfigError, match="grpo.lr_schedulr"):
        build(GRPOConfig, {"lr_schedulr": "cosine"}, "grpo")
    with pytest.raises(ConfigError, match="filter.upper"):
        build(GRPOConfig, {"group_size": 4, "filter": {"upper": 5}}, "grpo")
    with pytest.raises(ConfigError, match="grpo.advantage"):
        build(GRPOConfig, {"advantage": "whiten"}, "grpo")


def test_updates_raise_above_average_responses_relative_to_the_rest():
    """K_2 updates on one buffer move each response's log-prob in the direction of its advantage."""
    from embodied_rft.reward import RewardConfig
    from embodied_rft.train.grpo.engine import GRPOEngine, _RolloutStats
    from embodied_rft.train.grpo.loss import group_advantages
    from embodied_rft.train.grpo.ray_workers import LocalRollout
    from embodied_rft.train.grpo.rollout import sequence_logprobs

    torch.set_num_threads(1)
    cfg = tiny_cfg(
        group_size=8,
        rollout_batch_size=4,
        lr=3e-4,
        train_batch_size=32,
        micro_batch_size=32,
        filter=FilterConfig(buffer_size=4, updates_per_buffer=4),
    )
    eng = GRPOEngine(cfg, sft_policy(), grpo_samples(), [], Path("unused"), RewardConfig(), Path("."), "fp")
    eng.rollout = LocalRollout(eng.model, eng.io, eng.device, eng.sampler)
    stats = _RolloutStats()
    while not eng.buffer.ready():
        assert eng.rollout_step(stats)
    batch = eng.buffer.take()
    rows = [(g.prompt, r) for g in batch.groups for r in g.responses]

    def seq_logp() -> torch.Tensor:
        return torch.stack([lp.sum() for lp in sequence_logprobs(eng.model, rows, eng.io, 1.0, 32, "cpu")])

    class Sink:
        def log(self, row):
            pass

        def update(self, n):
            pass

        def set_postfix(self, *a, **k):
            pass

    before = seq_logp()
    eng.train_on(batch, stats.row(), Sink(), Sink())
    moved = seq_logp() - before
    adv = group_advantages(torch.tensor([g.rewards for g in batch.groups])).flatten()
    assert eng.state.updates == 4
    assert float(torch.corrcoef(torch.stack([adv, moved]))[0, 1]) > 0.2
    assert float(moved[adv > 0].mean()) > float(moved[adv < 0].mean()) + 1.0


@pytest.mark.gpu
def test_bf16_on_one_gpu(data, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    m = run(tiny_cfg(device="cuda", dtype="bfloat16", max_updates=2, eval_max_samples=2), sft_policy(), data, tmp_path)
    assert m["updates"] == 2
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in m["history"])
    assert m["history"][0]["ratio_mean"] == pytest.approx(1.0, abs=1e-2)  # bf16 forward passes agree to ~1e-2


def test_two_runs_of_one_config_give_the_same_weights_with_two_threads(data, tmp_path):
    """grpo.deterministic (on by default): with 2 intra-op threads, backward sums in a fixed order, so a rerun of
    the same config is the same run (without it the default 2-thread config drifted apart from update 3 on)."""
    cfg = tiny_cfg(max_updates=4, num_threads=2, eval_max_samples=0)
    assert cfg.deterministic
    run(cfg, sft_policy(), data, tmp_path / "a")
    run(cfg, sft_policy(), data, tmp_path / "b")
    wa, wb = _weights(tmp_path / "a" / "out"), _weights(tmp_path / "b" / "out")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not torch.are_deterministic_algorithms_enabled()  # restored after the run
