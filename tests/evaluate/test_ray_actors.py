"""Evaluation in Ray actors on a running local head (``evaluate.parallel=ray``): the fast backend on CPU actors
plays the same 24 episodes as the in-process run, answer for answer."""

from __future__ import annotations

import os

import pytest

from embodied_rft.evaluate import EpisodeLimits, PolicySpec, ResultStore, run_episodes
from embodied_rft.evaluate.runner import connect_ray
from embodied_rft.generation import GenerationConfig
from tests.helpers import tiny_checkpoints as tc

ray = pytest.importorskip("ray")


def _strip(recs):
    return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in recs]


def test_actors_on_a_running_head_play_the_episodes_as_the_inline_run(tmp_path, monkeypatch):
    from ray.util.state import list_actors

    from tests.helpers.ray_head import ray_head

    eps = list(tc.episodes("valid_seen", 24))
    gen = GenerationConfig(backend="fast", max_new_tokens=200, device="cpu")
    spec = PolicySpec("model", str(tc.fitted_model()), gen)
    limits = EpisodeLimits(max_planner_calls=6)
    with tc.one_thread():  # Ray gives each 1-CPU actor one OpenMP thread: the same arithmetic
        inline = run_episodes(eps, spec, tc.PROMPT, limits, ResultStore(tmp_path / "a.jsonl", "x"), episodes_per_task=4)
    with ray_head(num_cpus=2) as head:
        monkeypatch.setenv("RAY_ADDRESS", head.gcs)
        remote = run_episodes(
            eps,
            spec,
            tc.PROMPT,
            limits,
            ResultStore(tmp_path / "b.jsonl", "x"),
            workers=2,
            parallel="ray",
            episodes_per_task=4,
        )
        workers = list_actors(address=head.address, filters=[("class_name", "=", "_RayWorker")])
    assert len(workers) == 2  # the episodes ran in two actors of that head
    assert [r["episode_id"] for r in remote] == [e["episode_id"] for e in eps]
    assert _strip(remote) == _strip(inline)
    # the model played: whole answers, and the episode it was fitted on solved
    assert sum(r["planner_calls"] for r in inline) >= 24 and inline[0]["success"]


def test_a_job_server_address_is_set_aside_for_ray_init(monkeypatch):
    """RAY_ADDRESS=http://…:8265 (what `ray job submit` and the grpo stage read) is not a cluster address."""
    seen = {}

    class FakeRay:
        def init(self, **kw):
            seen["address"] = os.environ.get("RAY_ADDRESS")

        def get_runtime_context(self):
            return type("C", (), {"gcs_address": "127.0.0.1:6379"})()

    monkeypatch.setenv("RAY_ADDRESS", "http://head:8265")
    connect_ray(FakeRay())
    assert seen["address"] is None and os.environ["RAY_ADDRESS"] == "http://head:8265"
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    connect_ray(FakeRay())
    assert seen["address"] == "head:6379"
