"""The paper pipeline's table section: GRPO's held-out prompts before and after (``grpo.details.json``'s
``heldout``), per seed and pooled."""

from __future__ import annotations

import json
from typing import Any

from embodied_rft.core.stats import mcnemar_exact, mean_sd
from embodied_rft.study.registry import section

KEYS = ("reward_mean", "exact_plan_rate")


def grpo_heldout(ctx: Any, arm: str) -> dict[str, Any]:
    """Per seed, the held-out reward and exact-plan rate before and after GRPO of ``arm``, and the prompt-by-prompt
    counts summed over seeds: reward up / down (exact sign test), solved exactly only before / only after (exact
    McNemar)."""
    values: dict[str, dict[str, float]] = {}
    paired = {"prompts": 0, "reward_up": 0, "reward_down": 0, "only_before": 0, "only_after": 0}
    diffs: dict[str, float] = {}
    for seed in ctx.seeds:
        f = ctx.arm_dir(arm, seed) / "metrics" / "grpo.details.json"
        if not f.exists():
            continue
        held = json.loads(f.read_text("utf-8")).get("heldout") or {}
        for when in ("before", "after"):
            for k in KEYS:
                if (v := (held.get(when) or {}).get(k)) is not None:
                    values.setdefault(f"{k} {when}", {})[str(seed)] = float(v)
        if p := held.get("paired"):
            paired["prompts"] += p["n"]
            paired["reward_up"] += p["reward"]["up"]
            paired["reward_down"] += p["reward"]["down"]
            paired["only_before"] += p["accuracy_full"]["only_a"]
            paired["only_after"] += p["accuracy_full"]["only_b"]
            diffs[str(seed)] = p["reward"]["mean_diff"]
    return _derive({"arm": arm, "values": values, "paired": paired, "reward_mean_diff": diffs})


def _derive(d: dict[str, Any]) -> dict[str, Any]:
    p = d["paired"]
    spread = {}
    for k, per in d["values"].items():
        m, sd = mean_sd(list(per.values()))
        spread[k] = {"mean": m, "sd": sd}
    return {
        **d,
        "spread": spread,
        "reward_p_sign": mcnemar_exact(p["reward_down"], p["reward_up"]),
        "accuracy_full_p_mcnemar": mcnemar_exact(p["only_before"], p["only_after"]),
    }


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    values: dict[str, dict[str, float]] = {}
    for part in parts:
        for k, per in part["values"].items():
            values.setdefault(k, {}).update(per)
    paired = {k: sum(part["paired"][k] for part in parts) for k in parts[0]["paired"]}
    diffs = {s: v for part in parts for s, v in part["reward_mean_diff"].items()}
    return _derive({"arm": parts[0]["arm"], "values": values, "paired": paired, "reward_mean_diff": diffs})


def _render(d: dict[str, Any]) -> str:
    lines = [f"GRPO's held-out prompts (`{d['arm']}`; greedy, decomposed val prompts):", ""]
    lines += ["| held-out | mean ± s.d. | per seed |", "|---|---|---|"]
    for k in sorted(d["values"]):
        s, per = d["spread"][k], d["values"][k]
        lines.append(
            f"| {k} | {s['mean']:.3f} ± {s['sd']:.3f} | {', '.join(f's{x} {v:.3f}' for x, v in per.items())} |"
        )
    p = d["paired"]
    if p["prompts"]:
        lines += [
            "",
            f"Prompt by prompt, pooled over the seeds ({p['prompts']} prompt pairs): reward higher after GRPO on "
            f"{p['reward_up']}, lower on {p['reward_down']} (sign test p = {d['reward_p_sign']:.3g}); solved exactly "
            f"only before {p['only_before']}, only after {p['only_after']} (McNemar p = "
            f"{d['accuracy_full_p_mcnemar']:.3g}).",
        ]
    return "\n".join(lines) + "\n"


section("grpo_heldout", _merge, _render)(grpo_heldout)
