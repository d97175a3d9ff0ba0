"""Text and image observations: content, hiding rules, determinism."""

from __future__ import annotations

import hashlib

from embodied_rft.world import GeneratorConfig, Simulator, generate_episodes
from tests.helpers.world_scenes import episode, simple


def _png_digest(img) -> str:
    return hashlib.sha256(img.tobytes()).hexdigest()


def test_start_observation_lists_the_rooms_furniture_with_states():
    text = Simulator.from_episode(simple()).observe_text()
    lines = text.splitlines()
    assert lines[0] == "You are in the middle of the kitchen."
    assert lines[1].startswith("Around you: Cabinet (closed), Cabinet_2 (open), CoffeeMachine, CounterTop,")
    assert "Fridge (closed)" in lines[1] and "Microwave (closed, off)" in lines[1]
    assert "Apple" not in text  # small objects are not visible from the middle of the room
    assert lines[2] == "In hand: nothing."


def test_place_observation_shows_contents_and_hides_closed_containers():
    sim = Simulator.from_episode(simple())
    sim.step("find a CounterTop")
    assert sim.observe_text().splitlines()[:2] == [
        "You are at the CounterTop in the kitchen.",
        "You see: CounterTop [Apple, Bowl [Fork]].",
    ]
    sim.step("find a Egg")
    assert "You see: Fridge (closed)." in sim.observe_text() and "Egg" not in sim.observe_text()
    sim.step("open the Fridge")
    assert "You see: Fridge (open) [Egg]." in sim.observe_text()
    sim.step("pick up the Egg")
    assert sim.observe_text().endswith("In hand: Egg.")
    sim.step("find a Sink")
    assert "Sink [Faucet (off)]" in sim.observe_text() and "Mug" not in sim.observe_text()


def test_observation_is_short():
    for ep in generate_episodes(GeneratorConfig(seed=5), "train", 60):
        sim = Simulator.from_episode(ep)
        longest = len(sim.observe_text())
        for a in ep["expert_plan"]:
            sim.step(a)
            longest = max(longest, len(sim.observe_text()))
        assert longest < 700, ep["episode_id"]


def test_image_is_deterministic_and_follows_the_state():
    ep = episode("pick_heat_then_place_in_recep", "Apple", "DiningTable")
    a, b = Simulator.from_episode(ep), Simulator.from_episode(ep)
    img = a.render_image()
    assert img.size == (224, 224) and img.mode == "RGB"
    assert _png_digest(img) == _png_digest(b.render_image()) == _png_digest(a.copy().render_image())
    seen = {_png_digest(img)}
    for act in ["find a Apple", "pick up the Apple", "find a Microwave", "open the Microwave"]:
        a.step(act)
        b.step(act)
        d = _png_digest(a.render_image())
        assert d == _png_digest(b.render_image())
        seen.add(d)
    assert len(seen) == 5  # every step changed the picture
    assert a.render_image(448).size == (448, 448)


def test_image_draws_objects_in_their_colours():
    sim = Simulator.from_episode(simple())
    sim.step("find a CounterTop")
    img = sim.render_image()
    colours = {c for _, c in img.getcolors(maxcolors=1 << 16)}
    from embodied_rft.world.lexicon import colour_of

    assert colour_of("Apple") in colours and colour_of("Bowl") in colours and colour_of("CounterTop") in colours
