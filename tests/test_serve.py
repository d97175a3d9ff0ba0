"""The OpenAI-compatible server, exercised with the real ``openai`` client and with raw HTTP for the
requests a client library would never send (malformed JSON, missing or oversized bodies)."""

from __future__ import annotations

import base64
import http.client
import io
import json
from urllib.parse import urlparse

import pytest

from embodied_rft.generation import GenerationConfig, make_generator
from embodied_rft.tools.serve import (
    ChatServer,
    RequestError,
    ServeConfig,
    main,
    parse_chat_request,
)
from tests.helpers import tiny_checkpoints as tc

openai = pytest.importorskip("openai")

TOKEN = "s3cret-token-for-tests"
CAP = 160


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with tc.one_thread():
        yield


@pytest.fixture(scope="module")
def text_server():
    gen = make_generator(tc.fitted_model(), GenerationConfig(device="cpu", max_new_tokens=CAP, batch_size=1))
    cfg = ServeConfig(
        model_name="tiny-planner", max_request_bytes=64 * 1024, max_tokens_cap=CAP, default_max_tokens=CAP
    )
    server = ChatServer(gen, cfg, "127.0.0.1", 0, token=TOKEN).start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def vl_server():
    gen = make_generator(tc.vl_model(), GenerationConfig(device="cpu", max_new_tokens=8, batch_size=1))
    cfg = ServeConfig(model_name="Qwen/Qwen2.5-VL-7B-Instruct", max_tokens_cap=8, max_image_pixels=512 * 512)
    server = ChatServer(gen, cfg, "127.0.0.1", 0).start()
    yield server
    server.shutdown()


def _client(server, key=TOKEN):
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=60)


def _data_url(png: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(png).decode()}"


# ---- the openai client -------------------------------------------------------------------------------
def test_text_chat_with_the_openai_client(text_server):
    client = _client(text_server)
    assert [m.id for m in client.models.list().data] == ["tiny-planner"]
    ep = tc.episodes()[0]
    resp = client.chat.completions.create(
        model="tiny-planner", messages=tc.first_prompt(ep), temperature=0, max_tokens=CAP
    )
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == tc.expert_response(ep)  # the fitted answer, exactly
    assert choice.finish_reason == "stop"
    assert resp.model == "tiny-planner" and resp.object == "chat.completion"
    assert resp.usage.prompt_tokens > 100 and 0 < resp.usage.completion_tokens < CAP
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    # content given as text parts reads the same as plain strings
    parts = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in tc.first_prompt(ep)]
    again = client.chat.completions.create(model="tiny-planner", messages=parts, temperature=0)
    assert again.choices[0].message.content == choice.message.content


def test_max_tokens_is_capped_n_and_stop_work(text_server):
    client = _client(text_server)
    ep = tc.episodes()[0]
    short = client.chat.completions.create(
        model="tiny-planner", messages=tc.first_prompt(ep), temperature=0, max_tokens=5
    )
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 5
    capped = client.chat.completions.create(
        model="tiny-planner", messages=[{"role": "user", "content": "hello"}], max_tokens=10**6, temperature=0
    )
    assert capped.usage.completion_tokens <= CAP
    stopped = client.chat.completions.create(
        model="tiny-planner", messages=tc.first_prompt(ep), temperature=0, stop=['"executable_plan"']
    )
    text = stopped.choices[0].message.content
    assert text == tc.expert_response(ep).split('"executable_plan"')[0] and stopped.choices[0].finish_reason == "stop"
    sampled = client.chat.completions.create(
        model="tiny-planner", messages=[{"role": "user", "content": "hi"}], temperature=1.0, n=3, seed=7, max_tokens=6
    )
    assert [c.index for c in sampled.choices] == [0, 1, 2]


def test_auth_and_model_errors(text_server):
    with pytest.raises(openai.AuthenticationError) as e:
        _client(text_server, key="wrong").models.list()
    assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.NotFoundError, match="tiny-planner"):
        _client(text_server).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as e:
        _client(text_server).chat.completions.create(
            model="tiny-planner",
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": _data_url(tc.solid_png())}}]}
            ],
        )
    assert e.value.body["code"] == "images_not_supported"


def test_image_messages_the_way_embodiedbench_sends_them(vl_server):
    client = openai.OpenAI(base_url=vl_server.url, api_key="unused", max_retries=0, timeout=60)
    # EB re-labels its PNG frames as image/jpeg (convert_format_2gemini): the bytes decide, not the label
    img = {"type": "image_url", "image_url": {"url": _data_url(tc.solid_png(), "image/jpeg")}}
    text = {"type": "text", "text": "## Now the human instruction is: put a mug in the sink.\nPlan in JSON."}
    with_img = client.chat.completions.create(
        model="Qwen/Qwen2.5-VL-7B-Instruct",
        messages=[{"role": "user", "content": [img, text]}],
        temperature=0,
        max_tokens=2048,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "embodied_planning", "schema": {"type": "object"}},
        },
    )
    without = client.chat.completions.create(
        model="Qwen/Qwen2.5-VL-7B-Instruct",
        messages=[{"role": "user", "content": [text]}],
        temperature=0,
        max_tokens=2048,
    )
    assert isinstance(with_img.choices[0].message.content, str)
    assert with_img.usage.completion_tokens <= 8  # max_tokens 2048 capped at 8
    assert with_img.usage.prompt_tokens > without.usage.prompt_tokens  # the frame became vision tokens
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(
            model="Qwen/Qwen2.5-VL-7B-Instruct",
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": _data_url(tc.solid_png((600, 600)))}}],
                }
            ],
        )
    assert e.value.status_code == 413 and e.value.body["code"] == "image_too_large"


# ---- raw HTTP: what no client library sends ------------------------------------------------------------
def _raw(server, method, path, body: bytes | None = None, headers: dict | None = None, token=TOKEN):
    u = urlparse(server.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    h = {"Authorization": f"Bearer {token}"} if token else {}
    h.update(headers or {})
    if body is not None and "Content-Length" not in h and h.get("Transfer-Encoding") is None:
        h["Content-Length"] = str(len(body))
    conn.putrequest(method, path)
    for k, v in h.items():
        conn.putheader(k, v)
    conn.endheaders()
    if body:
        try:
            conn.send(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server refused before reading; its answer is still there to read
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data)


def _chat(messages, **extra) -> bytes:
    return json.dumps({"model": "tiny-planner", "messages": messages, **extra}).encode()


@pytest.mark.parametrize(
    "body, status, param",
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (json.dumps({"model": "tiny-planner"}).encode(), 400, "messages"),
        (_chat([]), 400, "messages"),
        (_chat([{"role": "robot", "content": "x"}]), 400, "messages[0].role"),
        (_chat([{"role": "user", "content": 7}]), 400, "messages[0].content"),
        (_chat([{"role": "user", "content": [{"type": "audio"}]}]), 400, "messages[0].content[0]"),
        (_chat([{"role": "user", "content": "x"}], stream=True), 400, "stream"),
        (_chat([{"role": "user", "content": "x"}], temperature="hot"), 400, "temperature"),
        (_chat([{"role": "user", "content": "x"}], n=100), 400, "n"),
        (_chat([{"role": "user", "content": "x"}], max_tokens=0), 400, "max_tokens"),
        (_chat([{"role": "user", "content": "x"}], stop=[1]), 400, "stop"),
        (b"\xff\xfe\x00garbage", 400, None),
    ],
)
def test_malformed_requests_get_4xx_json(text_server, body, status, param):
    code, obj = _raw(text_server, "POST", "/v1/chat/completions", body)
    assert code == status
    assert obj["error"]["type"] == "invalid_request_error" and obj["error"]["param"] == param
    assert obj["error"]["message"]


def test_size_limits_and_transport_errors(text_server, vl_server):
    code, obj = _raw(text_server, "POST", "/v1/chat/completions", b"x" * (64 * 1024 + 1))
    assert code == 413 and obj["error"]["code"] == "request_too_large"
    code, obj = _raw(text_server, "POST", "/v1/chat/completions", None)
    assert code == 411
    code, obj = _raw(text_server, "POST", "/v1/chat/completions", b"{}", headers={"Content-Length": "-5"})
    assert code == 400 and obj["error"]["code"] == "bad_content_length"
    code, obj = _raw(text_server, "POST", "/v1/chat/completions", _chat([{"role": "user", "content": "x"}]), token=None)
    assert code == 401
    code, obj = _raw(text_server, "GET", "/v1/nothing")
    assert code == 404
    code, obj = _raw(text_server, "POST", "/v1/completions", _chat([{"role": "user", "content": "x"}]))
    assert code == 404
    code, obj = _raw(text_server, "GET", "/health", token=None)
    assert (code, obj) == (200, {"status": "ok"})
    bad_image = json.dumps(
        {
            "model": "Qwen/Qwen2.5-VL-7B-Instruct",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!notbase64"}}],
                }
            ],
        }
    ).encode()
    code, obj = _raw(vl_server, "POST", "/v1/chat/completions", bad_image, token=None)
    assert code == 400 and obj["error"]["code"] == "invalid_image_url"
    not_image = bad_image.replace(b"!!!notbase64", base64.b64encode(b"plain text, not a picture"))
    code, obj = _raw(vl_server, "POST", "/v1/chat/completions", not_image, token=None)
    assert code == 400 and obj["error"]["code"] == "invalid_image"
    remote = bad_image.replace(b"data:image/png;base64,!!!notbase64", b"http://example.com/frame.png")
    code, obj = _raw(vl_server, "POST", "/v1/chat/completions", remote, token=None)
    assert code == 400 and "data: URLs" in obj["error"]["message"]
    # after all of that the server still answers
    resp = _client(text_server).chat.completions.create(
        model="tiny-planner", messages=[{"role": "user", "content": "x"}], max_tokens=2
    )
    assert resp.usage.completion_tokens == 2


def test_oversized_request_through_the_openai_client(text_server):
    with pytest.raises(openai.APIStatusError) as e:
        _client(text_server).chat.completions.create(
            model="tiny-planner", messages=[{"role": "user", "content": "y" * 200_000}]
        )
    assert e.value.status_code == 413 and e.value.body["code"] == "request_too_large"


def test_parse_chat_request_unit():
    cfg = ServeConfig(model_name="m", max_tokens_cap=100, default_max_tokens=50)
    msgs, imgs, s = parse_chat_request(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "rules"},
                {"role": "assistant", "content": None},
                {"role": "user", "content": "go"},
            ],
            "max_completion_tokens": 500,
        },
        cfg,
        supports_images=False,
    )
    assert msgs == [
        {"role": "system", "content": "rules"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "go"},
    ]
    assert imgs == [] and s["max_new_tokens"] == 100 and s["temperature"] == 1.0 and s["n"] == 1 and s["stop"] == []
    _, _, s = parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}]}, cfg, False)
    assert s["max_new_tokens"] == 50
    with pytest.raises(RequestError) as e:
        parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}], "seed": 1.5}, cfg, False)
    assert (e.value.status, e.value.param) == (400, "seed")


def test_cli_refuses_a_missing_token_or_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
    assert main(["--model", str(tc.text_model()), "--token-env", "NO_SUCH_TOKEN_VAR", "--port", "0"]) == 2
    assert "NO_SUCH_TOKEN_VAR" in capsys.readouterr().err
    assert main(["--model", str(tmp_path), "--port", "0"]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert main(["--model", str(tc.text_model()), "--port", "0", "--max-tokens-cap", "0"]) == 2
    assert "max_tokens_cap: must be >= 1" in capsys.readouterr().err


def test_data_url_helper_round_trip():
    from embodied_rft.tools.chat_request import _decode_image

    im = _decode_image(_data_url(tc.solid_png((40, 30))), "x", 10_000)
    assert im.size == (40, 30) and im.mode == "RGB"
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    assert buf.getvalue()[:4] == b"\x89PNG"
