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

Also :func:`auroc` (Mann-Whitney, ties count half) and :func:`balanced_accuracy`, the verifier's metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..generation.config import GenerationConfig
from .text import VERDICT_KEY, parse_verdict

_MARK = f"{VERDICT_KEY}:"


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

    @classmethod
    def load(cls, source: Any, **kw: Any) -> Verifier:
        """A verifier from a checkpoint folder or a :class:`~embodied_rft.models.ModelConfig` (SmolLM2's GGUF)."""
        from ..models import load_model

        model, tok = load_model(source, for_training=False)
        return cls(model, tok, **kw)

    def verdicts(
        self, prompts: Sequence[list[dict]], m: int, temperature: float, seed: int = 0
    ) -> list[list[str | None]]:
        """``m`` sampled verdicts per prompt (None: no verdict line in that verification)."""
        if not prompts:
            return []
        outs = self.gen.complete(list(prompts), n=m, temperature=temperature, seed=seed)
        self.calls += m * len(prompts)
        return [[parse_verdict(c.text) for c in cs] for cs in outs]

    def p_yes(self, prompts: Sequence[list[dict]]) -> list[tuple[float, str | None, str]]:
        """(P(yes), the greedy verdict or None, the greedy text) per prompt (module docstring)."""
        if not prompts:
            return []
        outs = self.gen.complete(list(prompts), n=1, temperature=0.0)
        self.calls += len(prompts)
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


__all__ = ["Verifier", "auroc", "balanced_accuracy"]
