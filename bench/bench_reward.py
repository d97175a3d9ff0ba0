"""Reward throughput on one core: responses scored per second (``python bench/bench_reward.py``).

Input: none (responses are generated from EB-ALFRED's action list with a fixed seed). Output: a table
with, per case, the mean response length, responses per CPU-second and the ratio to the floor of 20,000 responses/s
for typical ~300-token responses (the ``clean`` row; a GRPO step of 128 prompts x G=8 then spends
< 0.05 s on rewards). The other rows show the cost of the tolerant paths (fenced/prose-wrapped and
repaired responses) and of the ``rr_code`` variant; they have no floor. Exit status 1 when the floor row
falls below it. ``run()`` returns the rows for a combined bench report.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from embodied_rft.data.response import format_response
from embodied_rft.reward import score
from embodied_rft.schema import format_label
from embodied_rft.world.actions import global_actions

FLOOR = 20_000.0  # responses/s on one core, typical ~300-token responses

_WORDS = (
    "the",
    "object",
    "is",
    "on",
    "counter",
    "I",
    "need",
    "to",
    "find",
    "then",
    "pick",
    "it",
    "up",
    "and",
    "place",
    "in",
    "cabinet",
    "after",
    "heating",
    "microwave",
    "visible",
    "left",
    "right",
    "near",
)


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + "."


def make_cases(n: int, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """(response, label) pairs: ~300-token responses with 6-12 step plans, half fully right."""
    rng = random.Random(seed)
    names = global_actions()
    clean, wrapped, repaired = [], [], []
    for _ in range(n):
        k = rng.randint(6, 12)
        gold = [(i, names[i]) for i in rng.sample(range(len(names)), k)]
        plan = list(gold) if rng.random() < 0.5 else gold[: rng.randint(0, k - 1)] + [(0, names[0])]
        text = format_response(
            plan,
            visual_state_description=_sentence(rng, 35),
            reasoning_and_reflection=" ".join(_sentence(rng, 20) for _ in range(4)),
        )
        label = format_label(gold)
        clean.append((text, label))
        wrapped.append((f"Here is my plan.\n```json\n{text}\n```\nLet me know.", label))
        repaired.append((text.replace('"', "'")[:-1] + ",}", label))
    return {"clean": clean, "wrapped": wrapped, "repaired": repaired}


def _rate(pairs: list[tuple[str, str]], variant: str, repeats: int) -> float:
    # CPU time of this (single-threaded) process, best of the passes: "per core" even when other jobs
    # share the machine, where wall time would measure the neighbours too.
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for response, label in pairs:
            score(response, label, variant)
        best = min(best, time.process_time() - t0)
    return len(pairs) / max(best, 1e-9)


def run(n: int = 2000, repeats: int = 5) -> list[dict]:
    cases = make_cases(n)
    rows = []
    for case, variant in (("clean", "paper"), ("wrapped", "paper"), ("repaired", "paper"), ("clean", "rr_code")):
        pairs = cases[case]
        chars = sum(len(r) for r, _ in pairs) / len(pairs)
        rate = _rate(pairs, variant, repeats)
        floor = FLOOR if (case, variant) == ("clean", "paper") else None
        rows.append(
            {
                "bench": "reward",
                "case": f"{case}/{variant}",
                "chars": round(chars),
                "per_s": rate,
                "floor": floor,
                "ratio": rate / floor if floor else None,
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="responses per case")
    ap.add_argument("--repeats", type=int, default=5, help="timed passes per case (best is kept)")
    args = ap.parse_args()
    rows = run(args.n, args.repeats)
    print(f"{'case':<18} {'chars':>6} {'responses/s':>12} {'floor':>8} {'ratio':>6}")
    for r in rows:
        floor = f"{r['floor']:.0f}" if r["floor"] else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        print(f"{r['case']:<18} {r['chars']:>6} {r['per_s']:>12.0f} {floor:>8} {ratio:>6}")
    return 0 if all(r["ratio"] is None or r["ratio"] >= 1.0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
