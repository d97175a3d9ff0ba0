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
import hmac
import json
import logging
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from embodied_rft.config import ConfigError
from embodied_rft.generation.base import GenerationCancelled
from embodied_rft.tools.chat_request import RequestError, ServeConfig, _apply_stop, parse_chat_request

log = logging.getLogger(__name__)


class ClientGone(Exception):
    """The client closed its connection while its request was generating: nobody to answer."""


class _BoundedServer(ThreadingHTTPServer):
    """A threading server that serves at most ``limit`` connections at once; one more is answered 503 at once
    and closed, so a flood of connections cannot become a flood of threads."""

    def __init__(self, addr: Any, handler: Any, limit: int) -> None:
        self._slots = threading.BoundedSemaphore(limit)
        super().__init__(addr, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            body = json.dumps(
                {
                    "error": {
                        "message": "the server is at its connection limit; retry shortly",
                        "type": "server_error",
                        "param": None,
                        "code": "server_busy",
                    }
                }
            ).encode()
            head = (
                f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
            ).encode()
            try:
                request.sendall(head + body)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


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
        self.context_tokens = cfg.context_tokens or int(getattr(generator, "context_length", 0) or 0)
        handler = type("Handler", (_Handler,), {"server_ref": self, "timeout": cfg.timeout_s})
        self.httpd = _BoundedServer((host, port), handler, cfg.max_connections)
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
        scheme, _, credentials = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer":  # RFC 7235: the scheme is case-insensitive
            return False
        return hmac.compare_digest(credentials.strip().encode("utf-8", "replace"), self.token.encode())

    def models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {"id": self.cfg.model_name, "object": "model", "created": self.created, "owned_by": "embodied_rft"}
            ],
        }

    def check_context(self, messages: list[dict], images: list[Any], max_new_tokens: int) -> int:
        """The prompt's token count; RequestError 400 ``context_length_exceeded`` (OpenAI's code) when prompt
        and completion do not fit the model's context, or the prompt exceeds ``max_prompt_tokens``."""
        count = getattr(self.generator, "count_prompt_tokens", None)
        if count is None:
            return 0
        try:
            n = int(count(messages, images or None))
        except (ValueError, TypeError) as exc:
            raise RequestError(400, f"the messages cannot be templated for this model ({exc})", "messages") from None
        ctx, cap = self.context_tokens, self.cfg.max_prompt_tokens
        if cap and n > cap:
            raise RequestError(
                400,
                f"the messages are {n} tokens; this server accepts prompts of at most {cap} tokens. Please "
                "reduce the length of the messages.",
                "messages",
                "context_length_exceeded",
            )
        if ctx and n + max_new_tokens > ctx:
            raise RequestError(
                400,
                f"This model's maximum context length is {ctx} tokens. However, you requested {n + max_new_tokens} "
                f"tokens ({n} in the messages, {max_new_tokens} in the completion). Please reduce the length of the "
                "messages or completion.",
                "messages",
                "context_length_exceeded",
            )
        return n

    def chat(self, body: Any, client_gone: Any = None) -> dict:
        """One chat completion. ``client_gone`` (a callable) is polled while generating: a client that left
        stops its generation; so does the request's time budget (504)."""
        messages, images, s = parse_chat_request(
            body, self.cfg, bool(getattr(self.generator, "supports_images", False))
        )
        self.check_context(messages, images, s["max_new_tokens"])
        deadline = time.monotonic() + self.cfg.request_budget_s
        timeout = RequestError(
            504,
            f"the request took longer than the server's budget of {self.cfg.request_budget_s:g} s "
            "(waiting for the model and generating); retry, or ask for fewer tokens",
            None,
            "timeout",
            "server_error",
        )
        if not self._lock.acquire(timeout=self.cfg.request_budget_s):
            raise timeout

        def should_stop() -> bool:
            return time.monotonic() > deadline or bool(client_gone and client_gone())

        try:
            outs = self.generator.complete(
                [messages],
                [images] if images else None,
                max_new_tokens=s["max_new_tokens"],
                temperature=s["temperature"],
                top_p=s["top_p"],
                n=s["n"],
                seed=s["seed"],
                should_stop=should_stop,
            )[0]
        except GenerationCancelled:
            if client_gone and client_gone():
                raise ClientGone() from None
            raise timeout from None
        finally:
            self._lock.release()
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
            except RecursionError:
                raise RequestError(400, "the request body is nested too deeply") from None
            self._send(200, self.server_ref.chat(obj, self._client_gone))
        except ClientGone:
            self.close_connection = True
            log.info("client %s left before its answer; generation stopped", self.address_string())
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
        try:
            data = self.rfile.read(n)
        except TimeoutError:
            self.close_connection = True
            raise RequestError(
                408,
                f"the request body did not arrive within {self.server_ref.cfg.timeout_s:g} s",
                None,
                "request_timeout",
            ) from None
        if len(data) < n:
            self.close_connection = True
            raise RequestError(400, f"the body ended after {len(data)} of {n} bytes", None, "incomplete_body")
        return data

    def _client_gone(self) -> bool:
        """Whether the client closed its side (readable with nothing to read) while we generate."""
        import select
        import socket

        try:
            ready, _, _ = select.select([self.connection], [], [], 0)
            return bool(ready) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True


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
    p.add_argument("--max-prompt-tokens", type=int, default=0, help="longest prompt, tokens (0 = context - max_tokens)")
    p.add_argument(
        "--request-budget-s",
        type=float,
        default=ServeConfig.request_budget_s,
        help="seconds one request may wait and generate before it gets 504 and its generation stops",
    )
    p.add_argument("--max-connections", type=int, default=ServeConfig.max_connections, help="connections at once")
    p.add_argument(
        "--allow-public-without-token",
        action="store_true",
        help="bind a non-loopback --host without --token-env (anyone who reaches it can use the model)",
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
        if not a.allow_public_without_token:
            print(
                f"--host {a.host}: a public address needs --token-env (or --allow-public-without-token to serve "
                "it to anyone who can reach it)",
                file=sys.stderr,
            )
            return 2
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
            max_prompt_tokens=a.max_prompt_tokens,
            request_budget_s=a.request_budget_s,
            max_connections=a.max_connections,
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
