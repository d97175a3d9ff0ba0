"""Best-of-N cost per planner call (VeGAS, docs/vegas.md): what each selector pays for one planner call.

Run: ``python bench/bench_bon.py [--episodes 24] [--n 4] [--m 2] [--max-new-tokens 160] [--threads 1]``.
Input: none (episodes from the symbolic world's generator, valid_seen; a tiny Qwen2 built here and fitted for a few
seconds on the expert answers to the episodes' first prompts, so its candidates are readable plans). Output: one
row per selector — planner calls per wall-second when the episodes are played in lockstep under EB's rules
(``vegas/select.py`` through ``evaluate/episode.py``), ratio = greedy's rate over this selector's (how many times
dearer a planner call is), and the model calls (policy samples + verifications) per planner call. The fitted model
also plays the verifier (it never learnt the verdict format, so each verification runs to the token cap: the
worst case for time). A last row times P(yes)'s read of the verdict token, batched against one forward per prompt.
``run()`` returns the rows for ``bench/run_all.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

SELECTORS = ("greedy", "sample", "sc", "bon_ft", "bon_oracle")


def _setup(n_eps: int, root: Path):
    import torch

    from embodied_rft.data.prompt import PromptConfig, build_messages
    from embodied_rft.data.response import format_response
    from embodied_rft.models import ModelConfig, build_base_model, load_model
    from embodied_rft.world import Simulator
    from embodied_rft.world.generator import GeneratorConfig, generate_episodes

    cfg = PromptConfig(style="compact", action_list="none", system=False)
    eps = generate_episodes(GeneratorConfig(seed=0), "valid_seen", n_eps)
    pairs = []
    for ep in eps:
        sim = Simulator.from_episode(ep)
        types = sorted({o["type"] for o in ep["scene"]["objects"]})
        msgs = build_messages(cfg, ep["instruction"], [], sim.observe_text(), sim.actions, types)
        pairs.append((msgs, format_response([(sim.actions.id(a), a) for a in ep["expert_plan"]], language_plan="")))
    corpus = [m["content"] for msgs, _ in pairs for m in msgs] + [r for _, r in pairs]
    path = build_base_model(
        ModelConfig(name="bench_bon", kind="tiny", pre_split="phrases", vocab_size=1024), corpus, root
    )
    model, tok = load_model(path, for_training=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rows = []
    for msgs, resp in pairs:
        p = tok(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False), add_special_tokens=False)
        r = tok(resp + "<|im_end|>", add_special_tokens=False)["input_ids"]
        rows.append((p["input_ids"], r))
    for _ in range(40):  # a few seconds: readable plans, not good ones
        for pi, ri in rows[:8]:
            loss = model(input_ids=torch.tensor([pi + ri]), labels=torch.tensor([[-100] * len(pi) + ri])).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
    model.save_pretrained(path)
    return eps, cfg, path


def run(episodes: int = 24, n: int = 4, m: int = 2, max_new_tokens: int = 160, threads: int = 1) -> list[dict]:
    import torch

    from embodied_rft.evaluate import EpisodeLimits, run_lockstep
    from embodied_rft.generation import GenerationConfig, make_generator
    from embodied_rft.vegas.bon_config import BonConfig
    from embodied_rft.vegas.score import Verifier
    from embodied_rft.vegas.select import BonPolicy

    torch.set_num_threads(threads)
    rows, rates = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        eps, prompt_cfg, path = _setup(episodes, Path(tmp) / "tiny")
        gcfg = GenerationConfig(backend="fast", max_new_tokens=max_new_tokens, batch_size=episodes, device="cpu")
        gen = make_generator(path, gcfg)
        verifier = Verifier(gen.model, gen.tokenizer, max_new_tokens=48, batch_size=episodes, device="cpu")
        cfg = BonConfig(n=n, m=m, coverage_k=(1,), generation=gcfg)
        limits = EpisodeLimits(max_env_steps=30, max_invalid_actions=4, max_planner_calls=8)
        for sel in SELECTORS:
            pol = BonPolicy(sel, gen, cfg, verifier=verifier if sel == "bon_ft" else None)
            t = time.perf_counter()
            recs = list(run_lockstep(eps, pol, prompt_cfg, limits))
            dt = time.perf_counter() - t
            stats = [pol.pop_stats(r["episode_id"]) for r in recs]
            calls = sum(r["planner_calls"] for r in recs)
            model_calls = sum(s["policy_samples"] + s["verifications"] for s in stats)
            rates[sel] = calls / dt
            rows.append(
                {
                    "bench": "bon",
                    "case": f"{sel} planner call (N={n}, M={m})" if sel.startswith("bon_ft") else f"{sel} planner call",
                    "value": rates[sel],
                    "unit": "planner calls/s",
                    "ratio": rates["greedy"] / rates[sel],
                    "vs": "greedy's cost (x)",
                    "note": f"{model_calls / calls:.1f} model calls/call, {calls} calls",
                }
            )
        rows.append(_p_yes_row(verifier, eps, prompt_cfg))
    return rows


def _p_yes_row(verifier, eps, prompt_cfg) -> dict:
    """P(yes)'s read of the verdict token (``Verifier.verdict_logprobs_batch``) on verification prompts of the
    episodes' first states, every action of the expert plan a candidate: ``batch_size`` prefixes per padded forward
    against one forward per prefix (what scoring did before), the same prefixes, one after the other."""
    from embodied_rft.vegas.text import VERDICT_KEY, verification_messages
    from embodied_rft.world import Simulator

    prefixes = []
    for ep in eps:
        sim = Simulator.from_episode(ep)
        for a in ep["expert_plan"]:
            msgs = verification_messages(ep["instruction"], [], sim.observe_text(), "brief", sim.actions.id(a), a)
            head = verifier.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            prefixes.append(head + f"{VERDICT_KEY}:")
    t = time.perf_counter()
    verifier.verdict_logprobs_batch(prefixes)
    batched = len(prefixes) / (time.perf_counter() - t)
    t = time.perf_counter()
    for pre in prefixes:
        verifier.verdict_logprobs_batch([pre])
    single = len(prefixes) / (time.perf_counter() - t)
    return {
        "bench": "bon",
        "case": f"P(yes) read, {verifier.batch_size} per forward",
        "value": batched,
        "unit": "prompts/s",
        "ratio": batched / single,
        "vs": "one forward per prompt (x)",
        "note": f"{len(prefixes)} prompts; one per forward {single:.0f}/s",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--n", type=int, default=4, help="candidates per planner call")
    ap.add_argument("--m", type=int, default=2, help="verifications per distinct first action")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    a = ap.parse_args()
    rows = run(a.episodes, a.n, a.m, a.max_new_tokens, a.threads)
    print(f"{'case':<36} {'value':>9} {'unit':<16} {'ratio':>6}  note")
    for r in rows:
        print(f"{r['case']:<36} {r['value']:>9.2f} {r['unit']:<16} {r['ratio']:>6.2f}  {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
