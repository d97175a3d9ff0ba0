"""The chat-completions request as the server reads it: its limits (:class:`ServeConfig`), client errors
(:class:`RequestError`, each a 4xx with OpenAI's error shape) and :func:`parse_chat_request`, which turns a decoded
body into messages, images and sampling settings or names what is wrong with it. The HTTP side is
:mod:`embodied_rft.tools.serve`.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from dataclasses import dataclass
from typing import Any

from embodied_rft.config import check

_ROLES = {"system", "user", "assistant", "developer"}


@dataclass(frozen=True)
class ServeConfig:
    # name clients put in "model" (EB picks its code path by this name); default: the checkpoint folder's name
    model_name: str = "embodied-rft"
    # largest accepted request body, bytes (a 600x600 PNG frame as base64 is ~0.5 MB)
    max_request_bytes: int = 8 * 1024 * 1024
    # max_tokens above this are lowered to it (EB asks for 2048)
    max_tokens_cap: int = 1024
    # max_tokens when the request gives none (then capped like any other)
    default_max_tokens: int = 512
    # largest image accepted, pixels (width x height), checked before decoding
    max_image_pixels: int = 4096 * 4096
    # most completions per request ("n")
    max_n: int = 8
    # seconds a client may take to send its request body, in all (from the end of its headers); also how long one
    # write of the answer may block
    timeout_s: float = 60.0
    # seconds a connection has, in all (not per byte), to send its request line and headers, counted from its
    # accept or from its previous answer (so also how long a kept-alive connection may sit idle); past it, 408
    header_timeout_s: float = 20.0
    # the model's context, tokens (prompt + completion); 0 = read it from the model (max_position_embeddings)
    context_tokens: int = 0
    # longest prompt accepted, tokens; 0 = the context less the request's max_tokens
    max_prompt_tokens: int = 0
    # seconds one request may spend waiting for the model and generating; past it the request gets 504 and the
    # generation stops (so does the generation of a client that disconnected)
    request_budget_s: float = 120.0
    # requests served at once (headers complete: reading the body, waiting for the model, generating, answering);
    # a request beyond them gets 503 at once. Connections still sending their headers do not count here
    max_connections: int = 32
    # connections still sending their request line and headers (or idle between kept-alive requests), held by one
    # event loop, not a thread each; one more closes the oldest of them
    max_pending_connections: int = 256
    # the listen() backlog: connections the kernel queues before the server accepts them (capped by the kernel's
    # net.core.somaxconn); a small one turns a burst of connects into resets
    backlog: int = 512
    # torch intra-op threads of the one generation worker, set once in that thread; 0 = torch's default
    threads: int = 0

    def __post_init__(self) -> None:
        check(bool(self.model_name), "model_name", "must be a non-empty name")
        for key in ("max_request_bytes", "max_tokens_cap", "default_max_tokens", "max_image_pixels", "max_n"):
            check(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")
        check(self.timeout_s > 0, "timeout_s", f"must be > 0 seconds, got {self.timeout_s}")
        for key in ("context_tokens", "max_prompt_tokens"):
            check(getattr(self, key) >= 0, key, f"must be >= 0 (0 = from the model), got {getattr(self, key)}")
        check(self.request_budget_s > 0, "request_budget_s", f"must be > 0 seconds, got {self.request_budget_s}")
        for key in ("max_connections", "max_pending_connections", "backlog"):
            check(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")
        check(self.header_timeout_s > 0, "header_timeout_s", f"must be > 0 seconds, got {self.header_timeout_s}")
        check(self.threads >= 0, "threads", f"must be >= 0 (0 = torch's default), got {self.threads}")


class RequestError(Exception):
    """A client error: HTTP status, message, the offending parameter, and an OpenAI-style type/code."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        etype: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.etype = status, message, param, code, etype


def _decode_image(url: str, where: str, max_pixels: int) -> Any:
    from PIL import Image, UnidentifiedImageError

    if not url.startswith("data:"):
        raise RequestError(
            400,
            f"{where}: only data: URLs are accepted (the server makes no network requests)",
            where,
            "invalid_image_url",
        )
    head, sep, payload = url.partition(",")
    if not sep or ";base64" not in head:
        raise RequestError(400, f"{where}: expected data:<mime>;base64,<data>", where, "invalid_image_url")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(400, f"{where}: the base64 data is malformed", where, "invalid_image_url") from None
    try:
        im = Image.open(io.BytesIO(raw))  # reads the header only: the size is known before any decoding
        w, h = im.size
        if w * h > max_pixels:
            raise RequestError(
                413, f"{where}: image is {w}x{h} = {w * h} pixels; the limit is {max_pixels}", where, "image_too_large"
            )
        im.load()
        return im.convert("RGB")
    except RequestError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise RequestError(400, f"{where}: not a readable image", where, "invalid_image") from None


def _text(value: str, where: str) -> str:
    """``value`` when it is valid Unicode (JSON lets a client send a lone surrogate, which no tokenizer takes)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(400, f"{where}: not valid Unicode text (a lone surrogate?)", where) from None
    return value


def _number(body: dict, key: str, lo: float, hi: float, default: float | None, integer: bool = False) -> Any:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise RequestError(
            400, f"'{key}' must be {'an integer' if integer else 'a number'}, got {json.dumps(v)[:40]}", key
        )
    if not lo <= v <= hi:
        raise RequestError(400, f"'{key}' must be in [{lo:g}, {hi:g}], got {v}", key)
    return v


def parse_chat_request(body: Any, cfg: ServeConfig, supports_images: bool) -> tuple[list[dict], list[Any], dict]:
    """(messages, images, sampling) from a decoded request body; RequestError on anything malformed."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str):
        raise RequestError(400, "'model' is required and must be a string", "model")
    if model != cfg.model_name:
        raise RequestError(
            404,
            f"model {model!r} does not exist; this server serves {cfg.model_name!r}",
            "model",
            "model_not_found",
            "not_found_error",
        )
    if body.get("stream"):
        raise RequestError(400, "streaming is not supported; send stream=false", "stream")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise RequestError(400, "'messages' must be a non-empty list", "messages")
    out: list[dict] = []
    images: list[Any] = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(400, f"{where} must be an object", where)
        role = m.get("role")
        if role not in _ROLES:
            raise RequestError(
                400, f"{where}.role must be one of {sorted(_ROLES)}, got {json.dumps(role)[:40]}", f"{where}.role"
            )
        content = m.get("content")
        if content is None and role == "assistant":
            content = ""
        if isinstance(content, str):
            parts: Any = _text(content, f"{where}.content")
        elif isinstance(content, list):
            parts = []
            for j, p in enumerate(content):
                pw = f"{where}.content[{j}]"
                ptype = p.get("type") if isinstance(p, dict) else None
                if ptype == "text" and isinstance(p.get("text"), str):
                    parts.append({"type": "text", "text": _text(p["text"], f"{pw}.text")})
                elif ptype == "image_url":
                    iu = p.get("image_url")
                    url = iu.get("url") if isinstance(iu, dict) else iu
                    if not isinstance(url, str):
                        raise RequestError(400, f"{pw}.image_url.url must be a string", f"{pw}.image_url")
                    if not supports_images:
                        raise RequestError(
                            400, f"{pw}: this model reads text only; it cannot take images", pw, "images_not_supported"
                        )
                    images.append(_decode_image(url, pw, cfg.max_image_pixels))
                    parts.append({"type": "image", "image": images[-1]})
                else:
                    raise RequestError(400, f"{pw} must be a text part or an image_url part", pw)
        else:
            raise RequestError(400, f"{where}.content must be a string or a list of content parts", f"{where}.content")
        out.append({"role": "system" if role == "developer" else role, "content": parts})
    cap = cfg.max_tokens_cap
    mt = _number(body, "max_completion_tokens", 1, 1 << 30, None, integer=True)
    if mt is None:
        mt = _number(body, "max_tokens", 1, 1 << 30, cfg.default_max_tokens, integer=True)
    stop = body.get("stop")
    if stop is not None and not (
        isinstance(stop, str) or (isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4)
    ):
        raise RequestError(400, "'stop' must be a string or a list of at most 4 strings", "stop")
    for j, st in enumerate([stop] if isinstance(stop, str) else (stop or [])):
        _text(st, f"stop[{j}]")
    sampling = {
        "max_new_tokens": min(int(mt), cap),
        "temperature": float(_number(body, "temperature", 0.0, 2.0, 1.0)),
        "top_p": float(_number(body, "top_p", 1e-9, 1.0, 1.0)),
        "n": int(_number(body, "n", 1, cfg.max_n, 1, integer=True)),
        "seed": _number(body, "seed", -(1 << 63), (1 << 63) - 1, None, integer=True),
        "stop": [stop] if isinstance(stop, str) else (stop or []),
    }
    return out, images, sampling


def _apply_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
