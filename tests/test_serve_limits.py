"""What a hostile or careless client can do to the server, and what it gets back: a 400
``context_length_exceeded`` for a prompt the model cannot hold, a 4xx for every client mistake, generation stopped
when the client leaves or the request's time runs out, a bounded number of connections, case-insensitive auth, and
no public bind without a token."""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlparse

import pytest

from embodied_rft.generation import GenerationConfig, make_generator
from embodied_rft.generation.base import Completion, GenerationCancelled
from embodied_rft.tools.serve import ChatServer, ServeConfig, main
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


def test_connections_beyond_the_limit_get_503_at_once(gen):
    server = _server(gen, max_connections=2, timeout_s=5)
    u = urlparse(server.url)
    idle = [socket.create_connection((u.hostname, u.port)) for _ in range(2)]  # hold both slots
    try:
        time.sleep(0.2)
        t0 = time.monotonic()
        status, body = _post(server, _chat("find a Apple", max_tokens=2), timeout=5)
        assert status == 503 and body["error"]["code"] == "server_busy" and time.monotonic() - t0 < 2
    finally:
        for s in idle:
            s.close()
    time.sleep(0.3)
    try:
        assert _post(server, _chat("find a Apple", max_tokens=2))[0] == 200  # slots come back
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
