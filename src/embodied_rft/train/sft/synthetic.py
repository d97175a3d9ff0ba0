"""Small synthetic EB-ALFRED chat records, for tests, benchmarks and smoke runs of the SFT stage.

Output: SFT records (``{"messages": [system, user, assistant]}``, optionally ``"images"``) shaped like the
distill stage's: a pick-and-place instruction, a one-line observation, and the canonical four-key EB
response (:func:`embodied_rft.data.response.format_response`) with real EB-ALFRED action ids. Not a data set
for learning the task (no simulator, no history); just realistic text to tokenize and fit.
"""

from __future__ import annotations

import random
from pathlib import Path

from embodied_rft.core.atomic import write_jsonl_atomic
from embodied_rft.data.response import format_response
from embodied_rft.world.actions import PUT_DOWN, ActionSpace, global_actions

_OBJECTS = ("Apple", "Mug", "Book", "Knife", "Potato", "Bowl", "Egg", "Pencil", "Vase", "Spoon")
_RECEPTACLES = ("Fridge", "CounterTop", "Sink", "Drawer", "Shelf", "Microwave", "Cabinet")
SYSTEM = "You are a robot in a house. Answer with a JSON object: the four EB keys, and executable_plan as a list of {action_id, action_name}."


def synthetic_records(n: int, seed: int = 0) -> list[dict]:
    """``n`` chat records (deterministic for a seed)."""
    rng = random.Random(seed)
    space = ActionSpace()
    names = set(global_actions())
    out = []
    for _ in range(n):
        obj, rec = rng.choice(_OBJECTS), rng.choice(_RECEPTACLES)
        plan = [f"find a {obj}", f"pick up the {obj}", f"find a {rec}"]
        if f"open the {rec}" in names:
            plan.append(f"open the {rec}")
        plan.append(PUT_DOWN)
        pairs = [(space.id(a), a) for a in plan]
        answer = format_response(
            pairs,
            visual_state_description=f"The {obj} is on the table; the {rec} is across the room.",
            reasoning_and_reflection=f"I must carry the {obj} to the {rec}.",
        )
        out.append(
            {
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {
                        "role": "user",
                        "content": f"Instruction: put a {obj} in the {rec}.\nObservation: you see a {obj} and a {rec}.",
                    },
                    {"role": "assistant", "content": answer},
                ]
            }
        )
    return out


def write_synthetic_sft(path: str | Path, n: int, seed: int = 0, image_size: tuple[int, int] | None = None) -> Path:
    """Write ``n`` records to ``path``; with ``image_size`` each gets a PNG (``images/<i>.png`` next to it)
    whose colour depends on the object, so a vision model has something to look at."""
    from PIL import Image

    path = Path(path)
    recs = synthetic_records(n, seed)
    if image_size is not None:
        (path.parent / "images").mkdir(parents=True, exist_ok=True)
        for i, r in enumerate(recs):
            obj = r["messages"][1]["content"].split("put a ", 1)[1].split(" ", 1)[0]
            k = _OBJECTS.index(obj)
            Image.new("RGB", image_size, (25 * k, 255 - 25 * k, 100 + 10 * (i % 5))).save(
                path.parent / "images" / f"{i}.png"
            )
            r["images"] = [f"images/{i}.png"]
    write_jsonl_atomic(path, recs)
    return path
