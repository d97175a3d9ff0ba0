"""Per-update rows of the local engine: history, plot files for `dvc plots`, W&B offline (grpo_log)."""

from __future__ import annotations

import csv
import json

import pytest

from embodied_rft.train.grpo.log import RunTracker

ROWS = [{"update": 1, "reward_mean": 0.5, "kl_ref": float("nan")}, {"update": 2, "reward_mean": 0.75, "clip_frac": 0.1}]


def test_history_and_plot_files(tmp_path):
    history: list[dict] = []
    t = RunTracker((), "offline", "p", tmp_path, {}, history)
    for r in ROWS:
        t.log(r)
    assert history[0]["kl_ref"] is None  # NaN would make the metrics JSON invalid
    t.write_plots(tmp_path / "grpo.csv")
    t.write_plots(tmp_path / "grpo.json")
    rows = list(csv.DictReader((tmp_path / "grpo.csv").open()))
    assert [r["update"] for r in rows] == ["1", "2"]
    assert rows[0]["clip_frac"] == "" and rows[1]["clip_frac"] == "0.1"  # a key first seen later still gets a column
    assert json.loads((tmp_path / "grpo.json").read_text())[1]["reward_mean"] == 0.75
    t.close()


@pytest.mark.slow
def test_wandb_offline_run_is_written_and_resumed(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    history: list[dict] = []
    t = RunTracker(("wandb",), "offline", "embodied_rft_test", tmp_path, {"group_size": 4}, history)
    assert t.run is not None and t.run_id
    for r in ROWS:
        t.log(r)
    t.summary({"final_reward": 0.75})
    t.close()
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and runs[0].name.endswith(t.run_id)
    again = RunTracker(("wandb",), "offline", "embodied_rft_test", tmp_path, {}, history, run_id=t.run_id)
    assert again.run_id == t.run_id
    again.close()
