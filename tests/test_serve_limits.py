"""What a hostile or careless client can do to the server, and what it gets back: a 400
``context_length_exceeded`` for a prompt the model cannot hold, a 4xx for every client mistake, generation stopped
when the client leaves or the request's time runs out, a bounded number of requests at once, case-insensitive auth,
and no public bind without a token. Connections (issue 63): a burst of fresh connections is queued by a listen
backlog of 128 or more, not reset; sockets trickling their headers neither take request slots nor outlive the
header deadline; the token is checked from the headers before any body is read; generation runs on one worker
thread whatever the connection pattern."""

from __future__ import annotations

import collections
import json
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from embodied_rft.generation import GenerationConfig, make_generator
from embodied_rft.generation.base import Completion, GenerationCancelled
from embodied_rft.tools.serve import ChatServer, ServeConfig, _parse_args, main
from tests.helpers import tiny_checkpoints as tc

TOKEN = "limits-token"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with tc.one_thread():
        yield


@pytest.fixture(scope="module")
def gen():
    g = make_generator(tc.fitted_model(), GenerationConfig(device="cpu", max_new_tokens=64, batch_size=1))
    yield g
    g.close()


def _server(generator, **kw) -> ChatServer:
    cfg = ServeConfig(model_name="m", max_tokens_cap=64, default_max_tokens=16, **kw)
    return ChatServer(generator, cfg, "127.0.0.1", 0, token=TOKEN).start()


def _post(server, body: bytes | dict, auth: str = f"Bearer {TOKEN}", timeout: float = 30, length: int | None = None):
    """(status, parsed JSON) of a raw POST; ``length`` overrides Content-Length (a stalled body)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    u = urlparse(server.url)
    with socket.create_connection((u.hostname, u.port), timeout=timeout) as s:
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Type: "
            f"application/json\r\nContent-Length: {len(raw) if length is None else length}\r\nConnection: close\r\n\r\n"
        )
        s.sendall(head.encode() + raw)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.split(b"\r\n\r\n", 1)[1] or b"{}")


def _chat(text: str, **kw) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **kw}


class SlowGenerator:
    """A generator that takes ``step_s`` per token for up to ``tokens`` tokens and honours ``should_stop``
    exactly as the real backends do (polled once per token; GenerationCancelled when it says stop)."""

    supports_images = False

    def __init__(self, tokens: int = 400, step_s: float = 0.01) -> None:
        self.tokens, self.step_s = tokens, step_s
        self.stopped = threading.Event()
        self.steps = 0

    def complete(
        self, batch, images=None, *, max_new_tokens=None, temperature=None, top_p=None, n=1, seed=None, should_stop=None
    ):
        for _ in range(self.tokens):
            time.sleep(self.step_s)
            self.steps += 1
            if should_stop is not None and should_stop():
                self.stopped.set()
                raise GenerationCancelled("stopped")
        return [[Completion(text="x", prompt_tokens=3, completion_tokens=1, finish_reason="stop")]]


def test_a_prompt_beyond_the_context_is_refused_with_openai_code_fast(gen):
    server = _server(gen)
    try:
        assert server.context_tokens == gen.model.config.max_position_embeddings
        t0 = time.monotonic()
        status, body = _post(server, _chat("pick up the apple " * 4000, max_tokens=16))
        assert status == 400 and body["error"]["code"] == "context_length_exceeded"
        assert body["error"]["param"] == "messages" and "maximum context length" in body["error"]["message"]
        assert time.monotonic() - t0 < 20  # refused after tokenizing, never generated
        # a prompt that fits, with a completion that does not, is refused too; the same prompt with a small
        # max_tokens is answered
        n = gen.count_prompt_tokens([{"role": "user", "content": "find a Apple"}])
        status, body = _post(server, _chat("find a Apple", max_tokens=64))
        assert status == 200 and body["usage"]["prompt_tokens"] == n
    finally:
        server.shutdown()
    capped = _server(gen, max_prompt_tokens=n - 1)
    try:
        status, body = _post(capped, _chat("find a Apple"))
        assert (
            status == 400
            and body["error"]["code"] == "context_length_exceeded"
            and f"{n} tokens" in body["error"]["message"]
        )
    finally:
        capped.shutdown()


def test_client_mistakes_are_4xx_not_500(gen):
    server = _server(gen, timeout_s=1.0)
    try:
        lone = b'{"model": "m", "messages": [{"role": "user", "content": "a \\ud800 b"}]}'
        status, body = _post(server, lone)
        assert status == 400 and "messages[0].content" in body["error"]["message"]
        nested = b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        status, body = _post(server, nested)
        assert status == 400 and "nested too deeply" in body["error"]["message"]
        t0 = time.monotonic()
        status, body = _post(server, b'{"model": "m"', length=200)  # the rest of the body never comes
        assert status == 408 and body["error"]["code"] == "request_timeout" and time.monotonic() - t0 < 10
        # the server still answers
        assert _post(server, _chat("find a Apple", max_tokens=4))[0] == 200
    finally:
        server.shutdown()


def test_the_bearer_scheme_is_case_insensitive_and_the_token_still_checked(gen):
    server = _server(gen)
    try:
        assert _post(server, _chat("find a Apple", max_tokens=2), auth=f"bearer {TOKEN}")[0] == 200
        assert _post(server, _chat("find a Apple", max_tokens=2), auth=f"BEARER {TOKEN}")[0] == 200
        assert _post(server, _chat("find a Apple", max_tokens=2), auth="bearer wrong")[0] == 401
        assert _post(server, _chat("find a Apple", max_tokens=2), auth=f"Basic {TOKEN}")[0] == 401
    finally:
        server.shutdown()


def test_a_request_past_its_budget_gets_504_and_its_generation_stops():
    slow = SlowGenerator(tokens=1000, step_s=0.01)  # 10 s of "generation"
    server = _server(slow, request_budget_s=0.5)
    try:
        t0 = time.monotonic()
        status, body = _post(server, _chat("hi"))
        assert status == 504 and body["error"]["code"] == "timeout"
        assert slow.stopped.is_set() and time.monotonic() - t0 < 3 and slow.steps < 300
    finally:
        server.shutdown()


def test_a_client_that_leaves_stops_its_generation():
    slow = SlowGenerator(tokens=3000, step_s=0.01)  # 30 s
    server = _server(slow, request_budget_s=60)
    try:
        u = urlparse(server.url)
        raw = json.dumps(_chat("hi")).encode()
        s = socket.create_connection((u.hostname, u.port))
        s.sendall(
            (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Content-Length: {len(raw)}\r\n\r\n"
            ).encode()
            + raw
        )
        time.sleep(0.3)
        s.close()  # gone, like a client past its own timeout
        assert slow.stopped.wait(5) and slow.steps < 1000
    finally:
        server.shutdown()


def _stalled_request(server, n: int = 100) -> socket.socket:
    """A connection whose request head is complete and whose body never comes: it holds a request slot."""
    u = urlparse(server.url)
    s = socket.create_connection((u.hostname, u.port))
    s.sendall(
        (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Length: {n}\r\n\r\n"
        ).encode()
    )
    return s


def test_requests_beyond_the_limit_get_503_at_once(gen):
    server = _server(gen, max_connections=2, timeout_s=5)
    held = [_stalled_request(server) for _ in range(2)]  # both slots: heads complete, bodies awaited
    try:
        time.sleep(0.2)
        t0 = time.monotonic()
        status, body = _post(server, _chat("find a Apple", max_tokens=2), timeout=5)
        assert status == 503 and body["error"]["code"] == "server_busy" and time.monotonic() - t0 < 2
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    try:
        assert _post(server, _chat("find a Apple", max_tokens=2))[0] == 200  # slots come back
    finally:
        server.shutdown()


# ---- connections (issue 63) ---------------------------------------------------------------------------------
def _kernel_backlog(sock: socket.socket) -> int:
    """The accept-queue limit the kernel holds for a listening socket: Linux's tcp_info reports it in
    ``tcpi_sacked`` (offset 28) for a socket in LISTEN."""
    return struct.unpack_from("I", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104), 28)[0]


def test_the_listen_backlog_is_at_least_128_by_default_and_configurable():
    default = ServeConfig().backlog
    assert default >= 128
    assert _parse_args(["--model", "m"]).backlog == default
    assert _parse_args(["--model", "m", "--backlog", "300"]).backlog == 300
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text()) if sys.platform == "linux" else None
    for cfg in (ServeConfig(model_name="m"), ServeConfig(model_name="m", backlog=200)):
        server = ChatServer(object(), cfg, "127.0.0.1", 0)
        try:
            assert server.httpd.listen_backlog == cfg.backlog  # what server_activate passed to listen()
            if somaxconn is not None:
                assert _kernel_backlog(server.httpd.socket) == min(cfg.backlog, somaxconn)
        finally:
            server.shutdown()
    assert main(["--model", str(tc.text_model()), "--port", "0", "--backlog", "0"]) == 2


# 32 clients in a process of their own (its own GIL, so their connects really do arrive at once), started together,
# each sending 5 requests with http.client, a new connection for each; prints every request's status or error
_BURST_CLIENTS = """
import http.client, json, sys, threading
port, token = int(sys.argv[1]), sys.argv[2]
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "find a Apple"}], "max_tokens": 2})
out, start = [], threading.Barrier(32)
def client():
    start.wait()
    for _ in range(5):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Authorization": "Bearer " + token})
            resp = conn.getresponse()
            out.append(resp.status if json.loads(resp.read())["usage"]["completion_tokens"] == 2 else "short")
        except (OSError, http.client.HTTPException) as exc:
            out.append(type(exc).__name__)
        finally:
            conn.close()
threads = [threading.Thread(target=client) for _ in range(32)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(out))
"""


def test_a_burst_of_fresh_connections_is_answered_in_full(gen):
    """32 clients x 5 requests, a new connection per request, all at once: 160 of 160 answered. (A backlog of 5
    reset 10-34 of them here: past it the kernel answers SYNs with cookies, and a cookie's ACK that finds the
    accept queue full is reset; the backlog is now 512, drained by one accept loop.)"""
    server = _server(gen)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _BURST_CLIENTS, str(urlparse(server.url).port), TOKEN],
            capture_output=True,
            text=True,
            timeout=300,
        )
        statuses = json.loads(done.stdout)
        assert len(statuses) == 160 and statuses.count(200) == 160, collections.Counter(map(str, statuses))
    finally:
        server.shutdown()


def _tricklers(server, n: int, stop: threading.Event, every_s: float, sent: list[int]) -> threading.Thread:
    """``n`` connections, no token, that send a request head one byte every ``every_s`` seconds; ``sent[i]``
    counts the bytes connection i got out before the server cut it (or ``stop``)."""
    u = urlparse(server.url)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 400 + b"\r\n\r\n"
    socks = [socket.create_connection((u.hostname, u.port)) for _ in range(n)]
    sent[:] = [0] * n

    def run() -> None:
        try:
            while not stop.is_set():
                for i, s in enumerate(socks):
                    if sent[i] >= 0 and sent[i] < len(head) - 4:  # never completes the head
                        try:
                            s.sendall(head[sent[i] : sent[i] + 1])
                            sent[i] += 1
                        except OSError:
                            sent[i] = -sent[i] - 1  # cut: -(bytes sent) - 1
                stop.wait(every_s)
        finally:
            for s in socks:
                s.close()

    t = threading.Thread(target=run, daemon=True)
    t.socks = socks  # type: ignore[attr-defined]
    t.start()
    return t


def test_trickling_sockets_do_not_lock_out_a_valid_request(gen):
    """32 connections trickle their headers (no token) while their deadline is far off: they hold no request
    slot, and a request with the token is answered 200 while all 32 are still open."""
    server = _server(gen, max_connections=32, header_timeout_s=60)
    stop, sent = threading.Event(), []
    t = _tricklers(server, 32, stop, 0.2, sent)
    try:
        time.sleep(0.6)
        status, body = _post(server, _chat("find a Apple", max_tokens=2), timeout=30)
        assert status == 200 and body["usage"]["completion_tokens"] == 2
        assert all(n > 0 for n in sent)  # every trickler still connected and sending
        for s in t.socks:  # and none was answered or closed: nothing to read yet
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
    finally:
        stop.set()
        t.join(5)
        server.shutdown()


def test_a_trickler_is_cut_at_the_header_deadline_not_per_byte(gen):
    """A byte every 0.2 s keeps a per-read timeout of 0.5 s satisfied for ever; the header deadline (1 s in all)
    cuts the connection with 408 after about 5 bytes of its 440-byte head (the client gives up at 40), and the
    server answers the next client."""
    server = _server(gen, header_timeout_s=1.0, timeout_s=0.5)
    u = urlparse(server.url)
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 400 + b"\r\n\r\n"
    sent, answer = 0, b""
    try:
        s.setblocking(False)
        while sent < 40:
            try:
                chunk = s.recv(65536)
                answer += chunk
                if not chunk:
                    break  # closed
                continue
            except BlockingIOError:
                pass
            try:
                s.send(head[sent : sent + 1])
            except OSError:
                break
            sent += 1
            time.sleep(0.2)
        s.settimeout(10)
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except OSError:
            pass
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
        assert 0 < sent < 40  # cut after ~5 bytes (1 s at 5 bytes/s), far short of the head
        assert _post(server, _chat("find a Apple", max_tokens=2))[0] == 200
    finally:
        s.close()
        server.shutdown()


def _head_only(server, auth: str, length: int, extra: str = "") -> socket.socket:
    u = urlparse(server.url)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    s.sendall(
        (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n"
        ).encode()
    )
    return s


def _read_answer(s: socket.socket) -> tuple[int, dict, bytes]:
    """(status, JSON body, everything read) of one answer that closes the connection."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return int(data.split(b" ", 2)[1]), json.loads(data.split(b"\r\n\r\n", 1)[1]), data


def test_the_token_is_checked_before_the_body_is_read(gen):
    """A wrong token with a large body that stalls gets 401 from its headers alone (the server waits 30 s for a
    body it means to read), and no ``100 Continue`` invites the body; the right token does get it."""
    server = _server(gen, timeout_s=30)
    try:
        s = _head_only(server, "Bearer wrong", 1_000_000)
        s.sendall(b'{"model": "m", "mess')  # and then nothing: a reader of the body would wait 30 s
        status, body, _ = _read_answer(s)  # the socket gives up after 10 s
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        s.close()
        s = _head_only(server, "Bearer wrong", 1_000_000, "Expect: 100-continue\r\n")
        status, body, raw = _read_answer(s)
        assert status == 401 and b"100 Continue" not in raw
        s.close()
        payload = json.dumps(_chat("find a Apple", max_tokens=2)).encode()
        s = _head_only(server, f"Bearer {TOKEN}", len(payload), "Expect: 100-continue\r\nConnection: close\r\n")
        assert s.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(payload)
        status, body, _ = _read_answer(s)
        assert status == 200 and body["usage"]["completion_tokens"] == 2
        s.close()
    finally:
        server.shutdown()


class RecordingGenerator:
    """Answers at once and records, per call, the thread it ran on, torch's thread count there, and how many
    calls overlapped."""

    supports_images = False

    def __init__(self) -> None:
        self.threads: list[tuple[int, str, int]] = []
        self.running = self.most_at_once = 0
        self._lock = threading.Lock()

    def complete(
        self, batch, images=None, *, max_new_tokens=None, temperature=None, top_p=None, n=1, seed=None, should_stop=None
    ):
        import torch

        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(0.005)
        cur = threading.current_thread()
        self.threads.append((cur.ident, cur.name, torch.get_num_threads()))
        with self._lock:
            self.running -= 1
        text = batch[0][-1]["content"]
        return [[Completion(text=text, prompt_tokens=3, completion_tokens=1, finish_reason="stop")]]


def test_generation_runs_on_one_worker_thread_with_its_thread_count_set_there():
    import torch

    rec = RecordingGenerator()
    server = _server(rec, threads=2)
    try:

        def client(k: int) -> None:
            for j in range(3):  # a fresh connection per request
                assert _post(server, _chat(f"c{k}-{j}"))[1]["choices"][0]["message"]["content"] == f"c{k}-{j}"

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(rec.threads) == 12 and rec.most_at_once == 1
        assert {(ident, name) for ident, name, _ in rec.threads} == {(server.worker._thread.ident, "chat-generation")}
        assert {n for _, _, n in rec.threads} == {2}
    finally:
        server.shutdown()
        torch.set_num_threads(1)


def test_pipelined_requests_on_one_kept_alive_connection_are_answered_in_order():
    """Three requests in one write on one connection: three answers in order; the connection, then idle past the
    header deadline, is closed without a byte (nothing was asked, so no 408)."""
    server = _server(RecordingGenerator(), header_timeout_s=1.0)
    u = urlparse(server.url)
    reqs = b""
    for k in range(3):
        raw = json.dumps(_chat(f"r{k}")).encode()
        reqs += (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Length: {len(raw)}\r\n\r\n"
        ).encode() + raw
    try:
        with socket.create_connection((u.hostname, u.port), timeout=10) as s:
            s.sendall(reqs)  # all three at once, in one write
            data, answers = b"", []
            while len(answers) < 3:
                data += s.recv(65536)
                while b"\r\n\r\n" in data:
                    head, rest = data.split(b"\r\n\r\n", 1)
                    n = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                    if len(rest) < n:
                        break
                    answers.append((int(head.split(b" ", 2)[1]), json.loads(rest[:n])))
                    data = rest[n:]
            while chunk := s.recv(65536):  # EOF once idle past the deadline (the socket gives up after 10 s)
                data += chunk
        assert data == b""
        assert [(st, b["choices"][0]["message"]["content"]) for st, b in answers] == [
            (200, "r0"),
            (200, "r1"),
            (200, "r2"),
        ]
    finally:
        server.shutdown()


def test_pending_connections_have_their_own_cap_and_the_oldest_goes_first():
    """With room for 4 connections still sending headers, 4 silent ones and then a request: the oldest silent one
    is closed to make room, the request is answered, the 3 others stay open."""
    server = _server(RecordingGenerator(), max_pending_connections=4, max_connections=1)
    u = urlparse(server.url)
    silent = []
    try:
        for _ in range(4):
            silent.append(socket.create_connection((u.hostname, u.port), timeout=10))
            time.sleep(0.05)  # accepted in this order
        status, body = _post(server, _chat("through"))
        assert status == 200 and body["choices"][0]["message"]["content"] == "through"
        assert silent[0].recv(1) == b""  # closed, nothing sent
        for s in silent[1:]:
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
    finally:
        for s in silent:
            s.close()
        server.shutdown()


def test_a_head_past_its_size_limit_gets_431():
    from embodied_rft.tools.serve import MAX_HEADER_BYTES

    server = _server(RecordingGenerator())
    u = urlparse(server.url)
    try:
        with socket.create_connection((u.hostname, u.port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nX-Pad: " + b"a" * (MAX_HEADER_BYTES + 10))
            status, body, _ = _read_answer(s)
        assert status == 431 and body["error"]["code"] == "headers_too_large"
        assert _post(server, _chat("after"))[0] == 200
    finally:
        server.shutdown()


def test_the_real_backends_stop_when_asked(gen):
    calls = []

    def stop_after_3() -> bool:
        calls.append(1)
        return len(calls) > 3

    msgs = [{"role": "user", "content": "find a Apple"}]
    with pytest.raises(GenerationCancelled):
        gen.complete([msgs], max_new_tokens=64, temperature=0.0, should_stop=stop_after_3)
    assert len(calls) == 4
    fast = make_generator(tc.fitted_model(), GenerationConfig(backend="fast", device="cpu", max_new_tokens=64))
    calls.clear()
    with pytest.raises(GenerationCancelled):
        fast.complete([msgs], max_new_tokens=64, temperature=0.0, should_stop=stop_after_3)
    assert len(calls) == 4


def test_a_public_bind_without_a_token_is_refused(capsys):
    assert main(["--model", str(tc.fitted_model()), "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "needs --token-env" in capsys.readouterr().err


@pytest.mark.slow
def test_small_requests_stay_fast_beside_an_oversized_one_and_a_crowd(gen):
    """Load (loopback, bounded): 8 clients x 5 small requests while oversized prompts keep arriving; every small
    request is answered and none waits behind the oversized ones (refused after tokenizing, never generated)."""
    server = _server(gen, max_connections=16)
    lat: list[float] = []
    errors: list[int] = []

    def small() -> None:
        for _ in range(5):
            t0 = time.monotonic()
            status, _ = _post(server, _chat("find a Apple", max_tokens=8), timeout=60)
            lat.append(time.monotonic() - t0)
            if status != 200:
                errors.append(status)

    def big() -> None:
        for _ in range(3):
            status, body = _post(server, _chat("pick up the apple " * 30000, max_tokens=8), timeout=60)
            assert status == 400 and body["error"]["code"] == "context_length_exceeded"

    try:
        threads = [threading.Thread(target=small) for _ in range(8)] + [threading.Thread(target=big)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors and len(lat) == 40
        assert max(lat) < 30  # bounded: 40 tiny generations one at a time, no 40-second stall behind a big prompt
    finally:
        server.shutdown()
