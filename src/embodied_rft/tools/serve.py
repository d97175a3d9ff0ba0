"""An OpenAI-compatible chat server for a trained checkpoint: ``POST /v1/chat/completions``, ``GET /v1/models``.

Run: ``python -m embodied_rft.tools.serve --model models/grpo [--host 127.0.0.1] [--port 8000] [--token-env VAR]
[--served-model-name NAME] [--backend hf|vllm]``. Input: chat requests in the OpenAI format, with text content or
content parts (``{"type": "text"}``, ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``).
Output: ``chat.completion`` objects (``choices[].message.content``, ``finish_reason``, ``usage``); errors as
OpenAI-style JSON ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status for anything the client
got wrong — the server never crashes on a request.

The manual — EmbodiedBench's remote-model mode, the teacher pointed at a served checkpoint, the safety rules and
the connection handling with every flag — is ``docs/serving.md``. In short: one event-loop thread accepts
(``--backlog``) and reads request heads (``--header-timeout``, its own ``--max-pending-connections`` cap); a
complete head takes one of ``--max-connections`` handler slots, which check the token before reading the body; one
generation worker thread (``--threads``) runs every generation.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import errno
import heapq
import hmac
import itertools
import json
import logging
import os
import queue
import select
import selectors
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from embodied_rft.config import ConfigError
from embodied_rft.generation.base import GenerationCancelled
from embodied_rft.tools.chat_request import RequestError, ServeConfig, _apply_stop, parse_chat_request

log = logging.getLogger(__name__)

# a request line and headers longer than this, in all, get 431 without being parsed
MAX_HEADER_BYTES = 64 * 1024
# a request whose headers are complete while every slot is busy waits this long for one before it gets 503: a
# slot whose answer has just gone out is freed by the event loop a moment later, and a client that sends its
# next request at once must not see 503 for that moment
SLOT_WAIT_S = 0.5
# after an answer that closes the connection, what the client still sends (a body left unread after 401 or 413)
# is read and dropped for at most this long, so the close is a FIN after the answer, not an RST that can destroy
# the answer before the client reads it
LINGER_S = 2.0
# how often a request waiting for the generation worker checks whether its client is still there
_POLL_S = 0.25
# a generation past its request's budget has this long to notice (its should_stop is polled once per token)
_STOP_GRACE_S = 1.0

_WAKE = object()


class ClientGone(Exception):
    """The client closed its connection while its request was generating: nobody to answer."""


def _error_body(message: str, code: str, etype: str = "invalid_request_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": etype, "param": None, "code": code}}).encode()


class _Conn:
    """One client connection as the event loop holds it: the bytes read so far of its next request, and the
    deadline of its current state."""

    __slots__ = ("sock", "addr", "buf", "scanned", "deadline", "state")

    def __init__(self, sock: socket.socket, addr: Any) -> None:
        self.sock, self.addr = sock, addr
        self.buf = bytearray()
        self.scanned = 0  # buf[:scanned] holds no end of headers
        self.deadline = 0.0
        self.state = "headers"  # "headers" | "wait" (for a slot) | "busy" (a handler thread has it) | "linger"

    def head_complete(self) -> bool:
        """Whether ``buf`` holds the request line and every header (a blank line ends them)."""
        buf = self.buf
        if buf[:1] == b"\n" or buf[:2] == b"\r\n":
            return True  # a blank request line: http.server answers it by closing
        i = buf.find(b"\n", max(self.scanned - 2, 0))
        while i >= 0:
            if buf[i + 1 : i + 2] == b"\n" or buf[i + 1 : i + 3] == b"\r\n":
                return True
            i = buf.find(b"\n", i + 1)
        self.scanned = len(buf)
        return False


class _Reader:
    """The request as http.server reads it (``readline``, ``read``): first the bytes the event loop already
    read, then the socket; with ``deadline`` set, every read together must finish by it (TimeoutError)."""

    def __init__(self, sock: socket.socket, buf: bytearray) -> None:
        self._sock, self._buf = sock, buf
        self.deadline: float | None = None

    def _fill(self) -> bool:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request did not arrive in time")
            self._sock.settimeout(left)
        data = self._sock.recv(256 * 1024)
        self._buf += data
        return bool(data)

    def readline(self, limit: int = -1) -> bytes:
        while True:
            i = self._buf.find(b"\n")
            if i >= 0 and (limit < 0 or i < limit):
                n = i + 1
                break
            if 0 <= limit <= len(self._buf):
                n = limit
                break
            if not self._fill():
                n = len(self._buf)
                break
        line = bytes(self._buf[:n])
        del self._buf[:n]
        return line

    def read(self, n: int) -> bytes:
        while len(self._buf) < n and self._fill():
            pass
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def leftover(self) -> bytearray:
        """What the client sent beyond the request (the next one, pipelined)."""
        return self._buf


class _Writer:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def write(self, data: bytes) -> int:
        self._sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass


class _ChatHTTPServer(socketserver.TCPServer):
    """The connection side of :class:`ChatServer`: an event loop that accepts and reads request heads, and a
    fixed pool of handler threads that serve requests whose head is complete. See the module docstring."""

    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], handler: type[_Handler], cfg: ServeConfig) -> None:
        self.cfg = cfg
        self.request_queue_size = cfg.backlog
        self.address_family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        self.listen_backlog = 0  # what server_activate passed to listen()
        self._handler_class = handler
        self._jobs: queue.SimpleQueue[_Conn | None] = queue.SimpleQueue()
        self._inbox: collections.deque[tuple[_Conn, str]] = collections.deque()
        self._inbox_lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._closed = False
        # owned by the loop thread alone
        self._pending: dict[socket.socket, _Conn] = {}  # oldest first
        self._waiting: collections.deque[_Conn] = collections.deque()
        self._busy: set[_Conn] = set()
        self._active = 0
        self._timers: list[tuple[float, int, _Conn]] = []
        self._seq = itertools.count()
        self._sel: selectors.BaseSelector | None = None
        super().__init__(addr, handler)

    def server_activate(self) -> None:
        self.listen_backlog = self.request_queue_size
        self.socket.listen(self.listen_backlog)

    # ---- the event loop (one thread) ------------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        self.socket.setblocking(False)
        sel = self._sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        pool = [
            threading.Thread(target=self._handler_loop, name=f"chat-handler-{i}", daemon=True)
            for i in range(self.cfg.max_connections)
        ]
        for t in pool:
            t.start()
        try:
            while not self._stop.is_set():
                timeout = poll_interval
                if self._timers:
                    timeout = min(timeout, max(self._timers[0][0] - time.monotonic(), 0.0))
                for key, _ in sel.select(timeout):
                    if key.data is None:
                        self._accept()
                    elif key.data is _WAKE:
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except OSError:
                            pass
                    else:
                        self._on_readable(key.data)
                self._take_inbox()
                self._serve_waiting()
                self._expire()
        finally:
            self._wind_down(pool)

    def shutdown(self) -> None:
        self._stop.set()
        self._wake()
        self._stopped.wait()

    def server_close(self) -> None:
        super().server_close()
        for s in (self._wake_r, self._wake_w):
            s.close()

    def _wind_down(self, pool: list[threading.Thread]) -> None:
        with self._inbox_lock:
            self._closed = True
            for conn, _ in self._inbox:
                _close(conn.sock)
            self._inbox.clear()
        for conn in list(self._pending.values()) + list(self._waiting):
            _close(conn.sock)
        for conn in list(self._busy):  # wakes a handler blocked on its client
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._pending.clear()
        self._waiting.clear()
        self._busy.clear()
        self._timers.clear()
        for _ in pool:
            self._jobs.put(None)
        if self._sel is not None:
            self._sel.close()
        self._stopped.set()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (a wake-up is already pending) or closed
            pass

    def _set_deadline(self, conn: _Conn, seconds: float) -> None:
        conn.deadline = time.monotonic() + seconds
        heapq.heappush(self._timers, (conn.deadline, next(self._seq), conn))

    def _accept(self) -> None:
        for _ in range(self.request_queue_size):  # drain the queue, not one per wake-up
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors: free the oldest waiting one and come back
                log.warning("accept failed (%s); dropping the oldest pending connection", exc)
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._pending:
                    self._drop(next(iter(self._pending.values())))
                return
            sock.setblocking(False)
            try:  # answers are written whole; never hold a segment back for an ACK
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            if len(self._pending) >= self.cfg.max_pending_connections:
                oldest = next(iter(self._pending.values()))
                log.debug("%d connections pending; closing the oldest, %s", len(self._pending), oldest.addr[0])
                self._drop(oldest)
            self._adopt(_Conn(sock, addr), self.cfg.header_timeout_s)

    def _adopt(self, conn: _Conn, seconds: float) -> None:
        """Hold ``conn`` in the loop until its next request's head is complete (or ``seconds`` pass)."""
        self._pending[conn.sock] = conn
        self._set_deadline(conn, seconds)
        try:
            assert self._sel is not None
            self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        except (OSError, ValueError):  # the client is already gone
            self._drop(conn)
            return
        if conn.state == "headers" and conn.buf and conn.head_complete():
            self._head_complete(conn)

    def _release(self, conn: _Conn) -> None:
        """Stop holding ``conn`` in the loop (it goes to a handler, waits for a slot, or closes)."""
        self._pending.pop(conn.sock, None)
        if self._sel is not None:
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass

    def _drop(self, conn: _Conn) -> None:
        self._release(conn)
        _close(conn.sock)

    def _on_readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        if conn.state == "linger":
            return  # what a refused client still sends is dropped
        conn.buf += data
        if conn.head_complete():
            self._head_complete(conn)
        elif len(conn.buf) > MAX_HEADER_BYTES:
            self._refuse(
                conn,
                431,
                "Request Header Fields Too Large",
                _error_body(f"the request line and headers exceed {MAX_HEADER_BYTES} bytes", "headers_too_large"),
            )

    def _head_complete(self, conn: _Conn) -> None:
        self._release(conn)
        if self._active < self.cfg.max_connections:
            self._dispatch(conn)
        else:
            conn.state = "wait"
            self._set_deadline(conn, SLOT_WAIT_S)
            self._waiting.append(conn)

    def _dispatch(self, conn: _Conn) -> None:
        self._active += 1
        conn.state = "busy"
        self._busy.add(conn)
        self._jobs.put(conn)

    def _serve_waiting(self) -> None:
        while self._waiting and self._active < self.cfg.max_connections:
            self._dispatch(self._waiting.popleft())

    def _expire(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            deadline, _, conn = heapq.heappop(self._timers)
            if conn.deadline != deadline:
                continue  # a later state of the connection set a later deadline
            if conn.state == "linger" or (conn.state == "headers" and not conn.buf):
                if self._pending.get(conn.sock) is conn:
                    self._drop(conn)  # done lingering, or idle: nothing was asked, nothing to answer
            elif conn.state == "headers" and self._pending.get(conn.sock) is conn:
                t = self.cfg.header_timeout_s
                self._refuse(
                    conn,
                    408,
                    "Request Timeout",
                    _error_body(f"the request line and headers did not arrive within {t:g} s", "request_timeout"),
                )
            elif conn.state == "wait":
                self._waiting.remove(conn)
                self._refuse(
                    conn,
                    503,
                    "Service Unavailable",
                    _error_body("the server is at its connection limit; retry shortly", "server_busy", "server_error"),
                    {"Retry-After": "1"},
                )

    def _refuse(self, conn: _Conn, status: int, reason: str, body: bytes, extra: dict | None = None) -> None:
        """Answer from the loop (a short answer fits the socket's send buffer: no blocking) and close."""
        head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (extra or {}).items()) + "Connection: close\r\n\r\n"
        try:
            conn.sock.send(head.encode() + body)
        except OSError:
            pass
        self._linger(conn)

    def _linger(self, conn: _Conn) -> None:
        self._release(conn)
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            _close(conn.sock)
            return
        conn.state = "linger"
        conn.buf = bytearray()
        self._adopt(conn, LINGER_S)

    def _take_inbox(self) -> None:
        """Connections handler threads are done with: kept alive (back to reading heads), closed, or dropped."""
        while self._inbox:
            conn, action = self._inbox.popleft()
            self._busy.discard(conn)
            self._active -= 1
            if action == "keep":
                conn.sock.setblocking(False)
                conn.state = "headers"
                conn.scanned = 0
                self._adopt(conn, self.cfg.header_timeout_s)
            elif action == "close":
                self._linger(conn)
            else:
                _close(conn.sock)

    # ---- the handler threads ------------------------------------------------------------------------------
    def _handler_loop(self) -> None:
        while (conn := self._jobs.get()) is not None:
            try:
                action = self._handle(conn)
            except OSError:
                action = "drop"  # the client went away mid-answer
            except Exception:  # noqa: BLE001 - a handler bug must not cost the server a thread
                log.exception("request handling failed")
                action = "drop"
            with self._inbox_lock:
                if self._closed:
                    _close(conn.sock)
                    continue
                self._inbox.append((conn, action))
            self._wake()

    def _handle(self, conn: _Conn) -> str:
        conn.sock.setblocking(True)
        conn.sock.settimeout(self.cfg.timeout_s)
        reader = _Reader(conn.sock, conn.buf)
        handler = self._handler_class(conn.sock, conn.addr, self, reader)
        if handler.close_connection:
            return "close"
        conn.buf = reader.leftover()
        return "keep"


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


class _GenerationWorker:
    """The one thread that runs generations, in the order they were asked for: the model is used by one thread
    only, and that thread's OpenMP team is made once, its size set once (``threads``; 0 = torch's default)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._q: queue.SimpleQueue[tuple | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="chat-generation", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._q.put(None)
                self._thread = None

    def submit(self, fn: Callable[[], Any], should_stop: Callable[[], bool]) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._q.put((fut, fn, should_stop))
        return fut

    def _run(self) -> None:
        if self.threads or "torch" in sys.modules:
            import torch

            torch.set_num_threads(self.threads or torch.get_num_threads())
        while (job := self._q.get()) is not None:
            fut, fn, should_stop = job
            if not fut.set_running_or_notify_cancel():
                continue  # its request gave up while queued
            if should_stop():
                fut.set_exception(GenerationCancelled("stopped before it started"))
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - the request answers it; the worker lives on
                fut.set_exception(exc)


class ChatServer:
    """The HTTP server around one generator. ``start()`` serves in a background thread (tests);
    ``serve_forever()`` in the calling one (the CLI)."""

    def __init__(
        self, generator: Any, cfg: ServeConfig, host: str = "127.0.0.1", port: int = 8000, token: str | None = None
    ) -> None:
        self.generator = generator
        self.cfg = cfg
        self.token = token
        self.created = int(time.time())
        self.context_tokens = cfg.context_tokens or int(getattr(generator, "context_length", 0) or 0)
        handler = type("Handler", (_Handler,), {"server_ref": self})
        self.httpd = _ChatHTTPServer((host, port), handler, cfg)
        self.worker = _GenerationWorker(cfg.threads)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ChatServer:
        self.worker.start()
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="chat-server", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.worker.start()
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
        self.httpd.server_close()
        self.worker.stop()

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

    def chat(self, body: Any, client_gone: Callable[[], bool] | None = None) -> dict:
        """One chat completion, generated on the worker thread. ``client_gone`` (a callable) is polled while the
        request waits and while it generates: a client that left stops its generation (or never starts it); so
        does the request's time budget (504)."""
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

        def gone() -> bool:
            return bool(client_gone and client_gone())

        def should_stop() -> bool:
            return time.monotonic() > deadline or gone()

        def generate() -> list:
            return self.generator.complete(
                [messages],
                [images] if images else None,
                max_new_tokens=s["max_new_tokens"],
                temperature=s["temperature"],
                top_p=s["top_p"],
                n=s["n"],
                seed=s["seed"],
                should_stop=should_stop,
            )[0]

        fut = self.worker.submit(generate, should_stop)
        while not fut.done():
            concurrent.futures.wait([fut], timeout=_POLL_S)
            if fut.done():
                break
            if gone() and fut.cancel():
                raise ClientGone()  # left while queued: its generation never runs
            now = time.monotonic()
            # queued past the budget: dropped from the queue; generating past it: its should_stop says so at the
            # next token, and a backend that never asks gets the grace before the request is answered anyway
            if now > deadline and (fut.cancel() or now > deadline + _STOP_GRACE_S):
                raise timeout
        exc = fut.exception()
        if isinstance(exc, GenerationCancelled):
            if gone():
                raise ClientGone() from None
            raise timeout from None
        outs = fut.result()
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
    """One request on a handler thread: its head already read by the event loop (in ``rfile``), its token
    checked before its body is read."""

    server_ref: ChatServer
    protocol_version = "HTTP/1.1"
    server_version = "embodied-rft"

    def __init__(self, sock: socket.socket, addr: Any, server: Any, reader: _Reader) -> None:
        self._reader = reader
        self._expect_continue = False
        super().__init__(sock, addr, server)  # handles the request

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = self._reader
        self.wfile = _Writer(self.request)

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()  # one request; the event loop waits for the next

    def finish(self) -> None:
        pass

    def handle_expect_100(self) -> bool:
        self._expect_continue = True  # "100 Continue" only once the token and the size are accepted
        return True

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
        # head and body in one write: two small writes wait on the client's delayed ACK (Nagle), 40-200 ms a
        # request on a kept-alive connection
        self._headers_buffer.append(b"\r\n")
        self.wfile.write(b"".join(self._headers_buffer) + data)
        self._headers_buffer = []

    def _error(self, e: RequestError, extra: dict | None = None) -> None:
        self._send(
            e.status, {"error": {"message": e.message, "type": e.etype, "param": e.param, "code": e.code}}, extra
        )

    def _route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def _auth(self, close: bool = False) -> bool:
        """Whether the request carries the token; if not, answers 401 (and, with ``close``, closes the connection:
        a body left unread cannot be skipped)."""
        if self.server_ref.authorized(self.headers.get("Authorization")):
            return True
        self.close_connection = self.close_connection or close
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
            if not self._auth(close=True):  # from the headers alone: a wrong token's body is never read
                return
            body = self._read_body()  # read (or refuse) the body before answering, so the connection stays in sync
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
        if self._expect_continue:
            self.send_response_only(100)
            self.end_headers()
        t = self.server_ref.cfg.timeout_s
        self._reader.deadline = time.monotonic() + t  # the whole body, not each read
        try:
            data = self._reader.read(n)
        except TimeoutError:
            self.close_connection = True
            raise RequestError(
                408, f"the request body did not arrive within {t:g} s", None, "request_timeout"
            ) from None
        finally:
            self._reader.deadline = None
            self.connection.settimeout(t)
        if len(data) < n:
            self.close_connection = True
            raise RequestError(400, f"the body ended after {len(data)} of {n} bytes", None, "incomplete_body")
        return data

    def _client_gone(self) -> bool:
        """Whether the client closed its side (readable with nothing to read) while we generate."""
        try:
            poller = select.poll()  # not select.select: it fails on descriptors past 1023
            poller.register(self.connection, select.POLLIN)
            return bool(poller.poll(0)) and self.connection.recv(1, socket.MSG_PEEK) == b""
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
        "--timeout-s",
        type=float,
        default=ServeConfig.timeout_s,
        help="seconds a client may take to send a request body, in all",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=ServeConfig.header_timeout_s,
        help="seconds a connection may take to send its request line and headers, in all (408 past it); also the "
        "longest idle wait between kept-alive requests",
    )
    p.add_argument("--max-prompt-tokens", type=int, default=0, help="longest prompt, tokens (0 = context - max_tokens)")
    p.add_argument(
        "--request-budget-s",
        type=float,
        default=ServeConfig.request_budget_s,
        help="seconds one request may wait and generate before it gets 504 and its generation stops",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=ServeConfig.max_connections,
        help="requests served at once, headers complete (more get 503); also the handler threads",
    )
    p.add_argument(
        "--max-pending-connections",
        type=int,
        default=ServeConfig.max_pending_connections,
        help="connections still sending headers or idle between requests (one more closes the oldest)",
    )
    p.add_argument(
        "--backlog", type=int, default=ServeConfig.backlog, help="listen() backlog: connects queued before accept"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=ServeConfig.threads,
        help="torch intra-op threads of the generation worker (0 = torch's default)",
    )
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
            header_timeout_s=a.header_timeout,
            max_pending_connections=a.max_pending_connections,
            backlog=a.backlog,
            threads=a.threads,
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
        server.shutdown()
        gen.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
