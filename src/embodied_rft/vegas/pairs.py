"""The verifier's within-context pairwise objective (``verifier.objective: pairwise``): preference pairs from the
verification records, and a reward model trained on them with TRL's ``RewardTrainer``.

Why: the generative verifier is trained pointwise (one record per candidate, the loss on its verdict), so it can
lower its loss by fitting what a prompt context says about its candidates' odds (late, replanning calls are mostly
wrong) without comparing the candidates of one context; Best-of-N only ever compares the candidates of one planner
call. Here each training example is two candidates of the *same* context, one oracle-correct and one not, and the
loss (Bradley-Terry: -log sigmoid(r_chosen - r_rejected)) rewards ranking the correct one higher; a shared context
cannot move it.

Input: the verification records the SFT objective would train on (``data/verify/train.jsonl``, or with
``verifier.policy_data`` the ``train_with_policy.jsonl`` that ``vegas/verifier.py`` writes; docs/vegas.md §4).
Output:

- :func:`build_pairs` / :func:`write_pairs`: records grouped by their prompt context (:func:`context_key`: the
  episode, the record's ``step`` — the planner call for on-policy records — and the user message's text before
  ``Candidate reasoning:``: the task, the history and the observation exactly as the verifier reads them), and per
  group every (``verdict: yes``, ``verdict: no``) combination, capped at ``max_pairs_per_context`` by a draw seeded
  with ``seed`` and the group (adding records elsewhere does not change a group's draw). Groups holding one label
  only give no pair. Each pair is TRL's conversational preference format with an *implicit* prompt: ``chosen`` and
  ``rejected`` are whole conversations, ``[user: the verification prompt of that candidate]``. The candidate sits
  inside the user message (``vegas/text.py`` :func:`~.text.verification_messages`, the prompt Best-of-N scores), so
  no message list is shared by both sides and TRL's explicit ``prompt`` column (prepended to both as messages) does
  not fit without changing the prompt layout. ``chat_template_kwargs: {"add_generation_prompt": true}`` (a column
  TRL reads per example) ends both with the assistant header: the reward is read at the position where the
  generative verifier starts its answer, and :class:`~.score.RewardVerifier` tokenises prompts the same way.
- :func:`train_pairwise`: ``AutoModelForSequenceClassification`` (``num_labels=1``, the scalar head seeded with
  ``sft.seed``) from the init checkpoint, trained by ``trl.RewardTrainer`` with the ``verifier.sft`` settings that
  apply (lr, epochs / max_steps, batch size, accumulation, warm-up, schedule, weight decay, clipping, max_len — pairs
  longer are dropped by TRL and counted —, seed, bf16, threads, device, checkpoints every ``save_steps``, sealed and
  resumed from after a kill as the SFT objective's are, ``train/sft/resume.py``), saved atomically with its
  tokenizer and a model card into ``out_dir``, whose ``config.json`` then names ``...ForSequenceClassification``
  (how ``Verifier.load`` tells the two objectives apart). One process (no ``accelerate launch``); no LoRA; text
  checkpoints only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..config import ConfigError, as_dict
from ..core.atomic import atomic_directory, atomic_open
from ..core.integrity import seal_folder
from ..data.jsonl import DataError, iter_jsonl
from .score import REWARD_TEMPLATE_KWARGS
from .templates import PROMPT_FIELDS
from .verifier_config import VerifierConfig

log = logging.getLogger(__name__)

_CUT = "\n" + PROMPT_FIELDS[0]


def context_key(rec: dict, where: str = "record") -> tuple[str, str, str]:
    """(episode id, step, the prompt's context text): the user message up to ``Candidate reasoning:``. A record whose
    first message is not a user turn holding that field is a DataError naming ``where``."""
    msgs = rec.get("messages")
    first = msgs[0] if isinstance(msgs, list) and msgs and isinstance(msgs[0], dict) else {}
    text = first.get("content")
    at = text.find(_CUT) if first.get("role") == "user" and isinstance(text, str) else -1
    if at < 0:
        raise DataError(
            f"{where}: field 'messages' must open with the verification prompt (a user turn holding "
            f"{PROMPT_FIELDS[0].strip()!r})"
        )
    return str(rec.get("episode_id")), str(rec.get("step")), text[:at]


def _group_id(key: tuple[str, str, str]) -> str:
    return f"{key[0]}:{key[1]}:{hashlib.sha1(key[2].encode()).hexdigest()[:12]}"


def build_pairs(
    records: Iterable[tuple[str, dict]], max_pairs_per_context: int = 0, seed: int = 0
) -> tuple[list[dict], dict[str, int]]:
    """Pairs of ``records`` (``(where, record)``: ``where`` names it in errors) and their counts (module docstring).
    Pairs come group by group in the order the groups first appear, within a group in (correct, wrong) record order."""
    groups: dict[tuple[str, str, str], tuple[list[dict], list[dict]]] = {}
    n = 0
    for where, rec in records:
        if rec.get("verdict") not in ("yes", "no"):
            raise DataError(f"{where}: field 'verdict' must be yes or no (a verification record)")
        yes, no = groups.setdefault(context_key(rec, where), ([], []))
        (yes if rec["verdict"] == "yes" else no).append(rec)
        n += 1
    pairs: list[dict] = []
    mixed = possible = used = 0
    for key, (yes, no) in groups.items():
        if not yes or not no:
            continue
        mixed += 1
        combos = [(i, j) for i in range(len(yes)) for j in range(len(no))]
        possible += len(combos)
        gid = _group_id(key)
        if max_pairs_per_context and len(combos) > max_pairs_per_context:
            combos = sorted(random.Random(f"{seed}:{gid}").sample(combos, max_pairs_per_context))
        used += len({("y", i) for i, _ in combos} | {("n", j) for _, j in combos})
        for i, j in combos:
            pairs.append(
                {
                    "chosen": [yes[i]["messages"][0]],
                    "rejected": [no[j]["messages"][0]],
                    "chat_template_kwargs": dict(REWARD_TEMPLATE_KWARGS),
                    "group": gid,
                    "chosen_id": yes[i].get("record_id"),
                    "rejected_id": no[j].get("record_id"),
                }
            )
    counts = {
        "records": n,
        "groups": len(groups),
        "groups_with_both_labels": mixed,
        "pairs_possible": possible,
        "pairs": len(pairs),
        "records_in_pairs": used,
    }
    return pairs, counts


def write_pairs(src: str | Path, dst: str | Path, max_pairs_per_context: int = 0, seed: int = 0) -> dict[str, int]:
    """The pairs of the records in ``src`` written to ``dst`` (jsonl, atomically); their counts."""
    src = Path(src)
    pairs, counts = build_pairs(((f"{src}:{n}", rec) for n, rec in iter_jsonl(src)), max_pairs_per_context, seed)
    with atomic_open(dst) as fh:
        for p in pairs:
            fh.write(json.dumps(p, ensure_ascii=False, separators=(",", ":")) + "\n")
    return counts


def _training_args(cfg: VerifierConfig, work_dir: Path) -> Any:
    from trl import RewardConfig

    from ..train.sft.trainer import trainer_args

    s = cfg.sft
    return RewardConfig(
        **trainer_args(s, work_dir, f"verifier-pairwise-{work_dir.parent.name}"),
        center_rewards_coefficient=cfg.pairwise.center_rewards or None,
    )


def load_reward_init(init_dir: str | Path, seed: int) -> tuple[Any, Any]:
    """``(AutoModelForSequenceClassification with num_labels=1, tokenizer)`` from a causal-LM (or reward) checkpoint
    folder: the backbone's weights, a fresh scalar head drawn after seeding with ``seed``, float32; the pad token set
    in the model config (the model reads the reward at each row's last non-pad token)."""
    from transformers import AutoModelForSequenceClassification, set_seed
    from trl.trainer.reward_trainer import suppress_seqcls_warning

    from ..models import check_checkpoint, is_vision_checkpoint
    from ..models.factory import load_tokenizer

    init_dir = Path(init_dir)
    check_checkpoint(init_dir)
    if is_vision_checkpoint(init_dir):
        raise ConfigError(f"verifier.objective: pairwise trains text checkpoints only; {init_dir} is vision-language")
    tok = load_tokenizer(init_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    set_seed(seed)
    with suppress_seqcls_warning():  # the new head and the causal LM's own (absent here) are expected
        model = AutoModelForSequenceClassification.from_pretrained(init_dir, num_labels=1, dtype="float32")
    model.config.pad_token_id = tok.pad_token_id
    return model, tok


def train_pairwise(
    cfg: VerifierConfig,
    init_dir: str | Path,
    pairs_path: str | Path,
    out_dir: str | Path,
    plots_path: str | Path,
    work_dir: str | Path,
) -> dict[str, Any]:
    """Train the reward verifier from ``init_dir`` on the pairs in ``pairs_path`` into ``out_dir`` (module
    docstring); checkpoints in ``work_dir`` (removed after success unless ``sft.keep_checkpoints``). Returns the
    training metrics."""
    import torch
    from datasets import Dataset
    from trl import RewardTrainer

    from ..models.factory import CARD
    from ..train.sft.callbacks import SealCheckpoints, Throughput
    from ..train.sft.resume import prepare_work_dir, run_fingerprint
    from ..train.sft.trainer import _finish_wandb, _loss_rows, _write_plot

    s = cfg.sft
    init_dir, pairs_path, out_dir, work_dir = Path(init_dir), Path(pairs_path), Path(out_dir), Path(work_dir)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("verifier.objective: pairwise trains in one process; run the stage without accelerate launch")
    if s.num_threads:
        torch.set_num_threads(s.num_threads)
    rows = [
        {"chosen": p["chosen"], "rejected": p["rejected"], "chat_template_kwargs": p["chat_template_kwargs"]}
        for _, p in iter_jsonl(pairs_path)
    ]
    if not rows:
        raise DataError(
            f"{pairs_path}: no pairs: no prompt context of the training records holds both a correct and a wrong "
            "candidate (verifier.objective=pairwise needs such contexts: on-policy records, verifier.policy_data)"
        )
    args = _training_args(cfg, work_dir)
    fingerprint = {
        **run_fingerprint(s, init_dir, pairs_path),
        "objective": "pairwise",
        "pairwise": as_dict(cfg.pairwise),
    }
    ckpt = prepare_work_dir(work_dir, fingerprint, s.resume)
    model, tok = load_reward_init(init_dir, s.seed)
    throughput = Throughput()
    trainer = RewardTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[throughput, SealCheckpoints()],
    )
    kept = len(trainer.train_dataset)
    if kept == 0:
        raise ConfigError(
            f"verifier.sft.max_len: at {s.max_len} tokens every one of the {len(rows)} pairs of {pairs_path} has a "
            "side longer (TRL drops such pairs); raise it"
        )
    if kept < len(rows):
        log.warning(
            "verifier.sft.max_len=%d drops %d of %d pairs (a side is longer)", s.max_len, len(rows) - kept, len(rows)
        )
    log.info(
        "pairwise verifier: %d pairs, %.2fM parameters%s",
        kept,
        sum(p.numel() for p in trainer.model.parameters()) / 1e6,
        f", resuming from {ckpt.name}" if ckpt else "",
    )
    result = trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    _finish_wandb(s)
    with atomic_directory(out_dir) as tmp:
        trainer.save_model(str(tmp))
        tok.save_pretrained(tmp)
        card = json.loads((init_dir / CARD).read_text()) if (init_dir / CARD).is_file() else {}
        card.update(
            {
                "source": f"pairwise reward training (TRL RewardTrainer) of {init_dir}",
                "verifier": {"objective": "pairwise", "pairwise": as_dict(cfg.pairwise), "sft": as_dict(s)},
            }
        )
        (tmp / CARD).write_text(json.dumps(card, indent=2) + "\n")
        seal_folder(tmp)  # checksums.sha256, the last file: the loader verifies it
    state = trainer.state
    loss_rows = _loss_rows(state.log_history)
    last = next((e for e in reversed(state.log_history) if "accuracy" in e), {})
    _write_plot(Path(plots_path), loss_rows)
    metrics = {
        "pairs": len(rows),
        "pairs_trained": kept,
        "pairs_over_max_len": len(rows) - kept,
        "steps": int(state.global_step),
        "epochs": float(state.epoch or 0.0),
        "resumed_from_step": int(ckpt.name.split("-")[1]) if ckpt else 0,
        "first_loss": loss_rows[0]["loss"] if loss_rows else None,
        "final_loss": loss_rows[-1]["loss"] if loss_rows else None,
        "train_loss": float(result.training_loss),
        # the last logged window's share of pairs ranked right and mean reward margin (TRL's train metrics)
        "final_accuracy": last.get("accuracy"),
        "final_margin": last.get("margin"),
        "tokens": int(state.num_input_tokens_seen or 0),
        "train_time_s": round(throughput.seconds, 3),
        "tokens_per_s": round(throughput.tokens / throughput.seconds, 1) if throughput.seconds > 0 else None,
        "config": as_dict(s),
    }
    del trainer
    if not s.keep_checkpoints:
        shutil.rmtree(work_dir, ignore_errors=True)
    log.info(
        "pairwise verifier: %d steps, loss %.4f -> %.4f, pair accuracy %s; model in %s",
        metrics["steps"],
        metrics["first_loss"] or float("nan"),
        metrics["final_loss"] or float("nan"),
        metrics["final_accuracy"],
        out_dir,
    )
    return metrics


def pair_records(records: Sequence[dict]) -> list[tuple[str, dict]]:
    """``records`` as :func:`build_pairs` reads them (named by their ``record_id``)."""
    return [(str(r.get("record_id", i)), r) for i, r in enumerate(records)]


__all__ = [
    "build_pairs",
    "context_key",
    "load_reward_init",
    "pair_records",
    "train_pairwise",
    "write_pairs",
]
