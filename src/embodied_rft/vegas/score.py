"""Scoring with a verifier: sampled verdicts (Best-of-N's score) and P(yes) (the verifier's AUROC).

Input: a loaded causal LM and its tokenizer (the trained verifier, the SFT policy prompted as verifier, or
SmolLM2-135M-Instruct), and verification prompts (``vegas/text.py`` :func:`verification_messages`). Output:

- :meth:`Verifier.verdicts`: ``m`` sampled verifications per prompt at temperature T through the ``fast``
  generation backend (``hf`` for models it does not run, e.g. vision-language ones), each parsed to ``yes`` / ``no`` / None (:func:`~.text.parse_verdict`);
- :meth:`Verifier.p_yes`: a deterministic score in [0, 1]: the verifier writes its chain of thought greedily,
  then the verdict is read from the verdict token's distribution after ``action_is_correct:``:
  P(yes) = p(yes) / (p(yes) + p(no)), p of the first token where the two answers differ. Where the greedy text
  has no verdict line, the line is appended and read the same way, so a zero-shot model that never writes one
  still gets a score. The reads of one call are batched (:meth:`Verifier.verdict_logprobs_batch`: left-padded, equal
  to one forward per prompt up to float rounding).

A verifier trained with ``verifier.objective: pairwise`` (``vegas/pairs.py``) is a reward model, not a language
model: a checkpoint whose ``config.json`` names a ``...ForSequenceClassification`` architecture.
:meth:`Verifier.load` returns a :class:`RewardVerifier` for it, with the same two methods: :meth:`RewardVerifier.p_yes`
gives (sigmoid(reward), ``yes`` iff reward > 0, ``""``: it writes no text) and :meth:`RewardVerifier.verdicts` ``m``
copies of that verdict (a reward model has nothing to sample: the temperature and seed change nothing).

Also :func:`auroc` (Mann-Whitney, ties count half) and :func:`balanced_accuracy`, the verifier's metrics.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..generation.config import GenerationConfig
from .text import VERDICT_KEY, parse_verdict

_MARK = f"{VERDICT_KEY}:"
# how a reward verifier's prompts are rendered, in training (``vegas/pairs.py``: TRL's per-example
# ``chat_template_kwargs``) and in scoring (:class:`RewardVerifier`): the reward is read after the assistant header
REWARD_TEMPLATE_KWARGS = {"add_generation_prompt": True}


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve of ``scores`` for positives ``labels`` (None without both classes)."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return None
    ranked = sorted((s, i) for i, s in enumerate(pos + neg))
    ranks = [0.0] * len(ranked)
    i = 0
    while i < len(ranked):  # average ranks over ties
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[ranked[k][1]] = (i + j) / 2 + 1
        i = j + 1
    r_pos = sum(ranks[: len(pos)])
    return (r_pos - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))


def balanced_accuracy(predicted: Sequence[bool], labels: Sequence[bool]) -> float | None:
    """Mean of the true-positive and true-negative rates (None without both classes)."""
    tp = sum(p and y for p, y in zip(predicted, labels, strict=True))
    tn = sum((not p) and (not y) for p, y in zip(predicted, labels, strict=True))
    n_pos = sum(labels)
    n_neg = len(labels) - n_pos
    if not n_pos or not n_neg:
        return None
    return (tp / n_pos + tn / n_neg) / 2


class Verifier:
    """A loaded model used as verifier (see the module docstring)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        backend: str = "fast",
        max_new_tokens: int = 128,
        batch_size: int = 32,
        device: str = "auto",
    ) -> None:
        from ..generation.base import backend_class

        if backend not in ("fast", "hf"):
            raise ValueError(f"a verifier runs on the fast or hf backend (it reads its own logits), not {backend!r}")
        cfg = GenerationConfig(backend=backend, max_new_tokens=max_new_tokens, batch_size=batch_size, device=device)
        self.gen = backend_class(backend)(model, tokenizer, cfg)
        self.tok = self.gen.tokenizer
        self.model = self.gen.model
        self.batch_size = batch_size
        self.calls = 0  # verifications generated (sampled or greedy): the cost columns
        # the templated prompt's tokens of each prompt of the last verdicts / p_yes call, in order (the cost columns)
        self.last_prompt_tokens: list[int] = []

    @classmethod
    def load(cls, source: Any, **kw: Any) -> Verifier:
        """A verifier from a checkpoint folder or a :class:`~embodied_rft.models.ModelConfig` (SmolLM2's GGUF); a
        :class:`RewardVerifier` for a reward-model folder (:func:`is_reward_checkpoint`)."""
        from ..models import load_model

        if is_reward_checkpoint(source):
            return RewardVerifier.load(source, **kw)

        model, tok = load_model(source, for_training=False)
        return cls(model, tok, **kw)

    def verdicts(
        self, prompts: Sequence[list[dict]], m: int, temperature: float, seed: int = 0
    ) -> list[list[str | None]]:
        """``m`` sampled verdicts per prompt (None: no verdict line in that verification)."""
        if not prompts:
            self.last_prompt_tokens = []
            return []
        outs = self.gen.complete(list(prompts), n=m, temperature=temperature, seed=seed)
        self.calls += m * len(prompts)
        self.last_prompt_tokens = [cs[0].prompt_tokens for cs in outs]
        return [[parse_verdict(c.text) for c in cs] for cs in outs]

    def p_yes(self, prompts: Sequence[list[dict]]) -> list[tuple[float, str | None, str]]:
        """(P(yes), the greedy verdict or None, the greedy text) per prompt (module docstring)."""
        if not prompts:
            self.last_prompt_tokens = []
            return []
        outs = self.gen.complete(list(prompts), n=1, temperature=0.0)
        self.calls += len(prompts)
        self.last_prompt_tokens = [cs[0].prompt_tokens for cs in outs]
        texts, prefixes = [], []
        for msgs, cs in zip(prompts, outs, strict=True):
            text = cs[0].text
            head = self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            at = text.rfind(_MARK)
            body = text[: at + len(_MARK)] if at >= 0 else text.rstrip() + f"\n{_MARK}"
            texts.append(text)
            prefixes.append(head + body)
        out = []
        for text, (lp_yes, lp_no) in zip(texts, self.verdict_logprobs_batch(prefixes), strict=True):
            top = max(lp_yes, lp_no)
            p = math.exp(lp_yes - top) / (math.exp(lp_yes - top) + math.exp(lp_no - top))
            out.append((p, parse_verdict(text), text))
        return out

    def verdict_logprobs(self, prefix: str) -> tuple[float, float]:
        """The log-probabilities of the verdict token after ``prefix`` (text ending in ``action_is_correct:``): of
        the first token where ``prefix + " yes"`` and ``prefix + " no"`` tokenise differently."""
        return self.verdict_logprobs_batch([prefix])[0]

    def verdict_logprobs_batch(self, prefixes: Sequence[str]) -> list[tuple[float, float]]:
        """:meth:`verdict_logprobs` of each prefix, ``batch_size`` prefixes per forward: sorted by length, padded on
        the left with an attention mask and positions counted from each row's first token, the logits at the last
        position only (a full-vocabulary distribution at every position would take gigabytes for a 50k-token
        vocabulary). Equal to one forward per prefix up to float rounding (tested)."""
        import torch

        from ..core.padding import left_pad, positions

        rows = []
        for prefix in prefixes:
            yes = self.tok(prefix + " yes", add_special_tokens=False)["input_ids"]
            no = self.tok(prefix + " no", add_special_tokens=False)["input_ids"]
            c = 0
            while c < min(len(yes), len(no)) and yes[c] == no[c]:
                c += 1
            if c == 0 or c >= min(len(yes), len(no)):
                raise ValueError(f"the tokenizer does not tell ' yes' from ' no' after {prefix[-40:]!r}")
            rows.append((yes[:c], yes[c], no[c]))
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        dev = self.model.device
        out: list[tuple[float, float]] = [(0.0, 0.0)] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            ids, mask = left_pad([rows[i][0] for i in idx], pad)
            pos = positions(mask)
            with torch.inference_mode():
                logits = (
                    self.model(
                        input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), logits_to_keep=1
                    )
                    .logits[:, -1]
                    .float()
                )
            logp = torch.log_softmax(logits, dim=-1)
            for r, i in enumerate(idx):
                out[i] = (float(logp[r, rows[i][1]]), float(logp[r, rows[i][2]]))
        return out


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def is_reward_checkpoint(source: Any) -> bool:
    """Whether ``source`` is a checkpoint folder holding a sequence-classification model (a reward verifier)."""
    if not isinstance(source, (str, Path)):
        return False
    cfg = Path(source) / "config.json"
    if not cfg.is_file():
        return False
    try:
        archs = json.loads(cfg.read_text("utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return False  # the causal-LM loader names the damaged file
    return any(str(a).endswith("ForSequenceClassification") for a in archs)


class RewardVerifier(Verifier):
    """A reward model used as verifier (``verifier.objective: pairwise``): one forward per prompt, the reward read at
    the prompt's last token. Prompts are tokenised as ``trl.RewardTrainer`` tokenised the pairs it was trained on
    (the chat template with ``add_generation_prompt``, ``vegas/pairs.py``), padded on the right as TRL's collator
    pads them, ``batch_size`` per forward (sorted by length); the model reads each row's last non-pad token, so a
    batch equals one forward per prompt up to float rounding (tested). ``backend`` and ``max_new_tokens`` are
    accepted for :meth:`Verifier.load`'s callers and not used; ``calls`` counts forwards (one per prompt)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        backend: str = "fast",
        max_new_tokens: int = 128,
        batch_size: int = 32,
        device: str = "auto",
    ) -> None:
        import torch

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu" and next(model.parameters()).dtype in (torch.float16, torch.bfloat16):
            model = model.float()
        self.gen = None
        self.tok = tokenizer
        self.model = model.to(device).eval()
        self.batch_size = batch_size
        self.calls = 0
        self.last_prompt_tokens: list[int] = []
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = self.model.config.pad_token_id
        if pad is None:
            raise ValueError("a reward verifier needs a pad token (its model reads the reward at the last non-pad one)")
        self.pad_id = pad
        self.model.config.pad_token_id = pad

    @classmethod
    def load(cls, source: Any, **kw: Any) -> RewardVerifier:
        """A reward verifier from a checkpoint folder (checked whole first, as every checkpoint the project loads)."""
        from transformers import AutoModelForSequenceClassification

        from ..models import check_checkpoint
        from ..models.factory import load_tokenizer

        path = Path(source)
        check_checkpoint(path)
        model = AutoModelForSequenceClassification.from_pretrained(path, dtype="auto")
        return cls(model, load_tokenizer(path), **kw)

    def prompt_ids(self, prompt: list[dict]) -> list[int]:
        """The token ids the reward is read from: ``prompt`` rendered as the RewardTrainer rendered its pairs."""
        kw = REWARD_TEMPLATE_KWARGS
        return list(self.tok.apply_chat_template(prompt, tokenize=True, return_dict=True, **kw)["input_ids"])

    def rewards(self, prompts: Sequence[list[dict]]) -> list[float]:
        """The reward of each prompt (see the class docstring)."""
        import torch

        rows = [self.prompt_ids(p) for p in prompts]
        self.last_prompt_tokens = [len(r) for r in rows]
        out = [0.0] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        dev = self.model.device
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            width = max(len(rows[i]) for i in idx)
            ids = torch.full((len(idx), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for r, i in enumerate(idx):
                ids[r, : len(rows[i])] = torch.tensor(rows[i], dtype=torch.long)
                mask[r, : len(rows[i])] = 1
            with torch.inference_mode():
                logits = self.model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits[:, 0].float()
            for r, i in enumerate(idx):
                out[i] = float(logits[r])
        self.calls += len(rows)
        return out

    def p_yes(self, prompts: Sequence[list[dict]]) -> list[tuple[float, str | None, str]]:
        """(sigmoid(reward), ``yes`` if reward > 0 else ``no``, ``""``) per prompt."""
        if not prompts:
            self.last_prompt_tokens = []
            return []
        return [(_sigmoid(r), "yes" if r > 0 else "no", "") for r in self.rewards(prompts)]

    def verdicts(
        self, prompts: Sequence[list[dict]], m: int, temperature: float, seed: int = 0
    ) -> list[list[str | None]]:
        """``m`` copies of each prompt's verdict (:meth:`p_yes`): a reward model samples nothing, so ``temperature``
        and ``seed`` change nothing and the mean of the ``m`` draws is 0 or 1."""
        return [[v] * m for _, v, _ in self.p_yes(prompts)]

    def verdict_logprobs_batch(self, prefixes: Sequence[str]) -> list[tuple[float, float]]:
        raise TypeError("a reward verifier has no verdict token to read: use p_yes")


__all__ = ["REWARD_TEMPLATE_KWARGS", "RewardVerifier", "Verifier", "auroc", "balanced_accuracy", "is_reward_checkpoint"]
