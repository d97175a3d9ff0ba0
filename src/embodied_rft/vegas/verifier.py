"""The ``verifier`` stage's library entry: train the generative verifier with the project's SFT, then score it.

Inputs: a :class:`~.config.VerifierConfig`; the checkpoint it starts from (:func:`init_checkpoint`;
``verifier.init``: ``random`` = ``models/base``, the policy's base — for the tiny policy random weights with its
tokenizer, the paper's "same base model as the policy"; ``sft`` = ``models/sft``; ``pretrained`` = ``verifier.model``,
a pretrained model converted into the work folder, whatever the policy is); the verification records (``data/verify/{train,val}.jsonl``,
written by ``synth``; their ``messages`` are SFT chat records). Outputs, written atomically: ``out_dir``
(``models/verifier``), ``metrics_path`` (``metrics/verifier.json`` + details: the SFT run and the held-out
scores), ``plots_path`` (the loss curve).

Training is :func:`embodied_rft.train.sft.trainer.run_sft` unchanged: TRL's ``SFTTrainer`` with the loss on the
assistant turn only (the chain of thought and the verdict; with ``verifier.target: verdict`` the verdict line alone),
resumable from its checkpoints. Held-out metrics on the validation records (episodes never trained on): balanced
accuracy of the greedy verdict (none written counts as ``no``), AUROC of P(yes) from the verdict token's
probabilities (``vegas/score.py``), and the share of verifications that end with a verdict line.

With ``verifier.objective: pairwise`` the same training records are turned into (correct, wrong) candidate pairs of
one prompt context (``work_dir/pairs.jsonl``) and a reward model is trained on them with TRL's ``RewardTrainer``
instead (``vegas/pairs.py``; ``verifier.target`` is not read); the held-out metrics are the same, with P(yes) =
sigmoid(reward) and the verdict ``yes`` iff the reward is positive (``score.RewardVerifier``), and
``metrics_path`` adds the pair counts.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import as_dict
from ..core.atomic import atomic_open
from ..core.metrics import write_metrics
from ..data.jsonl import DataError, iter_jsonl
from ..train.sft.trainer import run_sft
from .pairs import train_pairwise, write_pairs
from .score import RewardVerifier, Verifier, auroc, balanced_accuracy
from .text import parse_verdict, with_verdict
from .verifier_config import VerifierConfig

log = logging.getLogger(__name__)

VERIFIER_HEADLINE = {
    "init": True,
    # verifier.objective=pairwise only (absent from the SFT objective's metrics)
    "objective": True,
    "records": True,
    "pairs": {"groups": True, "groups_with_both_labels": True, "pairs": True},
    "steps": True,
    "final_loss": True,
    "heldout": {"balanced_accuracy": True, "auroc": True, "verdict_rate": True},
}


@dataclass(frozen=True)
class PolicySource:
    """Where ``verifier.policy_data`` finds the policy it plays: its checkpoint, the episode file, the prompt config
    (a :class:`~embodied_rft.data.prompt.PromptConfig`); and ``synth.find_sentence``, ``synth.verdict`` and
    ``synth.reasoning``, so that the on-policy records' chains of thought (and the contrast records' candidate
    reasoning) are worded as the synthesised ones."""

    model_dir: str | Path
    episodes_path: str | Path
    prompt_cfg: Any
    find_sentence: str = "exec"
    verdict: str = "last"
    reasoning: str = "full"


def read_records(path: str | Path, limit: int = 0, seed: int = 0) -> list[dict]:
    """Verification records of ``path`` (a seeded subsample of ``limit`` when given; 0 = all)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: verification records not found (run the `synth` stage: dvc repro synth)")
    recs = []
    for n, rec in iter_jsonl(path):
        if rec.get("verdict") not in ("yes", "no") or not isinstance(rec.get("messages"), list):
            raise DataError(f"{path}:{n}: field 'verdict' must be yes or no and 'messages' a list (a synth record)")
        recs.append(rec)
    if limit and len(recs) > limit:
        keep = sorted(random.Random(seed).sample(range(len(recs)), limit))
        recs = [recs[i] for i in keep]
    return recs


def verdict_only(src: str | Path, dst: str | Path) -> int:
    """Copy the records of ``src`` to ``dst`` (atomically) with each assistant turn cut to its verdict line
    (``verifier.target: verdict``); the number of records. A record whose assistant turn states no verdict, or one
    other than its ``verdict`` field, is a DataError naming it."""
    src = Path(src)
    n = 0
    with atomic_open(dst) as fh:
        for line_no, rec in iter_jsonl(src):
            msgs = rec.get("messages")
            last = msgs[-1] if isinstance(msgs, list) and msgs else {}
            verdict = parse_verdict(last.get("content"))
            if last.get("role") != "assistant" or verdict is None or verdict != rec.get("verdict"):
                raise DataError(
                    f"{src}:{line_no}: field 'messages' must end with an assistant turn holding one verdict line, "
                    f"the record's 'verdict' ({rec.get('verdict')!r})"
                )
            rec["messages"] = [*msgs[:-1], {**last, "content": with_verdict("", verdict)}]
            fh.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
            n += 1
    return n


def heldout_scores(verifier: Verifier, records: Sequence[dict]) -> dict[str, Any]:
    """Balanced accuracy, AUROC and verdict rate of ``verifier`` on ``records`` (module docstring)."""
    if not records:
        return {"records": 0, "balanced_accuracy": None, "auroc": None, "verdict_rate": None}
    prompts = [r["messages"][:-1] for r in records]
    labels = [r["verdict"] == "yes" for r in records]
    scored = []
    for i in range(0, len(prompts), verifier.batch_size):
        scored.extend(verifier.p_yes(prompts[i : i + verifier.batch_size]))
    a = auroc([p for p, _, _ in scored], labels)
    ba = balanced_accuracy([v == "yes" for _, v, _ in scored], labels)
    by_mode: dict[str, list[bool]] = {}
    for r, (_, v, _) in zip(records, scored, strict=True):
        by_mode.setdefault(r.get("mode") or "expert", []).append((v == "yes") == (r["verdict"] == "yes"))
    return {
        "records": len(records),
        "positives": sum(labels),
        "balanced_accuracy": None if ba is None else round(ba, 4),
        "auroc": None if a is None else round(a, 4),
        "verdict_rate": round(sum(v is not None for _, v, _ in scored) / len(scored), 4),
        "accuracy_by_mode": {k: round(sum(v) / len(v), 4) for k, v in sorted(by_mode.items())},
        "example": {"prompt": prompts[0][-1]["content"][-300:], "verification": scored[0][2]},
    }


def init_checkpoint(cfg: VerifierConfig, base_model: str | Path, sft_model: str | Path, work_dir: str | Path) -> Path:
    """The checkpoint ``verifier.init`` names: ``base_model`` (random), ``sft_model`` (sft), or ``cfg.model`` converted
    into ``work_dir/pretrained_base`` (pretrained; rewritten atomically on each run, as the base stage writes a
    policy's base)."""
    if cfg.init == "random":
        return Path(base_model)
    if cfg.init == "sft":
        return Path(sft_model)
    from ..models import build_base_model

    return build_base_model(cfg.model, (), Path(work_dir) / "pretrained_base")


def run_verifier(
    cfg: VerifierConfig,
    init_dir: str | Path,
    data_dir: str | Path,
    out_dir: str | Path,
    metrics_path: str | Path,
    plots_path: str | Path,
    work_dir: str | Path,
    *,
    policy: PolicySource | None = None,
) -> dict[str, Any]:
    """Train the verifier from ``init_dir`` on ``data_dir/train.jsonl`` (plus, with ``verifier.policy_data``, the
    policy's own oracle-labelled candidates: ``policy`` says where the policy, its episodes and prompt config are)
    into ``out_dir``; score it on ``val.jsonl``."""
    data_dir, work_dir = Path(data_dir), Path(work_dir)
    train = data_dir / "train.jsonl"
    val_path = data_dir / "val.jsonl"
    val = read_records(val_path, cfg.eval_max_records, cfg.sft.seed) if val_path.is_file() else []
    n_train = len(read_records(train))
    policy_counts: dict[str, Any] = {"episodes": 0}
    if cfg.policy_data.episodes:
        if policy is None:
            raise ValueError("verifier.policy_data.episodes > 0 needs the policy's checkpoint and episodes")
        from .policy_data import policy_records

        held_out = {r["episode_id"] for r in read_records(val_path)} if val_path.is_file() else set()
        extra, policy_counts = policy_records(
            cfg.policy_data,
            policy.model_dir,
            policy.episodes_path,
            held_out,
            policy.prompt_cfg,
            work_dir / "policy",
            find_sentence=policy.find_sentence,
            verdict=policy.verdict,
            reasoning=policy.reasoning,
        )
        mixed = work_dir / "train_with_policy.jsonl"
        with atomic_open(mixed) as fh:
            fh.write(train.read_text())
            for r in extra:
                fh.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
        train, n_train = mixed, n_train + len(extra)
        log.info("verifier: %d on-policy records added (%s)", len(extra), policy_counts)
    if cfg.objective == "pairwise":
        return _run_pairwise(
            cfg, init_dir, train, n_train, val, policy_counts, out_dir, metrics_path, plots_path, work_dir
        )
    if cfg.target == "verdict":
        cut = work_dir / "train_verdict.jsonl"
        verdict_only(train, cut)
        train = cut

    def hook(model: Any, tok: Any) -> dict:
        v = Verifier(model, tok, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.eval_batch_size)
        return heldout_scores(v, val)

    sft = run_sft(
        cfg.sft,
        init_dir,
        train,
        out_dir,
        work_dir / "sft_metrics.json",
        plots_path,
        work_dir=work_dir / "checkpoints",
        val_hook=hook,
    )
    held = sft.pop("hook", {})
    metrics = {
        "init": cfg.init,
        "init_dir": str(init_dir),
        "records": {"train": n_train, "val": len(val)},
        "policy_data": policy_counts,
        "steps": sft.get("steps"),
        "first_loss": sft.get("first_loss"),
        "final_loss": sft.get("final_loss"),
        "tokens_per_s": sft.get("tokens_per_s"),
        "heldout": held,
        "sft": sft,
        "config": as_dict(cfg),
    }
    write_metrics(metrics_path, metrics, VERIFIER_HEADLINE)
    log.info(
        "verifier (%s init): %s steps, held-out balanced accuracy %s, AUROC %s",
        cfg.init,
        metrics["steps"],
        held.get("balanced_accuracy"),
        held.get("auroc"),
    )
    return metrics


def _run_pairwise(
    cfg: VerifierConfig,
    init_dir: str | Path,
    train: Path,
    n_train: int,
    val: Sequence[dict],
    policy_counts: dict[str, Any],
    out_dir: str | Path,
    metrics_path: str | Path,
    plots_path: str | Path,
    work_dir: Path,
) -> dict[str, Any]:
    """``verifier.objective: pairwise``: the pairs of ``train`` (``work_dir/pairs.jsonl``), a reward model trained on
    them (``vegas/pairs.py``), scored on ``val`` as the generative verifier is (P(yes) = sigmoid(reward))."""
    pairs_path = work_dir / "pairs.jsonl"
    counts = write_pairs(train, pairs_path, cfg.pairwise.max_pairs_per_context, cfg.pairwise.seed)
    log.info("verifier (pairwise): %s", counts)
    tr = train_pairwise(cfg, init_dir, pairs_path, out_dir, plots_path, work_dir / "checkpoints_pairwise")
    held = heldout_scores(RewardVerifier.load(out_dir, batch_size=cfg.eval_batch_size), val)
    metrics = {
        "init": cfg.init,
        "init_dir": str(init_dir),
        "objective": cfg.objective,
        "records": {"train": n_train, "val": len(val)},
        "policy_data": policy_counts,
        "pairs": {**counts, "trained": tr["pairs_trained"]},
        "steps": tr.get("steps"),
        "first_loss": tr.get("first_loss"),
        "final_loss": tr.get("final_loss"),
        "tokens_per_s": tr.get("tokens_per_s"),
        "heldout": held,
        "pairwise": tr,
        "config": as_dict(cfg),
    }
    write_metrics(metrics_path, metrics, VERIFIER_HEADLINE)
    log.info(
        "verifier (%s init, pairwise): %s steps on %d pairs, held-out balanced accuracy %s, AUROC %s",
        cfg.init,
        metrics["steps"],
        tr["pairs_trained"],
        held.get("balanced_accuracy"),
        held.get("auroc"),
    )
    return metrics


__all__ = [
    "VERIFIER_HEADLINE",
    "PolicySource",
    "heldout_scores",
    "init_checkpoint",
    "read_records",
    "run_verifier",
    "verdict_only",
]
