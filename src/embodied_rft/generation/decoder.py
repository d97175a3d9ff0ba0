"""A functional forward pass over a transformers Qwen2 / Llama causal LM's own parameters.

Input: a loaded ``Qwen2ForCausalLM`` or ``LlamaForCausalLM`` (the tiny default and SmolLM2). Output:
:class:`DecoderLM`, which runs the same network as the transformers module — the same parameter tensors
(read at call time, so an optimiser step is seen at once, with nothing to copy), the model's own rotary
embedding module, RMSNorm computed as transformers computes it — in the two shapes the CPU engine needs and
``model.forward`` does not offer:

* :meth:`DecoderLM.prefill` / :meth:`DecoderLM.decode_step`: each prompt prefilled once and its keys/values
  kept once (:class:`PromptKV`), read once per step for all of its samples; the generated tokens' keys/values
  in a preallocated cache written in place (:class:`GenCache`, one column per step), rows dropped from it when
  they finish. This is what :mod:`.sampler` drives.
* :meth:`DecoderLM.prompt_states` / :meth:`DecoderLM.response_logits`: the training forward of GRPO's update,
  with each distinct prompt computed once and every response attending to its prompt's keys and values
  (autograd flows through both; the update runs the prompts once for all of its micro-batches).

Which models: decoder-only text models whose layers are ``input_layernorm → self_attn(q,k,v,o) → residual →
post_attention_layernorm → mlp(gate, up, down; SiLU) → residual``, rotary positions from
``model.model.rotary_emb`` and no sliding window. :func:`supports` says whether a model qualifies;
everything else (vision-language models, other families) keeps the ``hf`` and ``vllm`` backends. The tests
hold every output against transformers (``tests/generation/test_fast_sampler.py``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from embodied_rft.generation.kvcache import GenCache, PromptKV, PromptStates, _grid_to_rows, _rows_to_grid

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")


def config_unsupported_reason(cfg: Any) -> str | None:
    """Why a model with this transformers config cannot run on :class:`DecoderLM` (None when it can)."""
    mt = getattr(cfg, "model_type", None)
    if mt not in SUPPORTED_MODEL_TYPES:
        return f"model_type {mt!r} is not one of {list(SUPPORTED_MODEL_TYPES)} (use the hf or vllm backend)"
    if getattr(cfg, "vision_config", None) is not None:
        return "vision-language models use the hf or vllm backend"
    if getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention is not implemented by the fast sampler"
    act = getattr(cfg, "hidden_act", "silu")
    if act != "silu":
        return f"hidden_act {act!r}: only SiLU (SwiGLU) MLPs are implemented"
    return None


def unsupported_reason(model: Any) -> str | None:
    """Why ``model`` cannot run on :class:`DecoderLM` (None when it can)."""
    why = config_unsupported_reason(getattr(model, "config", None))
    if why is not None:
        return why
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return "the model has no .model.layers / .model.rotary_emb"
    return None


def supports(model: Any) -> bool:
    return unsupported_reason(model) is None


def decoder_for(model: Any, mode: str, *, key: str, on: str, off: str) -> DecoderLM | None:
    """The config switch ``key`` between this module (``mode == on``) and transformers (``mode == off``):
    ``auto`` takes :class:`DecoderLM` where the model qualifies; ``on`` for a model that does not is an error
    naming the key. Returns the :class:`DecoderLM`, or None for the transformers path."""
    if mode not in ("auto", on, off):
        raise ValueError(f"{key}: unknown value {mode!r}; choose one of {['auto', on, off]}")
    if mode == off:
        return None
    why = unsupported_reason(model)
    if why is None:
        return DecoderLM(model)
    if mode == on:
        raise ValueError(f"{key}={on}: {why}; use {key}={off} (or auto)")
    return None


def _rms(x: torch.Tensor, norm: Any) -> torch.Tensor:
    # as Qwen2RMSNorm / LlamaRMSNorm: the variance in float32, the weight applied in the input dtype. In float32
    # torch's fused rms_norm computes the same expression bit for bit (tests/generation/test_fast_sampler.py) in one
    # kernel instead of six
    if x.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


def _rope_swapped(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """:func:`_rope` with the sign of ``rotate_half`` folded into ``sin_signed`` = [−sin₁, sin₂]:
    ``x·cos + [x₂, x₁]·[−sin₁, sin₂]`` — the same products and sums, bit for bit, in four kernels instead of seven."""
    *lead, d = x.shape
    swapped = x.view(*lead, 2, d // 2).flip(-2).reshape(*lead, d)
    return (x * cos).add_(swapped.mul_(sin_signed))


class RopeTable:
    """The rotary cos and sign-folded sin of every position below ``size``, computed once by the model's own rotary
    module (each entry is an elementwise function of its position, so a table row equals what the module returns
    for that position alone); :meth:`DecoderLM.decode_step` indexes it instead of calling the module every step.
    Only for ``rope_type == "default"``-like modules without a length-dependent update (see :meth:`DecoderLM.rope_table`)."""

    def __init__(self, cos: torch.Tensor, sin: torch.Tensor) -> None:
        half = cos.shape[-1] // 2
        self.cos = cos
        self.sin_signed = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)

    @property
    def size(self) -> int:
        return self.cos.shape[0]


def length_buckets(lengths: list[int], max_buckets: int = 3, overhead: int = 48) -> list[list[int]]:
    """Indices of ``lengths`` split into at most ``max_buckets`` groups of similar length, minimising the padded
    tokens (each group padded to its longest) plus ``overhead`` tokens per group (a forward's fixed cost); one group
    when splitting saves less than that. Groups are ordered by length, indices within them too."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    ls = [lengths[i] for i in order]
    n = len(ls)
    best: dict[tuple[int, int], tuple[int, list[int]]] = {}

    def solve(start: int, k: int) -> tuple[int, list[int]]:
        # the cheapest split of ls[start:] into at most k groups: (cost, group end indices)
        if (start, k) in best:
            return best[(start, k)]
        whole = (n - start) * ls[-1] + overhead
        out: tuple[int, list[int]] = (whole, [n])
        if k > 1:
            for end in range(start + 1, n):
                head = (end - start) * ls[end - 1] + overhead
                rest, ends = solve(end, k - 1)
                if head + rest < out[0]:
                    out = (head + rest, [end, *ends])
        best[(start, k)] = out
        return out

    if n == 0:
        return []
    _, ends = solve(0, max(1, max_buckets))
    groups, start = [], 0
    for end in ends:
        groups.append(order[start:end])
        start = end
    return groups


def merge_prefills(
    groups: list[list[int]], parts: list[tuple[torch.Tensor, PromptKV, torch.Tensor]]
) -> tuple[torch.Tensor, PromptKV, torch.Tensor]:
    """One prefill result (logits, keys/values, lengths) in input order from ``parts``, the prefills of the prompts
    ``groups`` index (part j holds prompts ``groups[j]`` in that order)."""
    logits = torch.cat([p[0] for p in parts])
    kv = PromptKV.concat([p[1] for p in parts])
    lens = torch.cat([p[2] for p in parts])
    order = [i for g in groups for i in g]
    if order == list(range(len(order))):
        return logits, kv, lens
    inv = torch.tensor(order, device=logits.device).argsort()
    return logits[inv], PromptKV([t[inv] for t in kv.k_t], [t[inv] for t in kv.v], kv.bias[inv]), lens[inv]


class DecoderLM:
    """The functional view of one causal LM (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        why = unsupported_reason(model)
        if why is not None:
            raise ValueError(f"fast sampler: {why}")
        self.model = model
        cfg = model.config
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv = int(getattr(cfg, "num_key_value_heads", None) or self.n_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads)
        self.n_rep = self.n_heads // self.n_kv
        self.scale = self.head_dim**-0.5

    # ---- pieces ---------------------------------------------------------------------------------
    @property
    def _inner(self) -> Any:
        return self.model.model

    @property
    def layers(self) -> Any:
        return self._inner.layers

    @property
    def dtype(self) -> torch.dtype:
        return self._inner.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self._inner.embed_tokens.weight.device

    def _cos_sin(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # the model's own rotary module (any rope_type it was built with); [B, T, D] each
        return self._inner.rotary_emb(x, positions)

    def _qkv(self, layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Rotated queries [B, H, T, D] and keys [B, Hkv, T, D], and values [B, Hkv, T, D]."""
        at = layer.self_attn
        B, T, _ = h.shape
        q = F.linear(h, at.q_proj.weight, at.q_proj.bias).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = F.linear(h, at.k_proj.weight, at.k_proj.bias).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        v = F.linear(h, at.v_proj.weight, at.v_proj.bias).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = _rope(q, c, s), _rope(k, c, s)
        return q, k, v

    def _mlp(self, layer: Any, x: torch.Tensor) -> torch.Tensor:
        m = layer.mlp
        g = F.linear(x, m.gate_proj.weight, m.gate_proj.bias)
        u = F.linear(x, m.up_proj.weight, m.up_proj.bias)
        return F.linear(F.silu(g) * u, m.down_proj.weight, m.down_proj.bias)

    def _out(self, layer: Any, a: torch.Tensor) -> torch.Tensor:
        o = layer.self_attn.o_proj
        return F.linear(a, o.weight, o.bias)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Attention of q [B, H, Tq, D] over k/v [B, Hkv, Tk, D] with a boolean mask [B, 1, Tq, Tk] → [B, Tq, H·D]."""
        B, H, Tq, D = q.shape
        if self.n_rep > 1:
            k = k.repeat_interleave(self.n_rep, dim=1)
            v = v.repeat_interleave(self.n_rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        return a.transpose(1, 2).reshape(B, Tq, H * D)

    def norm_logits(self, h: torch.Tensor) -> torch.Tensor:
        h = _rms(h, self._inner.norm)
        head = self.model.lm_head
        return F.linear(h, head.weight, getattr(head, "bias", None))

    def _left_padded(self, prompts: list[list[int]]):
        """Prompts left-padded to the longest: ids [P, W], valid [P, W], lengths [P], rotary positions [P, W] and
        the causal attention mask [P, 1, W, W] (a padding query sees only itself: never used, softmax finite)."""
        dev = self.device
        P, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.zeros((P, width), dtype=torch.long)
        valid = torch.zeros((P, width), dtype=torch.bool)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            valid[i, width - len(p) :] = True
        ids, valid = ids.to(dev), valid.to(dev)
        lens = valid.sum(1)
        positions = (torch.arange(width, device=dev).unsqueeze(0) - (width - lens).unsqueeze(1)).clamp(min=0)
        causal = torch.ones((width, width), dtype=torch.bool, device=dev).tril()
        mask = (causal.unsqueeze(0) & valid.unsqueeze(1)) | torch.eye(width, dtype=torch.bool, device=dev).unsqueeze(0)
        return ids, valid, lens, positions, mask.unsqueeze(1)

    # ---- sampling: prefill + in-place decode -------------------------------------------------------
    def prefill(self, prompts: list[list[int]], max_buckets: int = 1) -> tuple[torch.Tensor, PromptKV, torch.Tensor]:
        """Run the prompts once; returns last-position logits [P, V], their keys/values (left-padded to the longest
        prompt) and each prompt's length [P].

        ``max_buckets > 1`` runs prompts of unequal lengths in up to that many length buckets
        (:func:`length_buckets`), so a short prompt is not padded to the longest one's width; the results come back
        in input order. The values are the same up to float rounding (the attention sums run over another width):
        greedy answers agree with one padded batch's (tested), sampled ones may differ in the last bits' draws."""
        groups = length_buckets([len(p) for p in prompts], max_buckets) if max_buckets > 1 else []
        if len(groups) <= 1:
            return self._prefill_padded(prompts)
        return merge_prefills(groups, [self._prefill_padded([prompts[i] for i in g]) for g in groups])

    def _prefill_padded(self, prompts: list[list[int]]) -> tuple[torch.Tensor, PromptKV, torch.Tensor]:
        """:meth:`prefill` of one batch, every prompt left-padded to the longest."""
        dev = self.device
        P = len(prompts)
        ids, valid, lens, positions, mask = self._left_padded(prompts)
        width = ids.shape[1]
        x = self._inner.embed_tokens(ids)
        cos, sin = self._cos_sin(x, positions)
        ks, vs = [], []
        for layer in self.layers:
            h = _rms(x, layer.input_layernorm)
            q, k, v = self._qkv(layer, h, cos, sin)
            ks.append(k.transpose(-1, -2).contiguous())
            vs.append(v.contiguous())
            x = x + self._out(layer, self._attend(q, k, v, mask))
            x = x + self._mlp(layer, _rms(x, layer.post_attention_layernorm))
        bias = torch.zeros((P, width), dtype=x.dtype, device=dev).masked_fill(~valid, float("-inf"))
        return self.norm_logits(x[:, -1]), PromptKV(ks, vs, bias), lens

    def prefill_extend(
        self,
        prefix_k: list[torch.Tensor],
        prefix_v: list[torch.Tensor],
        prefix_lens: torch.Tensor,
        suffixes: list[list[int]],
    ) -> tuple[torch.Tensor, PromptKV, torch.Tensor]:
        """:meth:`prefill` of prompts whose first tokens were prefilled before: only the ``suffixes`` run, attending
        to the prefixes' keys/values. ``prefix_k`` / ``prefix_v``: per layer ``[P, kv_heads, Lw, head_dim]`` with
        row i's ``prefix_lens[i] >= 1`` keys/values right-aligned (left-padded). Returns the whole prompts'
        last-position logits, keys/values (prefix then suffix, contiguous; shorter suffixes leave padding columns
        at the end, masked by the bias like any padding) and lengths, as :meth:`prefill` would up to float
        rounding."""
        dev = self.device
        P, Lw = len(suffixes), prefix_k[0].shape[2]
        S = max(len(t) for t in suffixes)
        ids = torch.zeros((P, S), dtype=torch.long)
        s_len = torch.tensor([len(t) for t in suffixes], dtype=torch.long)
        for i, t in enumerate(suffixes):
            ids[i, : len(t)] = torch.tensor(t, dtype=torch.long)
        ids, s_len, p_len = ids.to(dev), s_len.to(dev), prefix_lens.to(dev)
        cols = torch.arange(S, device=dev)
        s_valid = cols.unsqueeze(0) < s_len.unsqueeze(1)  # [P, S]; suffixes right-padded
        p_valid = torch.arange(Lw, device=dev).unsqueeze(0) >= (Lw - p_len).unsqueeze(1)  # [P, Lw]
        positions = p_len.unsqueeze(1) + cols.unsqueeze(0)
        causal = torch.ones((S, S), dtype=torch.bool, device=dev).tril()
        # a padding query sees the prefix and the real suffix: never used, softmax finite
        s_mask = causal.unsqueeze(0) & s_valid.unsqueeze(1)  # [P, S(query), S(key)]
        mask = torch.cat([p_valid.unsqueeze(1).expand(P, S, Lw), s_mask], dim=2).unsqueeze(1)
        x = self._inner.embed_tokens(ids)
        cos, sin = self._cos_sin(x, positions)
        ks, vs = [], []
        for li, layer in enumerate(self.layers):
            h = _rms(x, layer.input_layernorm)
            q, k, v = self._qkv(layer, h, cos, sin)
            k = torch.cat([prefix_k[li], k], dim=2)
            v = torch.cat([prefix_v[li], v], dim=2)
            ks.append(k.transpose(-1, -2).contiguous())
            vs.append(v.contiguous())
            x = x + self._out(layer, self._attend(q, k, v, mask))
            x = x + self._mlp(layer, _rms(x, layer.post_attention_layernorm))
        valid = torch.cat([p_valid, s_valid], dim=1)
        bias = torch.zeros(valid.shape, dtype=x.dtype, device=dev).masked_fill(~valid, float("-inf"))
        last = x[torch.arange(P, device=dev), s_len - 1]
        return self.norm_logits(last), PromptKV(ks, vs, bias), p_len + s_len

    def gen_cache(self, capacity: int, columns: int, reps: int, *, zeroed: bool = False) -> GenCache:
        """An empty cache (no live rows) for up to ``capacity`` rows of ``reps`` samples per prompt and ``columns``
        decode steps; rows come in with :meth:`GenCache.extend`. ``zeroed``: start from zeros instead of
        uninitialised memory — needed when rows are admitted later, because their masked columns are still
        multiplied (−inf + NaN would be NaN) — after that every column only ever holds finite keys/values."""
        shape = (capacity, 2, self.n_kv, columns, self.head_dim)
        dt, dev = self.dtype, self.device
        new = torch.zeros if zeroed else torch.empty
        empty = torch.zeros(0, dtype=torch.long, device=dev)
        return GenCache(
            [new(shape, dtype=dt, device=dev) for _ in self.layers],
            0,
            empty,
            reps,
            empty.clone(),
            capacity,
            columns,
        )

    def packed(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Per layer, the q/k/v projections as one weight (and bias): one matrix product per layer and step instead
        of three. A copy of the current weights: the sampler packs them again at every call."""
        out = []
        for layer in self.layers:
            at = layer.self_attn
            projs = (at.q_proj, at.k_proj, at.v_proj)
            w = torch.cat([m.weight for m in projs])
            has_bias = any(m.bias is not None for m in projs)
            b = (
                torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in projs])
                if has_bias
                else None
            )
            out.append((w, b))
        return out

    def rope_table(self, size: int) -> RopeTable | None:
        """The rotary table of positions ``[0, size)`` (None when the model's rotary module changes its frequencies
        with the sequence length — ``dynamic`` / ``longrope`` — and must be called per step)."""
        rot = self._inner.rotary_emb
        kind = str(getattr(rot, "rope_type", "default"))
        if "dynamic" in kind or kind == "longrope":
            return None
        x = torch.zeros((), dtype=self.dtype, device=self.device)
        cos, sin = self._cos_sin(x, torch.arange(size, device=self.device).unsqueeze(0))
        return RopeTable(cos[0], sin[0])

    def decode_step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        prompt: PromptKV,
        cache: GenCache,
        packed: list[tuple[torch.Tensor, torch.Tensor | None]] | None = None,
        rope: RopeTable | None = None,
    ) -> torch.Tensor:
        """One new token per live row ([B] ids at rotary positions [B]): its K/V written at column ``cache.length``
        in place; attention over the row's prompt (read once per prompt, on the grid) and its generated tokens.
        ``packed`` (:meth:`packed`, made once per call) saves two matrix products per layer; ``rope``
        (:meth:`rope_table`, made once per call) replaces the rotary module's per-step call by a lookup. Returns
        next-token logits [B, V]."""
        col = cache.length
        if col >= cache.columns:
            raise ValueError("KV cache is full")
        if tokens.shape[0] != cache.rows:
            raise ValueError(f"decode_step: {tokens.shape[0]} tokens for {cache.rows} live cache rows")
        packed = packed if packed is not None else self.packed()
        B, P, G, rep, D = tokens.shape[0], prompt.prompts, cache.reps, self.n_rep, self.head_dim
        H, Hkv, W = self.n_heads, self.n_kv, prompt.bias.shape[1]
        slot = cache.slot
        dense = B == P * G  # every slot of the grid holds its own row (nothing dropped yet): no scatter needed
        x = self._inner.embed_tokens(tokens)  # [B, hidden]
        if rope is not None and int(positions.max()) < rope.size:
            cos, sin = rope.cos[positions].unsqueeze(1), rope.sin_signed[positions].unsqueeze(1)  # [B, 1, D]
            rotate = _rope_swapped
        else:
            cos, sin = self._cos_sin(x.unsqueeze(1), positions.view(B, 1))  # [B, 1, D]
            rotate = _rope
        p_bias = prompt.bias[:, None, None, :]
        own_bias, lo = cache.own_bias(), cache.lo
        n_q = H * D
        for li, layer in enumerate(self.layers):
            h = _rms(x, layer.input_layernorm)
            w, b = packed[li]
            qkv = F.linear(h, w, b).view(B, H + 2 * Hkv, D)
            qk = rotate(qkv[:, : H + Hkv], cos, sin)  # q and k heads rotated together
            kv_t = cache.kv[li]
            kv_t[:B, 0, :, col] = qk[:, H:]
            kv_t[:B, 1, :, col] = qkv[:, H + Hkv :]
            qg = qk[:, :H].reshape(B, Hkv, rep, D).mul_(self.scale)  # the rep query heads of a KV head share its keys
            grid_q = _rows_to_grid(qg, slot, P, G, dense)  # [P, Hkv, G·rep, D]: a prompt's keys read once for its rows
            s_p = _grid_to_rows(torch.matmul(grid_q, prompt.k_t[li]).add_(p_bias), slot, G, rep, dense)
            k_own, v_own = kv_t[:B, 0, :, lo : col + 1], kv_t[:B, 1, :, lo : col + 1]
            s_own = torch.matmul(qg, k_own.transpose(-1, -2))  # [B, Hkv, rep, t]
            if own_bias is not None:
                s_own.add_(own_bias)
            probs = torch.softmax(torch.cat([s_p, s_own], dim=-1), dim=-1)
            p_p, p_own = probs[..., :W], probs[..., W:]
            o_p = _grid_to_rows(torch.matmul(_rows_to_grid(p_p, slot, P, G, dense), prompt.v[li]), slot, G, rep, dense)
            a = o_p.add_(torch.matmul(p_own, v_own))
            x = x + self._out(layer, a.view(B, n_q) if a.is_contiguous() else a.reshape(B, n_q))
            x = x + self._mlp(layer, _rms(x, layer.post_attention_layernorm))
        cache.length = col + 1
        return self.norm_logits(x)

    # ---- training: each distinct prompt once -------------------------------------------------------
    def prompt_states(self, prompts: list[list[int]], max_buckets: int = 3) -> PromptStates:
        """The distinct prompts' forward, with autograd: per layer the keys and values every response attends to,
        and the last position's output (it predicts the first response token).

        Prompts of very different lengths are run in up to ``max_buckets`` length buckets (:func:`length_buckets`),
        each left-padded to its own longest prompt, and their states are then left-padded to one width: on the GRPO
        default's mix of short expert prompts and long on-policy histories one padded batch is largely padding
        (docs/experiments.md, "issue 23: the GRPO stage, old engine against new, same recipe, re-measured"). The
        real tokens' states do not depend on the padding (masked keys, positions counted from each prompt's
        first token)."""
        groups = length_buckets([len(p) for p in prompts], max_buckets)
        if len(groups) == 1:
            return self._prompt_states([list(p) for p in prompts])
        parts = [self._prompt_states([list(prompts[i]) for i in g]) for g in groups]
        width = max(pt.valid.shape[1] for pt in parts)
        order = torch.tensor([i for g in groups for i in g], device=self.device).argsort()

        def merge(ts: list[torch.Tensor], dim_from_end: int) -> torch.Tensor:
            padded = []
            for t in ts:
                d = width - t.shape[-dim_from_end]
                padded.append(F.pad(t, (0, 0) * (dim_from_end - 1) + (d, 0)) if d else t)
            return torch.cat(padded)[order]

        n = len(parts[0].k)
        return PromptStates(
            [merge([pt.k[li] for pt in parts], 2) for li in range(n)],
            [merge([pt.v[li] for pt in parts], 2) for li in range(n)],
            torch.cat([pt.last for pt in parts])[order],
            merge([pt.valid for pt in parts], 1),
            torch.cat([pt.lens for pt in parts])[order],
        )

    def _prompt_states(self, prompts: list[list[int]]) -> PromptStates:
        ids, valid, lens, pos, mask = self._left_padded(prompts)
        x = self._inner.embed_tokens(ids)
        cos, sin = self._cos_sin(x, pos)
        ks, vs = [], []
        n_layers = len(self.layers)
        for li, layer in enumerate(self.layers):
            h = _rms(x, layer.input_layernorm)
            q, k, v = self._qkv(layer, h, cos, sin)
            ks.append(k)
            vs.append(v)
            if li < n_layers - 1:
                x = x + self._out(layer, self._attend(q, k, v, mask))
            else:
                # the last layer's prompt output matters only at the last position: one query instead of Lp
                x = x[:, -1:] + self._out(layer, self._attend(q[:, :, -1:], k, v, mask[:, :, -1:]))
            x = x + self._mlp(layer, _rms(x, layer.post_attention_layernorm))
        return PromptStates(ks, vs, x, valid, lens)

    def response_logits(
        self, states: PromptStates, responses: list[list[int]], prompt_of: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits [R, Lr, V] predicting every token of ``responses``, each continuing prompt ``prompt_of[r]`` of
        ``states``; the responses as targets [R, Lr] (right-padded with 0) and their mask [R, Lr] (bool). Response r attends to its prompt's
        keys/values and its own causal prefix, at positions ``len(prompt) + j``: the same function as one
        prompt + response sequence."""
        dev = self.device
        R, Lr = len(responses), max(1, max(len(r) for r in responses))
        Lp = states.valid.shape[1]
        ids = torch.zeros((R, Lr), dtype=torch.long)
        valid = torch.zeros((R, Lr), dtype=torch.bool)
        for i, r in enumerate(responses):
            if r:
                ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
                valid[i, : len(r)] = True
        ids, valid = ids.to(dev), valid.to(dev)
        owner = torch.tensor(prompt_of, dtype=torch.long, device=dev)
        pos = states.lens[owner].unsqueeze(1) + torch.arange(Lr, device=dev).unsqueeze(0)
        causal = torch.ones((Lr, Lr), dtype=torch.bool, device=dev).tril()
        mask = torch.cat(
            [states.valid[owner].unsqueeze(1).expand(R, Lr, Lp), causal.unsqueeze(0).expand(R, Lr, Lr)], dim=2
        )
        mask = mask.unsqueeze(1)
        x = self._inner.embed_tokens(ids)
        cos, sin = self._cos_sin(x, pos)
        for li, layer in enumerate(self.layers):
            h = _rms(x, layer.input_layernorm)
            q, k, v = self._qkv(layer, h, cos, sin)
            k_all = torch.cat([states.k[li][owner], k], dim=2)
            v_all = torch.cat([states.v[li][owner], v], dim=2)
            x = x + self._out(layer, self._attend(q, k_all, v_all, mask))
            x = x + self._mlp(layer, _rms(x, layer.post_attention_layernorm))
        h = torch.cat([states.last[owner], x[:, :-1]], dim=1)  # position j predicts response token j
        return self.norm_logits(h), ids, valid


__all__ = [
    "DecoderLM",
    "RopeTable",
    "SUPPORTED_MODEL_TYPES",
    "config_unsupported_reason",
    "decoder_for",
    "length_buckets",
    "merge_prefills",
    "supports",
    "unsupported_reason",
]
