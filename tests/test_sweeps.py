"""The sweep table reads Hydra multirun job folders (overrides + metrics) into one row per job."""

import json

import yaml

from embodied_rft.tools.sweeps import collect, render


def test_collect_and_render_multirun_jobs(tmp_path):
    for i, (enabled, after) in enumerate([(True, 0.91), (False, 0.83)]):
        job = tmp_path / str(i)
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"grpo.filter.enabled={str(enabled).lower()}"]))
        (job / "metrics").mkdir()
        (job / "metrics" / "grpo.json").write_text(
            json.dumps(
                {
                    "updates": 8,
                    "heldout": {
                        "before": {"reward_mean": 0.8, "exact_plan_rate": 0.2},
                        "after": {"reward_mean": after, "exact_plan_rate": 0.25},
                    },
                    "filter": {"pass_rate": 0.5 if enabled else 1.0},
                    "counters": {"zero_adv_groups_trained": 0 if enabled else 3},
                }
            )
        )
    rows = collect(tmp_path, "grpo")
    assert [r["overrides"] for r in rows] == ["grpo.filter.enabled=true", "grpo.filter.enabled=false"]
    assert [r["reward after"] for r in rows] == [0.91, 0.83]
    assert [r["zero-adv groups trained"] for r in rows] == [0, 3]
    table = render(rows)
    assert "| 0 | grpo.filter.enabled=true | 8 | 0.800 | 0.910 |" in table
    assert render([]) == "(no finished jobs)"
