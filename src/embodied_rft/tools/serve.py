"""An OpenAI-compatible chat server for a trained checkpoint: ``POST /v1/chat/completions``, ``GET /v1/models``.

Run: ``python -m embodied_rft.tools.serve --model models/grpo [--host 127.0.0.1] [--port 8000] [--token-env VAR]
[--served-model-name NAME] [--backend hf|vllm]``. Input: chat requests in the OpenAI format, with text content or
content parts (``{"type": "text"}``, ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``).
Output: ``chat.completion`` objects (``choices[].message.content``, ``finish_reason``, ``usage``); errors as
OpenAI-style JSON ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status for anything the client
got wrong — the server never crashes on a request.

How the rest of the world uses it:

- **EmbodiedBench, remote-model mode** (the real EB-ALFRED / EB-Habitat evaluation this project's proxy stands
  in for): EB's ``RemoteModel`` builds ``OpenAI(base_url=os.environ["remote_url"])`` for Qwen-family names and
  routes a name containing ``Qwen2.5-VL-7B-Instruct`` to a plain ``chat.completions.create`` with
  ``temperature=0``, ``max_tokens=2048`` and a ``json_schema`` ``response_format``. Serve the checkpoint under
  that name and point EB at it::

      export EVAL_TOKEN=$(openssl rand -hex 16)
      python -m embodied_rft.tools.serve --model models/grpo --served-model-name Qwen/Qwen2.5-VL-7B-Instruct \\
          --token-env EVAL_TOKEN --max-tokens-cap 2048
      # in EmbodiedBench's environment:
      export remote_url=http://127.0.0.1:8000/v1 OPENAI_API_KEY=$EVAL_TOKEN
      python -m embodiedbench.main env=eb-alf model_name=Qwen/Qwen2.5-VL-7B-Instruct model_type=remote

  EB sends the frame as ``data:image/jpeg;base64,...`` even though the bytes are PNG; images are decoded from
  their bytes, so the label does not matter. ``response_format`` is accepted and not enforced (no constrained
  decoding): the model was trained to answer EB's JSON. This is the path to real EmbodiedBench numbers.
- **The project's ``openai`` teacher** (``teacher/openai_backend.py``) can distil from a served checkpoint:
  ``teacher.openai.base_url=http://127.0.0.1:8000/v1``, ``teacher.openai.model=<served name>`` and
  ``teacher.openai.api_key_env=<the --token-env variable>``.

Safety: binds to 127.0.0.1 unless ``--host`` says otherwise; an optional bearer token read from an environment
variable (never from the command line, where ``ps`` shows it) and compared in constant time; request bodies
over ``--max-request-mb`` are refused with 413 before they are read; images must be inline ``data:`` URLs (the
server makes no network requests) and at most ``--max-image-pixels`` pixels, checked before decoding;
``max_tokens`` is capped at ``--max-tokens-cap``; a slow client is dropped after ``--timeout-s``.
Requests are served one generation at a time (a transformers model is not thread-safe); use
``--backend vllm`` on a GPU for throughput. Departures from OpenAI: no streaming (400), no tools.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import io
import json
import logging
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from embodied_rft.config import ConfigError, check

log = logging.getLogger(__name__)

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
    # seconds a client may take to send its request
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        check(bool(self.model_name), "model_name", "must be a non-empty name")
        for key in ("max_request_bytes", "max_tokens_cap", "default_max_tokens", "max_image_pixels", "max_n"):
            check(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")
        check(self.timeout_s > 0, "timeout_s", f"must be > 0 seconds, got {self.timeout_s}")


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
            parts: Any = content
        elif isinstance(content, list):
            parts = []
            for j, p in enumerate(content):
                pw = f"{where}.content[{j}]"
                ptype = p.get("type") if isinstance(p, dict) else None
                if ptype == "text" and isinstance(p.get("text"), str):
                    parts.append({"type": "text", "text": p["text"]})
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


class ChatServer:
    """The HTTP server around one generator. ``start()`` serves in a background thread (tests);
    ``serve_forever()`` in the calling one (the CLI)."""

    def __init__(
        self, generator: Any, cfg: ServeConfig, host: str = "127.0.0.1", port: int = 8000, token: str | None = None
    ) -> None:
        self.generator = generator
        self.cfg = cfg
        self.token = token
        self._lock = threading.Lock()
        self.created = int(time.time())
        handler = type("Handler", (_Handler,), {"server_ref": self, "timeout": cfg.timeout_s})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ChatServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="chat-server", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def authorized(self, header: str | None) -> bool:
        if self.token is None:
            return True
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self.token.encode())

    def models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {"id": self.cfg.model_name, "object": "model", "created": self.created, "owned_by": "embodied_rft"}
            ],
        }

    def chat(self, body: Any) -> dict:
        messages, images, s = parse_chat_request(
            body, self.cfg, bool(getattr(self.generator, "supports_images", False))
        )
        with self._lock:
            outs = self.generator.complete(
                [messages],
                [images] if images else None,
                max_new_tokens=s["max_new_tokens"],
                temperature=s["temperature"],
                top_p=s["top_p"],
                n=s["n"],
                seed=s["seed"],
            )[0]
        choices = []
        for i, c in enumerate(outs):
            text, stopped = _apply_stop(c.text, s["stop"])
            choices.append(
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": "stop" if stopped else c.finish_reason,
                }
            )
        prompt_tokens = outs[0].prompt_tokens if outs else 0
        completion_tokens = sum(c.completion_tokens for c in outs)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.cfg.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class _Handler(BaseHTTPRequestHandler):
    server_ref: ChatServer
    protocol_version = "HTTP/1.1"
    server_version = "embodied-rft"

    def log_message(self, fmt: str, *args: Any) -> None:  # never the headers: they may carry the token
        log.debug("%s %s", self.address_string(), fmt % args)

    def _send(self, status: int, obj: dict, extra: dict | None = None) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, e: RequestError, extra: dict | None = None) -> None:
        self._send(
            e.status, {"error": {"message": e.message, "type": e.etype, "param": e.param, "code": e.code}}, extra
        )

    def _route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def _auth(self) -> bool:
        if self.server_ref.authorized(self.headers.get("Authorization")):
            return True
        self._error(
            RequestError(401, "missing or invalid bearer token", None, "invalid_api_key", "authentication_error"),
            {"WWW-Authenticate": "Bearer"},
        )
        return False

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        route = self._route()
        if route == "/health":
            self._send(200, {"status": "ok"})
        elif route == "/v1/models":
            if self._auth():
                self._send(200, self.server_ref.models())
        else:
            self._error(RequestError(404, f"no route GET {route}", None, "not_found", "not_found_error"))

    def do_POST(self) -> None:  # noqa: N802
        route = self._route()
        try:
            body = self._read_body()  # read (or refuse) the body first, so the connection stays in sync
            if not self._auth():
                return
            if route != "/v1/chat/completions":
                raise RequestError(404, f"no route POST {route}", None, "not_found", "not_found_error")
            try:
                obj = json.loads(body)
            except (ValueError, UnicodeDecodeError) as exc:
                raise RequestError(400, f"the request body is not valid JSON ({exc.__class__.__name__})") from None
            self._send(200, self.server_ref.chat(obj))
        except RequestError as e:
            self._error(e)
        except Exception:  # noqa: BLE001 - a generation bug must answer 500, not kill the server
            log.exception("request failed")
            self._error(RequestError(500, "internal error while generating", None, "server_error", "server_error"))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise RequestError(411, "send a Content-Length; chunked bodies are not accepted", None, "length_required")
        raw = self.headers.get("Content-Length")
        if raw is None:
            self.close_connection = True
            raise RequestError(411, "Content-Length is required", None, "length_required")
        try:
            n = int(raw)
            if n < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise RequestError(400, "Content-Length is not a number", None, "bad_content_length") from None
        limit = self.server_ref.cfg.max_request_bytes
        if n > limit:
            self.close_connection = True  # the body is left unread: this connection cannot be reused
            raise RequestError(
                413, f"request body of {n} bytes exceeds the limit of {limit} bytes", None, "request_too_large"
            )
        return self.rfile.read(n)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m embodied_rft.tools.serve", description="OpenAI-compatible chat server for a trained checkpoint."
    )
    p.add_argument("--model", required=True, help="checkpoint directory (models/sft, models/grpo ...)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (0 = any free port)")
    p.add_argument(
        "--token-env", default=None, help="NAME of an environment variable holding the bearer token clients must send"
    )
    p.add_argument(
        "--served-model-name", default=None, help="model name clients send (default: the checkpoint folder's name)"
    )
    p.add_argument("--backend", choices=("hf", "vllm"), default="hf", help="generation backend (vllm needs a GPU)")
    p.add_argument("--device", default="auto", help="hf backend: cpu | cuda | auto")
    p.add_argument("--max-tokens-cap", type=int, default=ServeConfig.max_tokens_cap, help="upper bound on max_tokens")
    p.add_argument(
        "--max-request-mb", type=float, default=ServeConfig.max_request_bytes / 2**20, help="largest request body, MiB"
    )
    p.add_argument("--max-image-pixels", type=int, default=ServeConfig.max_image_pixels, help="largest image, pixels")
    p.add_argument(
        "--timeout-s", type=float, default=ServeConfig.timeout_s, help="seconds a client may take to send a request"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from embodied_rft.generation import GenerationConfig, make_generator

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    a = _parse_args(argv)
    token = None
    if a.token_env:
        token = os.environ.get(a.token_env)
        if not token:
            print(f"--token-env {a.token_env}: the environment variable is not set or empty", file=sys.stderr)
            return 2
    elif a.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving on %s without a token: anyone who can reach this address can use the model", a.host)
    model_dir = Path(a.model)
    if not (model_dir / "config.json").is_file():
        print(f"--model {model_dir}: not a checkpoint directory (no config.json)", file=sys.stderr)
        return 2
    cap = a.max_tokens_cap
    try:
        cfg = ServeConfig(
            model_name=a.served_model_name or model_dir.resolve().name,
            max_request_bytes=int(a.max_request_mb * 2**20),
            max_tokens_cap=cap,
            max_image_pixels=a.max_image_pixels,
            timeout_s=a.timeout_s,
        )
    except ConfigError as exc:
        print(f"bad option: {exc}", file=sys.stderr)
        return 2
    gen = make_generator(
        model_dir, GenerationConfig(backend=a.backend, device=a.device, max_new_tokens=cfg.max_tokens_cap, batch_size=1)
    )
    server = ChatServer(gen, cfg, a.host, a.port, token)
    log.info("serving %s as %r at %s (token %s)", model_dir, cfg.model_name, server.url, "required" if token else "off")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
        gen.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
