"""Generated episodes: schema, expert plans that succeed, splits by layout, determinism, instruction variety."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.data.jsonl import read_jsonl
from embodied_rft.world import (
    SUBSETS,
    TASK_TYPES,
    GeneratorConfig,
    Simulator,
    check_episode,
    expert_plan,
    generate_episodes,
    goal_key,
    run_prepare_generated,
    split_layouts,
)

CFG = GeneratorConfig(seed=7)
N = {"train": 2000, "valid_seen": 500, "valid_unseen": 500}  # 3,000 episodes in the default tier


@pytest.fixture(scope="module")
def episodes() -> dict[str, list[dict]]:
    return {split: generate_episodes(CFG, split, n) for split, n in N.items()}


def test_every_expert_plan_reaches_its_goal(episodes):
    n_actions = 0
    for split, eps in episodes.items():
        for i, ep in enumerate(eps):
            check_episode(ep, f"{split}[{i}]")
            assert ep["split"] == split and ep["source"] == "generated"
            assert all(set(o["state"]) == {"open", "on", "dirty"} for o in ep["scene"]["objects"])
            sim = Simulator.from_episode(ep)
            assert not sim.is_success(), ep["episode_id"]
            for name in ep["expert_plan"]:
                assert sim.actions.id(name) < 162  # generated plans use only EB's global actions
                r = sim.step(sim.actions.id(name))
                assert r.success, (ep["episode_id"], name, r.feedback)
            assert sim.is_success() and sim.progress() == 1.0, ep["episode_id"]
            assert 1 <= len(ep["expert_plan"]) <= CFG.max_plan_len
            n_actions += len(ep["expert_plan"])
    assert sum(len(v) for v in episodes.values()) == 3000 and n_actions > 20000


def test_expert_plan_recomputes_the_stored_plan(episodes):
    for ep in episodes["valid_unseen"][:300]:
        assert expert_plan(ep) == ep["expert_plan"]


def test_every_task_type_and_subset_is_generated(episodes):
    eps = episodes["train"]
    assert set(Counter(e["task_type"] for e in eps)) == set(TASK_TYPES)
    subsets = Counter(e["subset"] for e in eps)
    assert set(subsets) == set(SUBSETS) and max(subsets.values()) - min(subsets.values()) <= 1
    assert sum(e["goal"]["object_sliced"] for e in eps) > 100
    long = [len(e["expert_plan"]) for e in eps if e["subset"] == "long_horizon"]
    assert min(long) >= CFG.long_horizon_min_len
    other = [len(e["expert_plan"]) for e in eps if e["subset"] != "long_horizon"]
    assert sum(long) / len(long) > sum(other) / len(other) + 4


def test_plans_depend_on_the_initial_state(episodes):
    eps = episodes["train"]
    # some containers start open, some objects start inside closed ones, some lamps start on
    opens = [a for e in eps for a in e["expert_plan"] if a.startswith("open the")]
    assert len(opens) > 500
    start_open = sum(o["state"].get("open", False) for e in eps for o in e["scene"]["objects"])
    assert start_open > 500
    heat = [e for e in eps if e["task_type"] == "pick_heat_then_place_in_recep"]
    with_open = sum(
        "open the Microwave" in e["expert_plan"][: e["expert_plan"].index("put down the object in hand") + 1]
        for e in heat
        if "find a Microwave" in e["expert_plan"]
    )
    assert 0 < with_open < len(heat)  # the microwave is opened only when it starts closed


def test_splits_are_by_layout(episodes):
    train_l = {lay.layout_id for lay in split_layouts(CFG, "train")}
    unseen_l = {lay.layout_id for lay in split_layouts(CFG, "valid_unseen")}
    assert train_l.isdisjoint(unseen_l)
    sig_train = {lay.signature for lay in split_layouts(CFG, "train")}
    assert all(lay.signature not in sig_train for lay in split_layouts(CFG, "valid_unseen"))
    used = {s: {e["scene"]["layout_id"] for e in eps} for s, eps in episodes.items()}
    assert used["train"] <= train_l and used["valid_seen"] <= train_l and used["valid_unseen"] <= unseen_l
    assert len(used["valid_seen"] & used["train"]) > 20
    # valid_seen holds new tasks: no (layout, goal) of valid_seen is a train goal
    keys = {
        s: {goal_key(e["scene"]["layout_id"], e["task_type"], e["goal"]) for e in eps} for s, eps in episodes.items()
    }
    assert keys["valid_seen"].isdisjoint(keys["train"])


def test_generation_is_deterministic_and_prefix_stable():
    a = generate_episodes(CFG, "valid_seen", 30)
    b = generate_episodes(CFG, "valid_seen", 30)
    assert json.dumps(a) == json.dumps(b)
    assert generate_episodes(CFG, "valid_seen", 10) == a[:10]
    assert generate_episodes(CFG, "valid_seen", 5, start=20) == a[20:25]
    c = generate_episodes(GeneratorConfig(seed=8), "valid_seen", 30)
    assert [e["instruction"] for e in c] != [e["instruction"] for e in a]


def test_instructions_are_varied(episodes):
    eps = episodes["train"]
    texts = [e["instruction"] for e in eps]
    assert len(set(texts)) > 0.9 * len(texts)
    for subset in SUBSETS:
        sub = [e["instruction"] for e in eps if e["subset"] == subset]
        openers = Counter(" ".join(t.lower().split()[:2]) for t in sub)
        assert openers.most_common(1)[0][1] < 0.25 * len(sub), (subset, openers.most_common(3))
    # the styles differ: looks words in visual_appearance, "something"/"where you" in common_sense, ...
    vis = " ".join(e["instruction"] for e in eps if e["subset"] == "visual_appearance")
    cs = " ".join(e["instruction"] for e in eps if e["subset"] == "common_sense")
    cx = [e["instruction"] for e in eps if e["subset"] == "complex_instruction"]
    assert len(re.findall(r"\b(red|white|black|silver|yellow|brown|blue|green|grey)\b", vis)) > 200
    assert cs.count("something") + cs.count("where you") > 100
    base = [e["instruction"] for e in eps if e["subset"] == "base"]
    assert sum(len(t) for t in cx) / len(cx) > 1.5 * sum(len(t) for t in base) / len(base)


def test_run_prepare_generated_writes_splits_and_counts(tmp_path):
    cfg = GeneratorConfig(seed=3, n_train=24, n_valid_seen=12, n_valid_unseen=12, n_layouts_train=3, n_layouts_unseen=2)
    metrics = run_prepare_generated(cfg, tmp_path)
    for split, n in (("train", 24), ("valid_seen", 12), ("valid_unseen", 12)):
        rows = read_jsonl(tmp_path / f"{split}.jsonl")
        assert len(rows) == n and metrics["splits"][split]["episodes"] == n
        m = metrics["splits"][split]
        assert sum(m["task_type"].values()) == sum(m["subset"].values()) == sum(m["task_type_x_subset"].values()) == n
        assert m["subset"] == {s: n // 6 for s in SUBSETS}
        assert m["task_type_x_subset"] == dict(sorted(Counter(f"{r['task_type']}/{r['subset']}" for r in rows).items()))
    assert metrics["layouts"] == {"train": 12, "unseen": 8}
    assert not list(tmp_path.glob(".*.tmp"))


def test_generator_config_is_built_and_checked():
    cfg = build(GeneratorConfig, {"seed": 1, "n_train": 10, "subsets": ["base", "spatial"]}, "data.generated")
    assert cfg.subsets == ("base", "spatial") and cfg.n_train == 10
    with pytest.raises(ConfigError, match=r"data.generated.n_trian: unknown key; did you mean 'n_train'"):
        build(GeneratorConfig, {"n_trian": 10}, "data.generated")
    with pytest.raises(ConfigError, match="p_open: must be a probability"):
        build(GeneratorConfig, {"p_open": 1.5}, "data.generated")
    with pytest.raises(ConfigError, match="task_types: look_at_obj_in_light needs one of the rooms"):
        build(GeneratorConfig, {"rooms": ["kitchen"], "task_types": ["look_at_obj_in_light"]}, "data.generated")
    with pytest.raises(ValueError, match="split: 'test'"):
        generate_episodes(CFG, "test", 1)
    with pytest.raises(ConfigError, match="target_types: 'Fridge' is not an object type that can be picked up"):
        build(GeneratorConfig, {"target_types": ["Apple", "Fridge"]}, "data.generated")
    with pytest.raises(ConfigError, match="target_types: none of them occurs in a room where look_at_obj_in_light"):
        build(GeneratorConfig, {"task_types": ["look_at_obj_in_light"], "target_types": ["SoapBar"]}, "data.generated")


def test_target_types_restrict_goals_not_scenes():
    """Every goal names one of target_types (every split); the scenes still hold other types as distractors."""
    targets = ("Apple", "Mug", "Book", "Cloth", "CellPhone")
    cfg = GeneratorConfig(
        seed=5,
        task_types=("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep"),
        target_types=targets,
    )
    named, others = Counter(), set()
    for split in ("train", "valid_unseen"):
        for ep in generate_episodes(cfg, split, 60):
            named[ep["goal"]["object_target"]] += 1
            others |= {o["type"] for o in ep["scene"]["objects"]} - set(targets)
            sim = Simulator.from_episode(ep)
            for name in ep["expert_plan"]:
                assert sim.step(sim.actions.id(name)).success, (ep["episode_id"], name)
            assert sim.is_success()
    assert set(named) == set(targets)
    assert len(others) > 20


@pytest.mark.slow
def test_thirty_thousand_generated_plans_succeed():
    cfg = GeneratorConfig(seed=11)
    for split, n in (("train", 24000), ("valid_seen", 3000), ("valid_unseen", 3000)):
        for ep in generate_episodes(cfg, split, n):
            sim = Simulator.from_episode(ep)
            for name in ep["expert_plan"]:
                assert sim.step(name).success, (ep["episode_id"], name)
            assert sim.is_success(), ep["episode_id"]
