"""Rollouts of the local GRPO engine: prompts in, G sampled responses (as token ids) and their log-probs out.

Inputs: decomposed samples (``prompt`` chat messages, ``label``, optional ``image`` path relative to the
samples file), a policy (``transformers`` causal LM, or a vision-language model with its processor).
Outputs: :class:`EncodedPrompt` (templated prompt token ids, pixel inputs for a VLM) and, per prompt, G
response token-id lists — the exact tokens sampled, so the trainer scores and differentiates what the
policy produced (decoded text is not re-tokenised; BPE round trips are not exact).

Sampling (:func:`sample_groups`): with ``grpo.sampler`` fast (Qwen2/Llama text models) the project's sampler
(``generation.sampler``) prefills each prompt once for its G samples and returns each sampled token's log-prob;
otherwise (:func:`sample_responses`) the P prompts of a call are left-padded into one batch, each repeated G
times, and decoded by ``model.generate`` with its KV cache, multinomial sampling at the configured temperature
and top-p (top-k off). Both are seeded per call so a resumed run samples what the killed one would have.
Repeating the rows ourselves (instead of ``num_return_sequences``) keeps multimodal inputs aligned for any VLM.

Training batches use one layout: prompts left-padded to a common length, responses right-padded after it,
so all response tokens start at the same column and only the response logits are computed
(``logits_to_keep``). Text models get position ids from the attention mask, as ``generate`` used;
VLMs (Qwen2-VL's M-RoPE) compute their own from the image grid.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from embodied_rft.core.padding import left_pad, positions
from embodied_rft.core.vision import is_vision_model
from embodied_rft.generation.base import content_parts, text_only
from embodied_rft.generation.decoder import decoder_for
from embodied_rft.generation.sampler import FastSampler
from embodied_rft.train.grpo.loss import token_entropy, token_logprobs

log = logging.getLogger(__name__)


def is_processor(obj: Any) -> bool:
    """A multimodal processor carries an image processor and wraps a tokenizer."""
    return hasattr(obj, "image_processor") and hasattr(obj, "tokenizer")


@dataclass
class EncodedPrompt:
    """One templated, tokenised prompt, ready to be sampled from or trained on."""

    index: int  # position of the sample in the prompt list
    ids: list[int]  # prompt token ids (after left truncation)
    label: str  # the sample's label (reward input)
    mm: dict[str, torch.Tensor] | None = None  # pixel inputs of a VLM prompt (batched by concatenation)
    truncated: bool = False  # the prompt was longer than max_prompt_tokens and was cut from the left
    # per-token processor outputs aligned with ``ids`` (Qwen2.5-VL's mm_token_type_ids: 1 on image tokens);
    # padded like the ids, 0 on padding and on response tokens
    token_mm: dict[str, list[int]] | None = None


class PolicyIO:
    """Templating, tokenising and decoding for one policy's tokenizer or processor."""

    def __init__(self, tokenizer_or_processor: Any, max_prompt_tokens: int, image_root: str | Path | None = None):
        self.processor = tokenizer_or_processor if is_processor(tokenizer_or_processor) else None
        self.tokenizer = self.processor.tokenizer if self.processor is not None else tokenizer_or_processor
        self.max_prompt_tokens = max_prompt_tokens
        self.image_root = Path(image_root) if image_root is not None else None
        tok = self.tokenizer
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        self.pad_id = int(tok.pad_token_id)
        self.eos_ids = self._eos_ids()
        if not self.eos_ids:
            raise ValueError(
                "the tokenizer names no end-of-sequence token (eos_token or <|im_end|>): rollouts would never stop"
            )

    def _eos_ids(self) -> list[int]:
        tok = self.tokenizer
        ids = set()
        if tok.eos_token_id is not None:
            ids.add(int(tok.eos_token_id))
        # ChatML ends an assistant turn with <|im_end|>; a tokenizer whose eos is <|endoftext|> must stop there too.
        im_end = tok.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tok.get_vocab() else None
        if im_end is not None:
            ids.add(int(im_end))
        return sorted(ids)

    def add_model_eos(self, model: Any) -> None:
        """Also stop on the model's own generation_config eos ids."""
        v = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        extra = [v] if isinstance(v, int) else list(v or [])
        self.eos_ids = sorted(set(self.eos_ids) | {int(x) for x in extra})

    @property
    def is_vision(self) -> bool:
        return self.processor is not None

    def _image(self, sample: dict, where: str) -> Any:
        from PIL import Image

        rel = sample.get("image")
        if not rel:
            raise ValueError(f"{where}: the policy is a vision model but the sample has no 'image'")
        path = Path(rel) if self.image_root is None or Path(rel).is_absolute() else self.image_root / rel
        with Image.open(path) as im:
            return im.convert("RGB")

    def encode(self, sample: dict, index: int) -> EncodedPrompt:
        """Template and tokenise ``sample['prompt']`` (+ its image for a VLM)."""
        where = f"sample {sample.get('sample_id', index)}"
        messages = sample["prompt"]
        if self.processor is not None:
            msgs, images = content_parts(messages, [self._image(sample, where)])
            text = self.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            enc = self.processor(text=[text], images=images, return_tensors="pt")
            ids = enc["input_ids"][0].tolist()
            mm, token_mm = {}, {}
            for k, v in enc.items():
                if k in ("input_ids", "attention_mask") or not isinstance(v, torch.Tensor):
                    continue
                if v.dim() == 2 and tuple(v.shape) == (1, len(ids)):
                    token_mm[k] = v[0].tolist()
                else:
                    mm[k] = v
            if len(ids) > self.max_prompt_tokens:
                # cutting would separate image tokens from their pixels (OpenRLHF refuses the same)
                raise ValueError(
                    f"{where}: VLM prompt of {len(ids)} tokens exceeds max_prompt_tokens={self.max_prompt_tokens}"
                )
            return EncodedPrompt(index, ids, sample["label"], mm, False, token_mm or None)
        text = self.tokenizer.apply_chat_template(text_only(messages), add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        truncated = len(ids) > self.max_prompt_tokens
        if truncated:
            ids = ids[-self.max_prompt_tokens :]
        return EncodedPrompt(index, list(ids), sample["label"], None, truncated)

    def response_ids(self, sample: dict, answer: str) -> list[int]:
        """The token ids of ``answer`` as the policy's assistant turn after ``sample['prompt']``, end token included:
        the chat template's text of prompt + answer, less its text of the prompt with the generation prompt, cut
        after the first end token — what SFT trained the policy to write (a constructed response, ``grpo.anchors``)."""
        messages = text_only(sample["prompt"])
        tmpl = (self.processor or self.tokenizer).apply_chat_template
        head = tmpl(messages, add_generation_prompt=True, tokenize=False)
        full = tmpl([*messages, {"role": "assistant", "content": answer}], tokenize=False)
        if not full.startswith(head):
            raise ValueError(
                f"sample {sample.get('sample_id')}: the chat template does not write an assistant turn after the "
                "generation prompt; constructed responses (grpo.anchors) cannot be tokenised as the policy writes them"
            )
        ids = self.tokenizer(full[len(head) :], add_special_tokens=False)["input_ids"]
        eos = set(self.eos_ids)
        for j, t in enumerate(ids):
            if t in eos:
                return list(ids[: j + 1])
        raise ValueError(f"sample {sample.get('sample_id')}: the assistant turn has no end token ({sorted(eos)})")

    def decode(self, ids: Sequence[int]) -> str:
        """Response text for the reward: up to (not including) the first end token, special tokens dropped."""
        eos = set(self.eos_ids)
        body = list(ids)
        for j, t in enumerate(body):
            if t in eos:
                body = body[:j]
                break
        return self.tokenizer.decode(body, skip_special_tokens=True)


def _cat_mm(mms: Sequence[dict[str, torch.Tensor] | None], device: torch.device | str) -> dict[str, torch.Tensor]:
    present = [m for m in mms if m]
    if not present:
        return {}
    return {k: torch.cat([m[k] for m in present], dim=0).to(device) for k in present[0]}


def _token_mm(prompts: Sequence[EncodedPrompt], tail: int = 0) -> dict[str, torch.Tensor]:
    """Per-token processor outputs, left-padded like the prompt ids, plus ``tail`` zeros (response)."""
    keys = {k for p in prompts for k in (p.token_mm or {})}
    out = {}
    for k in keys:
        rows = [(p.token_mm or {}).get(k, [0] * len(p.ids)) for p in prompts]
        padded, _ = left_pad(rows, 0)
        out[k] = torch.cat([padded, torch.zeros((len(rows), tail), dtype=torch.long)], dim=1) if tail else padded
    return out


def make_sampler(model: Any, name: str, max_rows: int | None = None) -> FastSampler | None:
    """The fast sampler for ``model`` (``grpo.sampler``: fast, or auto and the model qualifies), else None
    (= ``generate``); ``fast`` on a model the sampler cannot run (a VLM, another family) is an error naming
    the key."""
    lm = decoder_for(model, name, key="grpo.sampler", on="fast", off="hf")
    return FastSampler(lm, max_rows=max_rows) if lm is not None else None


@dataclass
class Rollout:
    """G sampled responses per prompt (token ids, end token included) and, from the fast sampler, the
    log-prob of every sampled token at the rollout temperature (π_old, no second pass needed)."""

    responses: list[list[list[int]]]
    logprobs: list[list[torch.Tensor]] | None = None
    row_steps: int = 0  # rows decoded summed over steps (fast sampler; 0 for generate)


def sample_groups(
    model: Any,
    io: PolicyIO,
    prompts: Sequence[EncodedPrompt],
    group_size: int,
    *,
    sampler: FastSampler | None,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
    device: torch.device | str = "cpu",
) -> Rollout:
    """G responses per prompt with ``sampler`` (each prompt prefilled once; log-probs returned) or, when it
    is None, with ``model.generate`` (:func:`sample_responses`)."""
    if sampler is not None and any(p.mm for p in prompts):
        raise ValueError("the fast sampler is for text models; prompts with pixel inputs need grpo.sampler=hf")
    if sampler is None:
        return Rollout(
            sample_responses(
                model,
                io,
                prompts,
                group_size,
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                seed=seed,
                device=device,
            )
        )
    out = sampler.sample(
        [p.ids for p in prompts],
        group_size,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        eos_ids=io.eos_ids,
        seed=seed,
    )
    return Rollout(out.tokens, out.logprobs, out.row_steps)


@torch.inference_mode()
def sample_responses(
    model: Any,
    io: PolicyIO,
    prompts: Sequence[EncodedPrompt],
    group_size: int,
    *,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
    device: torch.device | str = "cpu",
) -> list[list[list[int]]]:
    """G sampled responses per prompt, as token ids (the end token included when one was generated).

    ``temperature == 0`` decodes greedily (held-out evaluation)."""
    from transformers import GenerationConfig

    expanded = [p for p in prompts for _ in range(group_size)]
    ids, mask = left_pad([p.ids for p in expanded], io.pad_id)
    mm = _cat_mm([p.mm for p in expanded], device)
    mm.update({k: v.to(device) for k, v in _token_mm(expanded).items()})
    greedy = temperature == 0.0
    gen_cfg = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=not greedy,
        temperature=None if greedy else temperature,
        top_p=None if greedy else top_p,
        top_k=None if greedy else 0,  # 0, not None: None would be filled with transformers' default of 50
        pad_token_id=io.pad_id,
        eos_token_id=io.eos_ids,
        use_cache=True,
    )
    was_training = model.training
    model.eval()
    if not greedy:  # greedy decoding draws nothing: leave the global RNG alone
        torch.manual_seed(seed)
    out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=gen_cfg, **mm)
    if was_training:
        model.train()
    new = out[:, ids.shape[1] :].tolist()
    eos = set(io.eos_ids)
    responses: list[list[list[int]]] = []
    for p in range(len(prompts)):
        group = []
        for g in range(group_size):
            toks = new[p * group_size + g]
            stop = next((j for j, t in enumerate(toks) if t in eos), None)
            group.append(toks if stop is None else toks[: stop + 1])
        responses.append(group)
    return responses


@dataclass
class SeqBatch:
    """Prompt+response rows in the training layout (see module docstring)."""

    inputs: dict[str, torch.Tensor]  # model inputs (input_ids, attention_mask, position_ids?, pixel inputs)
    targets: torch.Tensor  # [B, R] response token ids (pad beyond each response)
    mask: torch.Tensor  # [B, R] 1 on response tokens
    n_keep: int  # logits to keep: R + 1 (the last prompt position predicts the first response token)


def build_batch(
    rows: Sequence[tuple[EncodedPrompt, Sequence[int]]], io: PolicyIO, device: torch.device | str, vision: bool
) -> SeqBatch:
    p_ids, p_mask = left_pad([p.ids for p, _ in rows], io.pad_id)
    r_len = max(1, max(len(r) for _, r in rows))
    targets = torch.full((len(rows), r_len), io.pad_id, dtype=torch.long)
    r_mask = torch.zeros((len(rows), r_len), dtype=torch.long)
    for i, (_, r) in enumerate(rows):
        if r:
            targets[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
            r_mask[i, : len(r)] = 1
    input_ids = torch.cat([p_ids, targets], dim=1).to(device)
    attn = torch.cat([p_mask, r_mask], dim=1).to(device)
    inputs = {"input_ids": input_ids, "attention_mask": attn}
    if not vision:
        inputs["position_ids"] = positions(attn)
    inputs.update(_cat_mm([p.mm for p, _ in rows], device))
    inputs.update({k: v.to(device) for k, v in _token_mm([p for p, _ in rows], r_len).items()})
    return SeqBatch(inputs, targets.to(device), r_mask.to(device), r_len + 1)


def _accepts_logits_to_keep(model: Any) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def response_logits(model: Any, batch: SeqBatch) -> torch.Tensor:
    """Logits [B, R, V] that predict each response token (position t−1 predicts token t)."""
    kwargs = dict(batch.inputs)
    if _accepts_logits_to_keep(model):
        kwargs["logits_to_keep"] = batch.n_keep
    logits = model(**kwargs, use_cache=False).logits
    return logits[:, -batch.n_keep : -1, :]


def batch_logprobs(
    model: Any, batch: SeqBatch, temperature: float, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log π of the response tokens [B, R] (and, optionally, the entropy at each, detached)."""
    logits = response_logits(model, batch)
    logp = token_logprobs(logits, batch.targets, temperature)
    ent = None
    if with_entropy:
        with torch.no_grad():
            ent = token_entropy(logits.detach(), temperature)
    return logp, ent


@torch.inference_mode()
def sequence_logprobs(
    model: Any,
    rows: Sequence[tuple[EncodedPrompt, Sequence[int]]],
    io: PolicyIO,
    temperature: float,
    micro_batch_size: int,
    device: torch.device | str,
) -> list[torch.Tensor]:
    """log π of each row's response tokens (1-D CPU tensors), in micro-batches, without gradients."""
    was_training = model.training
    model.eval()
    vision = is_vision_model(model)
    out: list[torch.Tensor] = []
    for s in range(0, len(rows), micro_batch_size):
        chunk = rows[s : s + micro_batch_size]
        batch = build_batch(chunk, io, device, vision)
        logp, _ = batch_logprobs(model, batch, temperature)
        for i, (_, r) in enumerate(chunk):
            out.append(logp[i, : len(r)].float().cpu())
    if was_training:
        model.train()
    return out


__all__ = [
    "EncodedPrompt",
    "PolicyIO",
    "Rollout",
    "SeqBatch",
    "batch_logprobs",
    "build_batch",
    "is_processor",
    "response_logits",
    "make_sampler",
    "sample_groups",
    "sample_responses",
    "sequence_logprobs",
]
