"""Typed, frozen, self-checking stage configs.

Every stage reads its section of the composed config (Hydra's ``conf/`` or DVC's generated
``params.yaml``) into a frozen dataclass with :func:`build`. ``build`` rejects unknown keys (with the
closest valid name), wrong types and missing required fields, naming the full dotted key, so a typo
fails fast instead of silently falling back to a default. Range checks live in each dataclass's
``__post_init__`` and raise :class:`ConfigError` through :func:`check`. A section's field marked ``extensions``
(``core/plugins.py``) takes the sub-sections extensions contribute (``decompose.rot``), under their own keys beside
the core's here and in :func:`as_dict`.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value is wrong; the message names the dotted key and what to change."""


class StageFailed(RuntimeError):
    """Work a stage handed to something outside it (a cluster job) failed; the message says what failed, where to
    look and which outputs were left as they were."""


def check(cond: bool, key: str, message: str) -> None:
    """Raise ConfigError(f"{key}: {message}") unless ``cond`` holds (for ``__post_init__``)."""
    if not cond:
        raise ConfigError(f"{key}: {message}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, key: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Union or origin is types.UnionType:
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(f"{key}: must not be null (expected {_type_name(tp)})")
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{key}: {value!r} matches none of {_type_name(tp)}")
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(f"{key}: {value!r} is not one of {list(choices)}")
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if origin in (list, tuple) or tp in (list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ConfigError(f"{key}: expected {len(args)} items, got {len(value)}")
            return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        return tuple(_convert(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        args = get_args(tp)
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _convert(v, vt, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported config type {_type_name(tp)}")


def to_plain(obj: Any) -> Any:
    """OmegaConf DictConfig / ListConfig -> plain dicts and lists (interpolations resolved)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, (DictConfig, ListConfig)):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a hard dependency
        pass
    return obj


def build(cls: type[T], mapping: Any, where: str) -> T:
    """Build the frozen dataclass ``cls`` from ``mapping`` (section ``where`` of the config).

    Unknown keys, wrong types and missing required keys raise :class:`ConfigError` naming
    ``where.key``; ``cls.__post_init__`` then checks ranges.
    """
    mapping = to_plain(mapping)
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{where}: expected a mapping of settings, got {type(mapping).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and "extensions" not in f.metadata}
    hints = get_type_hints(cls)
    # a field marked ``extensions`` (core/plugins.py) takes the sections extensions contribute, by their own keys
    ext = next((f for f in dataclasses.fields(cls) if "extensions" in f.metadata), None)
    owned = {k: v for k, v in mapping.items() if ext and k not in fields and ext.metadata["extensions"](f"{where}.{k}")}
    unknown = [k for k in mapping if k not in fields and k not in owned]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(str(k), list(fields), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {sorted(fields)}"
        raise ConfigError(f"{where}.{k}: unknown key{hint}")
    kwargs = {}
    for name, f in fields.items():
        key = f"{where}.{name}" if where else name
        if name in mapping:
            kwargs[name] = _convert(mapping[name], hints[name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
            raise ConfigError(f"{key}: missing required key")
    if ext is not None:
        kwargs[ext.name] = owned
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        # __post_init__ checks may name a key relative to the section; report the full dotted key.
        msg = str(exc)
        if where and not msg.startswith(f"{where}.") and not msg.startswith(where.split(".")[0] + "."):
            raise ConfigError(f"{where}.{_reanchor(msg, where)}") from None
        raise


def _reanchor(msg: str, where: str) -> str:
    """A nested section's check names its key from its own section (``sft.lr`` for ``verifier.sft``): the part
    that repeats the end of ``where`` is dropped (``verifier.sft`` + ``sft.lr`` -> ``verifier.sft.lr``)."""
    head = msg.split(":", 1)[0].split(".")
    tail = where.split(".")
    for k in range(min(len(head) - 1, len(tail)), 0, -1):
        if head[:k] == tail[-k:]:
            return msg[len(".".join(head[:k])) + 1 :]
    return msg


def as_dict(obj: Any) -> dict:
    """A frozen config dataclass -> plain dict (tuples as lists), for metrics and logs."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            out: dict = {}
            for f in dataclasses.fields(v):
                value = plain(getattr(v, f.name))
                if "extensions" in f.metadata:  # extension sections sit beside the core's keys (core/plugins.py)
                    out.update(value)
                else:
                    out[f.name] = value
            return out
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(obj)


__all__ = ["ConfigError", "StageFailed", "build", "check", "as_dict", "to_plain", "typing"]
