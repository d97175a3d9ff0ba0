"""Decomposed samples for teacher tests, built without the simulator: hand-checked EB expert plans for each
ALFRED task type (ids from the real action space, repeated instances as scene extras), one sample per
step with the history of the steps before it, prompts from the project's real prompt builder. A fraction of
samples carry a failed action as their last history step, as replanning samples do."""

from __future__ import annotations

import json
from pathlib import Path

from embodied_rft.data.prompt import PromptConfig, build_messages
from embodied_rft.world.actions import ActionSpace, split_action

OK = "Last action executed successfully."
PUT = "put down the object in hand"

PLANS = [
    (
        "pick_heat_then_place_in_recep",
        "Put a heated apple on the counter.",
        [
            "find a Apple",
            "pick up the Apple",
            "find a Microwave",
            "open the Microwave",
            PUT,
            "close the Microwave",
            "turn on the Microwave",
            "turn off the Microwave",
            "open the Microwave",
            "find a Apple",
            "pick up the Apple",
            "close the Microwave",
            "find a CounterTop",
            PUT,
        ],
    ),
    (
        "pick_cool_then_place_in_recep",
        "Chill a tomato and store it in the cabinet.",
        [
            "find a Tomato",
            "pick up the Tomato",
            "find a Fridge",
            "open the Fridge",
            PUT,
            "close the Fridge",
            "open the Fridge",
            "find a Tomato",
            "pick up the Tomato",
            "close the Fridge",
            "find a Cabinet_2",
            "open the Cabinet_2",
            PUT,
            "close the Cabinet_2",
        ],
    ),
    (
        "pick_clean_then_place_in_recep",
        "Rinse off a ladle and move it to the table.",
        [
            "find a Ladle",
            "pick up the Ladle",
            "find a Sink",
            PUT,
            "find a Faucet",
            "turn on the Faucet",
            "turn off the Faucet",
            "find a Ladle",
            "pick up the Ladle",
            "find a DiningTable",
            PUT,
        ],
    ),
    (
        "look_at_obj_in_light",
        "Examine a book under the desk lamp.",
        ["find a Book", "pick up the Book", "find a DeskLamp", "turn on the DeskLamp"],
    ),
    ("pick_and_place_simple", "Put a mug on the shelf.", ["find a Mug", "pick up the Mug", "find a Shelf", PUT]),
    (
        "pick_two_obj_and_place",
        "Put two pens on the desk.",
        ["find a Pen", "pick up the Pen", "find a Desk", PUT, "find a Pen_2", "pick up the Pen_2", "find a Desk", PUT],
    ),
    (
        "pick_and_place_with_movable_recep",
        "Put a spoon in a cup and place the cup on the counter.",
        ["find a Spoon", "pick up the Spoon", "find a Cup", PUT, "pick up the Cup", "find a CounterTop", PUT],
    ),
    (
        "pick_cool_then_place_in_recep",
        "Slice a potato and chill a piece in the fridge.",
        [
            "find a Knife",
            "pick up the Knife",
            "find a Potato",
            "slice the Potato",
            "find a CounterTop",
            PUT,
            "find a Potato",
            "pick up the Potato",
            "find a Fridge",
            "open the Fridge",
            PUT,
            "close the Fridge",
        ],
    ),
]


def _observation(plan: list[str], n: int) -> str:
    held = None
    for name in plan[:n]:
        verb, target = split_action(name)
        if verb == "pick up the":
            held = target
        elif name == PUT:
            held = None
    near = split_action(plan[n - 1])[1] if n else None
    seen = sorted({t for t in (split_action(a)[1] for a in plan) if t})
    return (
        f"You are in the room{' next to the ' + near if near else ''}. You see {', '.join(seen)}. "
        f"You are holding {'the ' + held if held else 'nothing'}."
    )


def make_samples(n_episodes: int = 8, with_failures: bool = True) -> list[dict]:
    cfg = PromptConfig()
    out = []
    for e in range(n_episodes):
        task_type, instruction, plan = PLANS[e % len(PLANS)]
        ids = {t for t in (split_action(a)[1] for a in plan) if t}
        space = ActionSpace.for_instances(ids)
        pairs = [(space.id(a), a) for a in plan]
        ep_id = f"ep{e:03d}"
        history: list[dict] = []
        for n, (aid, name) in enumerate(pairs):
            hist = [dict(h) for h in history]
            if with_failures and n > 0 and (e + n) % 5 == 0:
                # a replanning sample: the last thing tried failed (an unreachable pick-up)
                bad = space.id("pick up the Apple") if name != "pick up the Apple" else space.id("pick up the Mug")
                hist.append(
                    {
                        "action_id": bad,
                        "action_name": space.name(bad),
                        "feedback": "Last action is invalid. The object is not visible from here.",
                    }
                )
            obs = _observation(plan, n)
            out.append(
                {
                    "sample_id": f"{ep_id}:{n}",
                    "episode_id": ep_id,
                    "step": n,
                    "num_steps": len(plan),
                    "task_type": task_type,
                    "subset": "base",
                    "instruction": instruction,
                    "history": hist,
                    "observation": obs,
                    "image": None,
                    "prompt": build_messages(cfg, instruction, hist, obs, space, sorted(ids)),
                    "label": json.dumps(
                        {"gold": [list(p) for p in pairs[n:]], "extra_actions": list(space.extras)},
                        separators=(",", ":"),
                    ),
                }
            )
            history.append({"action_id": aid, "action_name": name, "feedback": OK})
    return out


def write_samples(path: Path, samples: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    return path
