"""A loopback OpenAI-compatible chat server that injects faults, for testing the ``openai`` teacher.

It listens on 127.0.0.1 on a random port, answers ``POST /v1/chat/completions`` from an ``answer(body)``
callable, and before answering a request may fail it on purpose: timeouts (a hang), 429 with
``Retry-After`` or ``retry-after-ms``, 500/503, a 200 whose body is truncated mid-transfer, a 200 whose body
is not JSON, and rate-limit storms (a run of consecutive requests all answered 429). Which tries fail is decided
per request key (sha256 of messages, model, sampling params, seed) and per try, deterministically from a
seed, so a test knows each answer is eventually served; the kinds are dealt in turn so all of them occur. Error bodies echo the request's Authorization header, as
a careless endpoint might, so tests can prove the client never writes the key anywhere.

Bounded by construction: threads are daemons, a hang waits at most ``hang_s`` (and ends at ``stop()``),
and after ``max_requests`` requests every request gets a non-retryable 400.
"""

from __future__ import annotations

import collections
import hashlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# transient faults a client must ride out; "401" and "400" (not in the default mix) are for fatal-error tests
FAULT_KINDS = ("hang", "429", "429ms", "500", "503", "truncated", "nonjson", "html")


def request_key(body: dict) -> str:
    sig = {k: body.get(k) for k in ("model", "messages", "temperature", "top_p", "max_tokens", "seed")}
    return hashlib.sha256(json.dumps(sig, sort_keys=True).encode()).hexdigest()


def _h(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x00".join(map(str, parts)).encode()).digest()[:8], "big")


@dataclass
class FaultPlan:
    """Which tries fail: a key is faulty with probability ``rate`` (decided by hashing it); a faulty key's
    first 1..max_per_key tries fail. The kinds are dealt in turn from ``kinds`` (the n-th fault served gets
    ``kinds[n % len(kinds)]``), so every kind occurs once enough faults were served, whatever the prompts
    hash to. Requests number storm_start .. storm_start+storm_len-1 (global order) all get 429 with
    Retry-After ``storm_retry_after``."""

    seed: int = 0
    rate: float = 0.0
    kinds: tuple[str, ...] = FAULT_KINDS
    max_per_key: int = 2
    storm_start: int | None = None
    storm_len: int = 0
    storm_retry_after: str = "1"

    def fault(self, key: str, n_key: int, n_global: int, n_faults_served: int) -> str | None:
        if self.storm_start is not None and self.storm_start <= n_global < self.storm_start + self.storm_len:
            return "storm"
        if self.rate <= 0 or (_h(self.seed, key, "faulty") % 10_000) >= self.rate * 10_000:
            return None
        n_faults = 1 + _h(self.seed, key, "n") % self.max_per_key
        if n_key >= n_faults:
            return None
        return self.kinds[n_faults_served % len(self.kinds)]


@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    ok: collections.Counter = field(default_factory=collections.Counter)  # key -> answers served in full
    faults: collections.Counter = field(default_factory=collections.Counter)  # kind -> count
    tries: collections.Counter = field(default_factory=collections.Counter)  # key -> requests seen
    log: list = field(default_factory=list)  # (monotonic time, key, outcome)
    auth: set = field(default_factory=set)  # Authorization headers seen


class FaultServer:
    def __init__(
        self,
        answer: Callable[[dict], str],
        plan: FaultPlan | None = None,
        *,
        ok_delay_s: float = 0.0,
        hang_s: float = 5.0,
        retry_after: str = "1",
        retry_after_ms: str = "150",
        max_requests: int = 5000,
    ):
        self.answer = answer
        self.plan = plan or FaultPlan()
        self.ok_delay_s = ok_delay_s
        self.hang_s = hang_s
        self.retry_after = retry_after
        self.retry_after_ms = retry_after_ms
        self.max_requests = max_requests
        self.stats = Stats()
        self._n_faults = 0
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                server._handle(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> FaultServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling -------------------------------------------------------------------------------
    def _send(
        self,
        h: BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        ctype: str = "application/json",
        headers: dict[str, str] | None = None,
        send_bytes: int | None = None,
    ) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body if send_bytes is None else body[:send_bytes])
        h.wfile.flush()

    def _error(self, h: BaseHTTPRequestHandler, status: int, auth: str, headers: dict[str, str] | None = None) -> None:
        # a careless endpoint that quotes the credentials it was given
        body = json.dumps({"error": {"message": f"simulated {status}; request authorised by '{auth}'", "code": status}})
        self._send(h, status, body.encode(), headers=headers)

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length", "0"))
        raw = h.rfile.read(length)
        auth = h.headers.get("Authorization", "")
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send(h, 400, b'{"error": {"message": "bad request body"}}')
            return
        key = request_key(body)
        with self.stats.lock:
            n_global = self.stats.requests
            self.stats.requests += 1
            n_key = self.stats.tries[key]
            self.stats.tries[key] += 1
            self.stats.auth.add(auth)
            kind = None if n_global >= self.max_requests else self.plan.fault(key, n_key, n_global, self._n_faults)
            self._n_faults += kind is not None
            self.stats.log.append((time.monotonic(), key, kind or "ok"))
            if kind is not None:
                self.stats.faults[kind] += 1
        if n_global >= self.max_requests:
            self._error(h, 400, auth)
            return
        if kind == "hang":
            self._stop.wait(self.hang_s)  # the client times out first; then drop the connection unanswered
            h.close_connection = True
            try:
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if kind in ("429", "storm"):
            self._error(
                h, 429, auth, {"Retry-After": self.plan.storm_retry_after if kind == "storm" else self.retry_after}
            )
            return
        if kind == "429ms":
            self._error(h, 429, auth, {"retry-after-ms": self.retry_after_ms})
            return
        if kind in ("500", "503", "401", "400"):
            self._error(h, int(kind), auth)
            return
        text = self.answer(body)
        payload = json.dumps(
            {
                "id": f"chatcmpl-{key[:12]}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "test"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": len(raw) // 4,
                    "completion_tokens": len(text) // 4,
                    "total_tokens": len(raw) // 4 + len(text) // 4,
                },
            }
        ).encode()
        if kind == "truncated":
            h.close_connection = True
            self._send(h, 200, payload, send_bytes=len(payload) // 2)
            return
        if kind == "nonjson":
            self._send(h, 200, b'{"id": "chatcmpl-x", "choices": [{"index": 0, "mess')
            return
        if kind == "html":
            self._send(h, 200, b"<html><body>502 Bad Gateway</body></html>", ctype="text/html")
            return
        if self.ok_delay_s:
            time.sleep(self.ok_delay_s)
        self._send(h, 200, payload)
        with self.stats.lock:
            self.stats.ok[key] += 1


def openai_teacher(url: str, model: str, key_env: str, **openai: object) -> dict:
    """A ``teacher:`` section for the OpenAI-compatible backend against a loopback :class:`FaultServer`: short
    timeouts and fast retries, so injected faults cost milliseconds; ``openai`` adds or replaces keys of its
    ``openai:`` block (seed, temperature, ...)."""
    return {
        "backend": "openai",
        "openai": {
            "base_url": url,
            "model": model,
            "api_key_env": key_env,
            "timeout_s": 0.5,
            "concurrency": 4,
            "requests_per_minute": 0,
            **openai,
        },
        "retry": {
            "max_retries": 8,
            "backoff_base_s": 0.02,
            "backoff_max_s": 0.2,
            "max_retry_after_s": 5,
            "max_total_s": 20,
        },
    }
