"""OpenRLHF reward file (``--reward.remote_url <this file>``): the project's reward inside OpenRLHF 0.11.2.

OpenRLHF loads this file by path (``importlib`` in ``openrlhf.utils.agent.SingleTurnAgentExecutor``) and
calls ``reward_func(queries, prompts, labels)`` once per sample with lists of length 1 (docs/facts.md §5.2):
``queries`` = the decoded prompt+response token ids (special tokens kept; for a VLM the image placeholder
is expanded into many image tokens), ``prompts`` = the chat-templated prompt, ``labels`` = the sample's
``label`` (the decomposed sample's JSON string). It returns

* ``rewards`` — :func:`embodied_rft.reward.score` ``.total`` (R_format + R_accuracy, max 1.5), the GRPO reward;
* ``scores`` — ``accuracy_full`` (0/1): what OpenRLHF's dynamic filtering averages, so that its
  ``--algo.dynamic_filtering_range`` is exactly the paper's lower ≤ C_x ≤ upper (``filtering.openrlhf_range``);
* ``extra_logs`` — the reward terms, logged by OpenRLHF to W&B/TensorBoard.

The response is split off the query after the prompt's last assistant header: the header is counted in
the *prompt* (``<|im_start|>assistant`` for ChatML; ``EMBODIED_RFT_ASSISTANT_MARKER`` overrides it) and
the query is cut after the same occurrence, which works however many image tokens the query carries. The
response ends at the first end-of-turn token. OpenRLHF swallows reward exceptions and lets such a sample
pass the filter with reward None, so this function never raises: anything unexpected scores 0.

The reward variant comes from ``EMBODIED_RFT_REWARD_VARIANT`` (set by the job's runtime env from the
``reward:`` config; default ``paper``). An extension's variant (core/plugins.py) is registered by the module
``EMBODIED_RFT_REWARD_PLUGIN`` names, its options come as JSON in ``EMBODIED_RFT_REWARD_OPTIONS``, tokens are the
tokenizer's at ``EMBODIED_RFT_TOKENIZER`` (a local checkpoint folder; e.g. regrpo's reflection tokens, words without
it), and the terms its section names (``terms``: regrpo's ``reflection_tokens``) join the logged ones. Departure
from the RR code: it parsed the response after ``"assistant\\n"`` with a bare ``json.loads``; here the tolerant
parser of the ``paper`` variant applies.

With ``EMBODIED_RFT_REWARD_LOG`` set (the ``grpo`` stage sets it to a folder on the shared filesystem), every scored
sample is also appended, as one JSON line, to ``<folder>/<host>-<pid>.jsonl``: the time, a digest of the prompt
(what groups the G samples of one prompt), the reward, the score and the terms. The stage reads them back per
rollout batch (:mod:`.logs`). OpenRLHF calls this function from threads of several processes, hence one file per
process, a lock per file and one write per line. A failure to record is logged once and never stops scoring.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path

import torch

log = logging.getLogger("embodied_rft.train.openrlhf.reward")

DEFAULT_MARKER = "<|im_start|>assistant"
END_TOKENS = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<end_of_turn>")
EXTRA_KEYS = ("structure", "valid", "match", "accuracy", "accuracy_full")

try:  # loaded by path on a cluster: make the package importable from the uploaded working_dir
    import embodied_rft.reward as _reward
except ImportError:  # pragma: no cover - exercised only when the package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import embodied_rft.reward as _reward
_plugins = _reward.plugins  # core/plugins.py: the registry an extension's variant joins


def split_response(query: str, prompt: str, marker: str | None = None) -> str:
    """The assistant's response inside ``query`` (see module docstring); "" when it cannot be found."""
    marker = marker or os.environ.get("EMBODIED_RFT_ASSISTANT_MARKER") or DEFAULT_MARKER
    n = prompt.count(marker)
    if n:
        pos = -1
        for _ in range(n):
            pos = query.find(marker, pos + 1)
            if pos < 0:
                break
        if pos >= 0:
            rest = query[pos + len(marker) :]
            # the header line ends with a newline in ChatML; the response starts after it
            rest = rest[1:] if rest.startswith("\n") else rest
        else:
            rest = ""
    elif query.startswith(prompt):
        rest = query[len(prompt) :]
    else:
        return ""
    cut = min((i for i in (rest.find(t) for t in END_TOKENS) if i >= 0), default=len(rest))
    return rest[:cut].strip()


def _options() -> dict:
    """The variant's options and the policy's token counter from the job's env (module docstring); read once."""
    if "options" not in _OPTIONS:
        opts = json.loads(os.environ.get("EMBODIED_RFT_REWARD_OPTIONS") or "{}")
        path = os.environ.get("EMBODIED_RFT_TOKENIZER")
        if path:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
            opts["count_tokens"] = lambda text: len(tok(text, add_special_tokens=False)["input_ids"])
        _OPTIONS["options"] = opts
    return _OPTIONS["options"]


_OPTIONS: dict[str, dict] = {}


def _variant() -> str:
    """The job's variant, its extension's module imported first (module docstring); ``paper`` when unknown."""
    variant = os.environ.get("EMBODIED_RFT_REWARD_VARIANT", "paper")
    try:
        _plugins.import_module(os.environ.get("EMBODIED_RFT_REWARD_PLUGIN"))
    except ImportError:
        log.warning("EMBODIED_RFT_REWARD_PLUGIN cannot be imported", exc_info=True)
    if variant not in _reward.REWARDS:
        log.warning("EMBODIED_RFT_REWARD_VARIANT=%r is unknown; using 'paper'", variant)
        variant = "paper"
    return variant


def _one(query: object, prompt: object, label: object, variant: str) -> tuple[float, float, dict[str, float]]:
    keys = EXTRA_KEYS + tuple(getattr(_plugins.SECTIONS.get(f"reward.{variant}"), "terms", ()))
    try:
        response = split_response(str(query), str(prompt))
        opts = _options()
        rb = _reward.score(response, label, variant, **opts)
        return rb.total, rb.accuracy_full, {k: float(getattr(rb, k)) for k in keys}
    except Exception:  # noqa: BLE001 - OpenRLHF would swallow it and let the sample through unscored
        log.warning("reward failed on one sample; scoring 0", exc_info=True)
        return 0.0, 0.0, dict.fromkeys(keys, 0.0)


_RECORD_LOCK = threading.Lock()
_RECORD_STATE: dict[str, object] = {}


def _record(prompts: list, results: list) -> None:
    """Append one line per scored sample to ``EMBODIED_RFT_REWARD_LOG`` (module docstring); never raises."""
    folder = os.environ.get("EMBODIED_RFT_REWARD_LOG")
    if not folder or _RECORD_STATE.get("broken"):
        return
    try:
        now = time.time()
        lines = []
        for prompt, (total, score, extra) in zip(prompts, results):
            digest = hashlib.sha256(str(prompt).encode("utf-8", "replace")).hexdigest()[:16]
            lines.append(json.dumps({"t": now, "prompt": digest, "reward": total, "score": score, **extra}))
        with _RECORD_LOCK:
            fh = _RECORD_STATE.get("fh")
            if fh is None or _RECORD_STATE.get("at") != (os.getpid(), folder):
                if fh is not None and _RECORD_STATE.get("at", (None,))[0] == os.getpid():
                    fh.close()
                Path(folder).mkdir(parents=True, exist_ok=True)
                name = f"{socket.gethostname()}-{os.getpid()}.jsonl"
                fh = open(Path(folder) / name, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the process
                _RECORD_STATE.update(fh=fh, at=(os.getpid(), folder))
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()
    except Exception:  # noqa: BLE001 - recording must never stop scoring
        _RECORD_STATE["broken"] = True
        log.warning("cannot append reward records to %s; scoring goes on without them", folder, exc_info=True)


def reward_func(queries, prompts, labels, **kwargs) -> dict:
    """OpenRLHF's reward-file entry point (module docstring). Never raises."""
    try:
        variant = _variant()
        n = len(queries)
        prompts = list(prompts) if prompts is not None else [""] * n
        labels = list(labels) if labels is not None else [""] * n
        prompts += [""] * (n - len(prompts))
        labels += [""] * (n - len(labels))
        results = [_one(q, p, lab, variant) for q, p, lab in zip(queries, prompts, labels)]
        _record(prompts, results)
    except Exception:  # noqa: BLE001
        log.warning("reward_func failed on the whole batch; scoring 0", exc_info=True)
        try:
            n = len(queries)
        except Exception:  # noqa: BLE001
            n = 1
        results = [(0.0, 0.0, dict.fromkeys(EXTRA_KEYS, 0.0))] * n
    rewards = torch.tensor([r[0] for r in results], dtype=torch.float32)
    scores = torch.tensor([r[1] for r in results], dtype=torch.float32)
    keys = results[0][2] if results else EXTRA_KEYS
    extra = {k: torch.tensor([r[2][k] for r in results], dtype=torch.float32) for k in keys}
    return {"rewards": rewards, "scores": scores, "extra_logs": extra}
