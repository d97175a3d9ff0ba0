"""A CPU STAND-IN for ``openrlhf.cli.train_ppo_ray``, run as the trainer of a real Ray job in the tests
(``grpo.openrlhf.trainer=tests.helpers.openrlhf_standin``). It is NOT OpenRLHF's trainer, which cannot run here: it
needs vLLM engines for every rollout, GPU placement groups, CUDA and flash-attn (docs/facts.md §5.6).

What it does to our files is what the real trainer does to them, with OpenRLHF's own code wherever that runs on a
CPU:

* parses its argv with the installed OpenRLHF's parser and post-parse checks (:mod:`.openrlhf_harness`);
* opens every path it was given, from the job's working directory: the policy (our loader), the prompt file through
  OpenRLHF's ``blending_datasets`` and ``PromptDataset`` (its chat template), each image the prompts name, the
  reward file through OpenRLHF's own loader (``SingleTurnAgentExecutor``), the checkpoint folders;
* trains with the local GRPO engine for a few updates (``EMBODIED_RFT_STANDIN_UPDATES``, default 2; at most 48
  new tokens): every sampled response goes through ``SingleTurnAgentExecutor.execute`` with an engine that returns
  the sampled tokens, so OpenRLHF calls our reward file on the decoded query, as in a vLLM engine actor (and the
  reward file appends its records for the stage);
* logs every global step (one rollout batch) through OpenRLHF's own logger as its PPO trainer does,
  ``✨ Global step N: {…}``, with OpenRLHF's key names for the engine's values where the two mean the same
  (``policy_loss``, ``actor_lr``, ``reward``, ``score``, ``response_length``, the reward terms, and
  ``dynamic_filtering_pass_rate`` computed as OpenRLHF computes it, samples kept / prompts consumed × 100);
* saves the trained model to ``--ckpt.output_dir`` as OpenRLHF's ``save_model`` does (``save_pretrained`` of the
  model and tokenizer: ``config.json``, ``model.safetensors``, ``generation_config.json``, tokenizer files).

``EMBODIED_RFT_STANDIN_FAIL=1`` makes it crash after training with a half-written output folder (no weights), for
the failing-job tests; ``EMBODIED_RFT_STANDIN_SLEEP=S`` makes it wait S seconds before training (a job to stop).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


def _scorer(executor, prompts: list[str], images: list, tok, max_len: int):
    """The engine's ``reward`` hook: each response scored by OpenRLHF's executor calling our reward file."""
    from embodied_rft.reward import RewardBreakdown

    eos = tok.eos_token or ""

    class _Engine:  # what a vLLM engine returns to the executor: the sampled tokens
        def __init__(self, ids: list[int]) -> None:
            self.ids = ids

        async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
            out = SimpleNamespace(token_ids=self.ids, text="", finish_reason="stop", logprobs=None)
            return SimpleNamespace(outputs=[out])

    class Scorer:
        def score(self, response, label, sample=None):
            i = int(sample["sample_id"].removeprefix("p"))
            ids = tok(str(response) + eos, add_special_tokens=False)["input_ids"]
            params = SimpleNamespace(max_tokens=len(ids), logprobs=None)
            out = asyncio.run(executor.execute(prompts[i], label, params, max_len, tok, _Engine(ids), images[i]))
            ex = {k: float(v) for k, v in (out.get("extra_logs") or {}).items()}
            total, score = float(out["reward"] or 0.0), float(out["scores"] or 0.0)
            return RewardBreakdown(
                ex.get("structure", 0.0),
                ex.get("valid", 0.0),
                ex.get("match", 0.0),
                ex.get("accuracy", 0.0),
                total,
                score,
            )

    return lambda engine: Scorer()


def _steps(history: list[dict], group_size: int) -> list[tuple[int, dict]]:
    """The engine's per-update rows → one OpenRLHF status dict per global step (rollout batch)."""
    out: list[tuple[int, dict]] = []
    seen_before = 0
    by_buffer: dict[int, list[dict]] = {}
    for row in history:
        by_buffer.setdefault(int(row["buffer"]), []).append(row)
    for step, rows in sorted(by_buffer.items()):
        last = rows[-1]
        consumed = int(last["filter_seen"]) - seen_before
        seen_before = int(last["filter_seen"])
        status = {
            "policy_loss": sum(r["policy_loss"] for r in rows) / len(rows),
            "actor_lr": last["lr"],
            "actor_grad_norm": sum(r["grad_norm"] for r in rows) / len(rows),
            "reward": last["reward_mean"],
            "score": last["accuracy_full_rate"],
            "response_length": last["response_length"],
            "truncated": last["truncated_rate"],
            **{k: last[f"reward_{k}"] for k in ("structure", "valid", "match", "accuracy")},
            "accuracy_full": last["accuracy_full_rate"],
            "rollout/reward_mean": last["buffer_reward_mean"],
            "rollout/num_samples": float(last["buffer_groups"] * group_size),
            "dynamic_filtering_pass_rate": last["buffer_groups"] * group_size / max(consumed, 1) * 100,
        }
        out.append((step, status))
    return out


def main(argv: list[str]) -> int:
    from openrlhf.datasets.prompts_dataset import PromptDataset
    from openrlhf.datasets.utils import blending_datasets
    from openrlhf.utils.agent import SingleTurnAgentExecutor
    from openrlhf.utils.logging_utils import init_logger
    from PIL import Image

    from embodied_rft.filtering import FilterConfig
    from embodied_rft.models import load_model
    from embodied_rft.train.grpo.config import GRPOConfig
    from embodied_rft.train.grpo.driver import run_grpo_local
    from tests.helpers.openrlhf_harness import parse_train_ppo_ray

    logger = init_logger("openrlhf.trainer.ppo_trainer")
    args = parse_train_ppo_ray(argv)
    print(f"stand-in trainer (not OpenRLHF's): cwd {os.getcwd()}", flush=True)
    time.sleep(float(os.environ.get("EMBODIED_RFT_STANDIN_SLEEP", "0")))
    # every path, from here
    _, tok = load_model(args.actor.model_name_or_path)
    strategy = SimpleNamespace(args=args, is_rank_0=lambda: True, print=lambda *a: None)
    data = blending_datasets(
        args.data.prompt_dataset,
        None,
        strategy,
        args.train.seed,
        max_count=args.data.max_samples,
        dataset_split="train",
    )
    ds = PromptDataset(data, tok, strategy, input_template=args.data.input_template)
    items = [ds[i] for i in range(len(ds))]
    images = [it[3] for it in items]
    for imgs in images:
        for path in imgs or ():
            Image.open(path).verify()
    executor = SingleTurnAgentExecutor(remote_rm_url=args.reward.remote_url)
    assert executor.reward_func is not None, f"no reward_func loaded from {args.reward.remote_url}"
    for folder in (args.ckpt.output_dir, args.ckpt.path):
        Path(folder).mkdir(parents=True, exist_ok=True)

    # a few real updates of the local engine on these prompts, rewarded through OpenRLHF's executor
    g = args.rollout.n_samples_per_prompt
    lo, hi = args.algo.dynamic_filtering_range
    new_tokens = min(args.rollout.max_new_tokens, 48)
    samples = []
    for i, rec in enumerate(data):
        # the engine reads a sample's history only to name the kind of state it logs; the prompt is already built
        s = {"sample_id": f"p{i}", "prompt": rec["prompt"], "label": rec["label"], "history": []}
        if rec.get("images"):
            s["image"] = rec["images"][0]
        samples.append(s)
    cfg = GRPOConfig(
        group_size=g,
        temperature=args.rollout.temperature,
        top_p=args.rollout.top_p,
        max_new_tokens=new_tokens,
        max_prompt_tokens=max(8, args.data.max_len - args.rollout.max_new_tokens),
        rollout_batch_size=min(args.rollout.batch_size, len(samples)),
        lr=args.actor.adam.lr,
        lr_scheduler="constant_with_warmup",
        warmup_ratio=0.0,
        kl_coef=args.algo.kl.init_coef,
        filter=FilterConfig(
            enabled=bool(args.algo.dynamic_filtering_enable),
            lower=max(0, round(lo * g + 0.5)),
            upper=min(g, round(hi * g - 0.5)),
            buffer_size=min(args.rollout.batch_size, len(samples)),
            updates_per_buffer=1,
            drop_zero_variance=False,  # OpenRLHF trains on equal-reward groups (zero advantage)
            on_stall="flush",
        ),
        train_batch_size=0,
        max_updates=int(os.environ.get("EMBODIED_RFT_STANDIN_UPDATES", "2")),
        num_episodes=50,
        save_every=0,
        report_to=(),
        eval_max_samples=0,
        seed=args.train.seed,
        num_threads=1,
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train = work / "samples.jsonl"
        train.write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
        hooks = {"reward": _scorer(executor, [it[1] for it in items], images, tok, args.data.max_len)}
        m = run_grpo_local(
            cfg, args.actor.model_name_or_path, train, train, work / "model", work / "m.json", work / "p.csv", work / "w",
            hooks=hooks,
        )  # fmt: skip
        for step, status in _steps(m["history"], g):
            logger.info(f"✨ Global step {step}: {status}")
        out = Path(args.ckpt.output_dir)
        if os.environ.get("EMBODIED_RFT_STANDIN_FAIL") == "1":
            (out / "config.json").write_text((work / "model" / "config.json").read_text())
            raise RuntimeError("stand-in trainer: failing on purpose (EMBODIED_RFT_STANDIN_FAIL=1) mid-save")
        model, tok2 = load_model(work / "model", for_training=False)
        model.save_pretrained(out)
        tok2.save_pretrained(out)
    print(f"stand-in trainer: {m['updates']} updates; model saved to {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
