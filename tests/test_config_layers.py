"""One config layer per decision: the group files under conf/ restate the dataclasses' defaults (the paper's
values) and nothing else; sizing for a machine lives in conf/experiment/*. A group file whose value drifts from
its dataclass would be a second, silent default."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import embodied_rft.regrpo.plugin  # noqa: F401 - registers the sections decompose.rot, teacher.rot, reward.regrpo
from embodied_rft.config import as_dict
from embodied_rft.data.decompose import DecomposeConfig
from embodied_rft.data.prompt import PromptConfig
from embodied_rft.evaluate.config import EvalConfig
from embodied_rft.params import compose
from embodied_rft.reward import RewardConfig
from embodied_rft.teacher.config import TeacherConfig
from embodied_rft.train.grpo.config import GRPOConfig
from embodied_rft.train.sft.config import SFTConfig
from embodied_rft.vegas.bon_config import BonConfig
from embodied_rft.vegas.config import SynthConfig
from embodied_rft.vegas.verifier_config import VerifierConfig

CONF = Path(__file__).resolve().parents[1] / "conf"

# Deliberate differences between a pipeline default and the library default, each with its reason.
PIPELINE_ONLY = {
    # the pipeline logs to W&B (offline); a library caller (tests, notebooks) gets no tracker unless asked
    "sft.report_to",
    # the pipeline prompts like EB (the paper); the library default is the short prompt the tiny model reads
    "prompt.style",
    # evaluation answers may be long EB responses with reasoning; the generator's own default is shorter
    "evaluate.generation.max_new_tokens",
}


def _differences(yaml_part: dict, defaults: dict, prefix: str) -> list[str]:
    out = []
    for key, value in yaml_part.items():
        where = f"{prefix}.{key}"
        if key not in defaults:
            out.append(f"{where}: not a field of the dataclass")
            continue
        default = defaults[key]
        if isinstance(value, dict) and isinstance(default, dict):
            out += _differences(value, default, where)
        elif isinstance(value, str) and value.startswith("${"):
            continue  # an interpolation (e.g. ${seed}) is wiring, not a value
        elif where not in PIPELINE_ONLY and value != (list(default) if isinstance(default, tuple) else default):
            out.append(f"{where}: conf says {value!r}, the dataclass default is {default!r}")
    return out


CASES = [
    ("grpo", lambda: yaml.safe_load((CONF / "grpo" / "local.yaml").read_text()), GRPOConfig),
    ("sft", lambda: yaml.safe_load((CONF / "config.yaml").read_text())["sft"], SFTConfig),
    ("prompt", lambda: yaml.safe_load((CONF / "config.yaml").read_text())["prompt"], PromptConfig),
    ("decompose", lambda: yaml.safe_load((CONF / "config.yaml").read_text())["decompose"], DecomposeConfig),
    ("evaluate", lambda: yaml.safe_load((CONF / "evaluate" / "default.yaml").read_text()), EvalConfig),
    ("reward", lambda: yaml.safe_load((CONF / "reward" / "paper.yaml").read_text()), RewardConfig),
    ("teacher", lambda: yaml.safe_load((CONF / "teacher" / "scripted.yaml").read_text()), TeacherConfig),
    ("synth", lambda: yaml.safe_load((CONF / "vegas" / "paper.yaml").read_text())["synth"], SynthConfig),
    ("verifier", lambda: yaml.safe_load((CONF / "vegas" / "paper.yaml").read_text())["verifier"], VerifierConfig),
    ("bon", lambda: yaml.safe_load((CONF / "vegas" / "paper.yaml").read_text())["bon"], BonConfig),
]


@pytest.mark.parametrize("name,load,cls", CASES, ids=[c[0] for c in CASES])
def test_group_files_restate_the_dataclass_defaults(name, load, cls):
    assert _differences(load(), as_dict(cls()), name) == []


def test_a_drifted_group_value_is_reported():
    part = yaml.safe_load((CONF / "grpo" / "local.yaml").read_text())
    part["lr"] = 1e-5
    part["filter"]["buffer_size"] = 4
    assert _differences(part, as_dict(GRPOConfig()), "grpo") == [
        "grpo.lr: conf says 1e-05, the dataclass default is 1e-06",
        "grpo.filter.buffer_size: conf says 4, the dataclass default is 128",
    ]


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_long_grpo_preset_is_the_default_with_twice_the_updates():
    default, long = _flat(compose(CONF)), _flat(compose(CONF, ["experiment=tiny_long"]))
    changed = {k for k in default.keys() | long.keys() if default.get(k) != long.get(k)}
    assert changed == {"grpo.max_updates"} and long["grpo.max_updates"] == 2 * default["grpo.max_updates"]


def test_pretrained_verifier_preset_changes_only_the_verifier_and_its_scoring():
    # the same records and as many of them (800 x 32 = 1,600 x 16), from SmolLM2 instead of the tiny SFT policy,
    # against the tiny preset's verdict-SFT verifier (its own is pairwise, 800 steps)
    default = _flat(compose(CONF, ["verifier.objective=sft", "verifier.sft.max_steps=1600"]))
    smol = _flat(compose(CONF, ["experiment=tiny_smollm2_verifier"]))
    changed = {k for k in default.keys() | smol.keys() if default.get(k) != smol.get(k)}
    assert changed == {
        "verifier.init",
        "verifier.sft.lr",
        "verifier.sft.batch_size",
        "verifier.sft.max_steps",
        "verifier.sft.max_len",
        "verifier.sft.bf16",
        "verifier.sft.save_steps",
        "bon.verifier_backend",
        "bon.verifier_max_new_tokens",
    }
    assert smol["verifier.init"] == "pretrained" and smol["verifier.model.name"] == "smollm2_135m"
    records = smol["verifier.sft.batch_size"] * smol["verifier.sft.max_steps"]
    assert records == default["verifier.sft.batch_size"] * default["verifier.sft.max_steps"]
