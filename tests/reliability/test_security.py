"""Security: a secret in the environment never reaches a file; the server listens on loopback only; model
outputs are data, never code.

1. A distillation through the ``openai`` teacher (the loopback fault server of tests/teacher, whose error
   bodies echo the Authorization header back) and an SFT run on its output with W&B offline, every run with
   the same sentinel key in the teacher's key variable and in ``OPENAI_API_KEY``, ``HF_TOKEN`` and
   ``WANDB_API_KEY``, and DEBUG logs written to a file; then every file the runs wrote (outputs, the teacher
   cache, metrics, plots, checkpoints, logs, the W&B run and cache folders, and anything new under ~/.cache,
   ~/.config and the temp folder) is searched for the key. tests/teacher/test_teacher_openai.py does this for
   distillation alone and tests/train/test_sft.py for the W&B run folder alone.
2. ``embodied_rft.tools.serve`` binds 127.0.0.1 unless told otherwise and is unreachable on this machine's other
   addresses. (tests/test_serve.py covers the token, body-size and max_tokens limits.)
3. Responses carrying code (``__import__('os').system(...)``, YAML tags, pickle opcodes) score 0 in every
   reader — reward (both variants), OpenRLHF reward file, evaluation, teacher validation — and nothing runs;
   and no reader in ``src/`` calls ``eval``/``exec``/``pickle.loads``/``yaml.load`` or a shell.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import socket
import tempfile
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

KEY_ENV = "ERFT_RELIABILITY_TEACHER_KEY"


def _files_with(secret: bytes, roots: list[Path], since: float | None = None) -> tuple[list[Path], int]:
    """(files under ``roots`` that contain ``secret``, files searched); with ``since``, only files modified
    after it (for shared folders such as ~/.cache)."""
    hits, n = [], 0
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            if since is not None:
                dirnames[:] = [d for d in dirnames if not d.startswith("pytest-of-")]  # other tests' folders
            for f in filenames:
                p = Path(dirpath) / f
                try:
                    if p.is_symlink() or (since is not None and p.stat().st_mtime < since):
                        continue
                    n += 1
                    if secret in p.read_bytes():
                        hits.append(p)
                except OSError:
                    continue
    return hits, n


def test_no_file_written_by_distill_and_sft_holds_the_api_key(tmp_path, monkeypatch):
    pytest.importorskip("openai")
    from embodied_rft.config import build
    from embodied_rft.models import ModelConfig, TextArch, build_base_model
    from embodied_rft.teacher import ScriptedConfig, TeacherConfig, run_distill
    from embodied_rft.teacher.scripted import ScriptedTeacher
    from embodied_rft.train.sft.config import SFTConfig, ValSettings
    from embodied_rft.train.sft.data import corpus_texts, read_sft_records
    from embodied_rft.train.sft.trainer import run_sft
    from tests.helpers.fault_server import FaultPlan, FaultServer
    from tests.helpers.teacher_fixtures import make_samples, write_samples

    secret = "sk-sentinel-" + uuid.uuid4().hex
    for var in (KEY_ENV, "OPENAI_API_KEY", "HF_TOKEN", "WANDB_API_KEY"):
        monkeypatch.setenv(var, secret)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.delenv("WANDB_MODE", raising=False)  # the SFT config's default (offline) must apply
    wandb_home = tmp_path / "wandb_home"
    for var, sub in (
        ("WANDB_DIR", "runs"),
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_DATA_DIR", "data"),
        ("WANDB_ARTIFACT_DIR", "artifacts"),
    ):
        monkeypatch.setenv(var, str(wandb_home / sub))

    log_file = tmp_path / "logs" / "run.log"
    log_file.parent.mkdir()
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root_logger = logging.getLogger()
    old_level = root_logger.level
    root_logger.addHandler(handler)
    root_logger.setLevel(logging.DEBUG)  # openai/httpx log requests at DEBUG; wandb and transformers too
    start = time.time() - 1

    samples = make_samples(2)[:12]
    good = ScriptedTeacher(ScriptedConfig(seed=7))
    answers = {s["prompt"][-1]["content"]: good.ask(s, 0).text for s in samples}
    seen_auth: set[str] = set()
    try:
        # error bodies quote the Authorization header; max_retries=1 makes some requests give up, so the
        # run logs those bodies (scrubbed) and leaves their samples out
        plan = FaultPlan(seed=3, rate=0.6, kinds=("500", "503", "429ms", "truncated"), max_per_key=2)
        with FaultServer(lambda body: answers[body["messages"][-1]["content"]], plan) as srv:
            cfg = build(
                TeacherConfig,
                {
                    "backend": "openai",
                    "openai": {
                        "base_url": srv.url,
                        "model": "teacher-test",
                        "api_key_env": KEY_ENV,
                        "timeout_s": 2,
                        "concurrency": 2,
                        "requests_per_minute": 0,
                    },
                    "retry": {"max_retries": 1, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_total_s": 10},
                },
                "teacher",
            )
            sp = write_samples(tmp_path / "data" / "decomposed" / "train.jsonl", samples)
            distilled = tmp_path / "data" / "distilled" / "sft.jsonl"
            m = run_distill(
                cfg, sp, distilled, tmp_path / "data" / "teacher_cache", tmp_path / "metrics" / "distill.json"
            )
            seen_auth = set(srv.stats.auth)
        assert m["accepted"] >= 4 and m["failures"]["gave_up"] > 0  # both paths ran: answers and logged failures

        base = build_base_model(
            ModelConfig(
                name="tiny",
                kind="tiny",
                vocab_size=600,
                text=TextArch(
                    hidden_size=64,
                    num_layers=2,
                    num_heads=2,
                    num_kv_heads=1,
                    intermediate_size=128,
                    max_position_embeddings=4096,
                ),
            ),
            corpus_texts(read_sft_records(distilled)),
            tmp_path / "models" / "base",
        )
        sft_cfg = SFTConfig(
            lr=1e-3,
            max_steps=2,
            batch_size=2,
            grad_accum=1,
            logging_steps=1,
            save_steps=1,
            max_len=4096,
            num_threads=1,
            device="cpu",
            report_to=("wandb",),
            keep_checkpoints=True,
            val=ValSettings(max_samples=0),
        )
        sm = run_sft(
            sft_cfg,
            base,
            distilled,
            tmp_path / "models" / "sft",
            tmp_path / "metrics" / "sft.json",
            tmp_path / "plots" / "sft_loss.csv",
            work_dir=tmp_path / "work" / "sft",
        )
        assert sm["steps"] == 2
    finally:
        root_logger.removeHandler(handler)
        root_logger.setLevel(old_level)
        handler.close()

    assert f"Bearer {secret}" in seen_auth  # the key did travel: in the request header, and nowhere else
    assert os.environ["WANDB_MODE"] == "offline"
    runs = list((wandb_home / "runs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].rglob("*.wandb"))
    assert (tmp_path / "work" / "sft" / "checkpoint-2" / "trainer_state.json").is_file()
    text = log_file.read_text()
    assert "[REDACTED]" in text  # the echoed key was seen and scrubbed, not merely absent

    hits, n = _files_with(secret.encode(), [tmp_path])
    assert n >= 30 and not hits, hits  # outputs, cache, metrics, plots, checkpoints, logs, W&B files
    home = Path.home()
    shared = [home / ".cache", home / ".config", home / ".netrc", Path(tempfile.gettempdir())]
    hits, _ = _files_with(secret.encode(), [p for p in shared if p.is_dir()], since=start)
    assert not hits, hits
    if (home / ".netrc").is_file():
        assert secret.encode() not in (home / ".netrc").read_bytes()


# ---- the server ------------------------------------------------------------------------------------------
def _other_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses (no packet is sent: a UDP connect only picks a route)."""
    found = set()
    try:
        found |= {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    except OSError:
        pass
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed anywhere real
            found.add(s.getsockname()[0])
    except OSError:
        pass
    return sorted(a for a in found if not a.startswith("127.") and a != "0.0.0.0")


def test_server_binds_loopback_by_default():
    import http.client

    from embodied_rft.tools.serve import ChatServer, ServeConfig, _parse_args

    assert _parse_args(["--model", "models/grpo"]).host == "127.0.0.1"
    server = ChatServer(object(), ServeConfig(model_name="m"), port=0).start()  # no model: only /health is asked
    try:
        host, port = server.httpd.server_address[:2]
        assert host == "127.0.0.1"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        conn.close()
        for addr in _other_addresses():
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                assert s.connect_ex((addr, port)) != 0, f"the server answers on {addr}:{port}"
    finally:
        server.shutdown()


def test_server_never_logs_the_token(caplog):
    """Request logging (DEBUG) names the client and the request line, never the headers that carry the token."""
    import http.client

    from embodied_rft.tools.serve import ChatServer, ServeConfig

    token = "tok-" + uuid.uuid4().hex
    server = ChatServer(object(), ServeConfig(model_name="m"), port=0, token=token).start()
    try:
        with caplog.at_level(logging.DEBUG):
            for auth in (f"Bearer {token}", "Bearer wrong-" + token[::-1]):
                conn = http.client.HTTPConnection("127.0.0.1", server.httpd.server_address[1], timeout=5)
                conn.request("GET", "/v1/models", headers={"Authorization": auth})
                status = conn.getresponse().status
                conn.close()
                assert status == (200 if auth.endswith(token) else 401)
    finally:
        server.shutdown()
    assert "/v1/models" in caplog.text and token not in caplog.text and token[::-1] not in caplog.text


# ---- model outputs are data ----------------------------------------------------------------------------------
def _payloads(sentinel: Path) -> dict[str, str]:
    cmd = f"touch {sentinel}"
    call = f"__import__('os').system('{cmd}')"
    keys = '"reasoning_and_reflection": "r", "visual_state_description": "v", "language_plan": "l"'
    return {
        "bare_call": call,
        "call_as_plan": '{"executable_plan": ' + call + "}",
        "call_as_action_id": "{"
        + keys
        + ', "executable_plan": [{"action_id": eval("'
        + call.replace("'", "\\'")
        + '"), "action_name": "find a Apple"}]}',
        "python_literal_with_call": "{'executable_plan': [{'action_id': " + call + ", 'action_name': 'find a Apple'}]}",
        "call_in_a_string": "{"
        + keys
        + ', "executable_plan": [{"action_id": "'
        + call
        + '", "action_name": "find a Apple"}]}',
        "fenced_python": "```python\nimport os\nos.system('" + cmd + "')\n```",
        "yaml_tag": "!!python/object/apply:os.system ['" + cmd + "']",
        "pickle_opcodes": "cos\nsystem\n(S'" + cmd + "'\ntR.",
        "template_injection": "{{ self.__init__.__globals__.__builtins__.__import__('os').system('" + cmd + "') }}",
    }


def test_model_outputs_with_code_score_zero_and_run_nothing(tmp_path, monkeypatch):
    import subprocess

    import embodied_rft.regrpo.plugin  # noqa: F401 - registers the regrpo variant, checked beside the core's
    from embodied_rft import reward
    from embodied_rft.data.prompt import PromptConfig
    from embodied_rft.data.response import parse_response
    from embodied_rft.evaluate import EpisodeLimits, run_lockstep
    from embodied_rft.evaluate.episode import read_plan
    from embodied_rft.evaluate.offline import score_responses
    from embodied_rft.teacher.validate import validate_answer
    from embodied_rft.train.openrlhf.reward import reward_func
    from embodied_rft.world.generator import GeneratorConfig, generate_episodes

    calls: list[str] = []
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(f"os.system{a}") or 0)
    monkeypatch.setattr(os, "popen", lambda *a, **k: calls.append(f"os.popen{a}"))
    real_popen = subprocess.Popen.__init__

    def popen(self, *a, **k):
        calls.append(f"Popen{a}")
        return real_popen(self, *a, **k)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen)

    sentinel = tmp_path / "PWNED"
    payloads = _payloads(sentinel)
    ep = generate_episodes(GeneratorConfig(seed=0, n_valid_seen=1), "valid_seen")[0]
    from embodied_rft.data.decompose import decompose_episode

    sample = next(decompose_episode(ep, PromptConfig(style="compact", action_list="extras")))
    label = sample["label"]
    for name, text in payloads.items():
        for variant in reward.REWARDS:
            rb = reward.score(text, label, variant)
            # the one well-formed JSON object (code inside a string) earns its format credit, nothing else
            # (regrpo's total is success minus reflection cost: 0 here)
            structure = 0.125 if name == "call_in_a_string" else 0.0
            total = 0.0 if variant == "regrpo" else structure
            assert (rb.total, rb.structure, rb.accuracy, rb.valid, rb.match) == (total, structure, 0, 0, 0), (
                name,
                variant,
                rb,
            )
        obj = parse_response(text)
        assert obj is None or json.loads(json.dumps(obj)) == obj, name  # plain JSON data if anything
        status, ids = read_plan(text, 300)
        assert ids == [] and status != "ok", (name, status)
        v = validate_answer(text, sample)
        assert not v.accepted and v.kind in ("bad_json", "invalid_plan"), (name, v)
        out = reward_func([f"<|im_start|>assistant\n{text}<|im_end|>"], ["<|im_start|>assistant\n"], [label])
        assert float(out["rewards"][0]) == structure and float(out["scores"][0]) == 0.0, name
    off = score_responses([sample] * len(payloads), list(payloads.values()), reward.RewardConfig())
    assert off["prefix_accuracy"] == off["exact_plan_rate"] == off["valid_mean"] == off["match_mean"] == 0.0

    # played in the simulator: every answer is an unreadable plan (one invalid action each), nothing executes
    class Hostile:
        def plan(self, messages_batch, images=None, contexts=None):
            return [list(payloads.values())[c.call_index % len(payloads)] for c in contexts]

    (rec,) = list(
        run_lockstep(
            [ep],
            Hostile(),
            PromptConfig(style="compact", action_list="extras"),
            EpisodeLimits(max_planner_calls=len(payloads)),
        )
    )
    assert rec["env_steps"] == 0 and rec["parse_failures"] == len(payloads) and not rec["success"]

    # a label is read as a literal too (RR labels are Python literals): a call in it is refused, not run
    from embodied_rft.data.response import format_response

    gold = [tuple(p) for p in json.loads(label)["gold"]]
    assert reward.score(format_response(gold), label).accuracy == 1.0
    rb = reward.score(format_response(gold), f"[{gold[0][1]!r}, {payloads['bare_call']}]")
    assert rb.accuracy == 0.0
    assert not sentinel.exists() and not calls, calls


_FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
_FORBIDDEN_ATTRS = {
    ("os", "system"),
    ("os", "popen"),
    ("pickle", "loads"),
    ("pickle", "load"),
    ("marshal", "loads"),
    ("yaml", "load"),
    ("yaml", "unsafe_load"),
    ("yaml", "full_load"),
}


def test_no_reader_in_src_evaluates_text():
    """Static guard over src/ and stages/: none of the calls that turn text into running code. (Allowed:
    ``ast.literal_eval`` on labels, which accepts literals only; ``torch.load`` with ``weights_only=True``, which
    builds tensors, containers and allow-listed classes only.)"""
    found = []
    for f in sorted([*(REPO / "src").rglob("*.py"), *(REPO / "stages").rglob("*.py")]):
        tree = ast.parse(f.read_text("utf-8"), str(f))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id in _FORBIDDEN_CALLS:
                found.append(f"{f.relative_to(REPO)}:{node.lineno}: {fn.id}()")
            elif (
                isinstance(fn, ast.Attribute)
                and isinstance(fn.value, ast.Name)
                and (fn.value.id, fn.attr) in _FORBIDDEN_ATTRS
            ):
                found.append(f"{f.relative_to(REPO)}:{node.lineno}: {fn.value.id}.{fn.attr}()")
            if isinstance(fn, ast.Attribute) and fn.attr == "load" and getattr(fn.value, "id", None) == "torch":
                safe = [kw for kw in node.keywords if kw.arg == "weights_only"]
                if not (safe and isinstance(safe[0].value, ast.Constant) and safe[0].value.value is True):
                    found.append(f"{f.relative_to(REPO)}:{node.lineno}: torch.load without weights_only=True")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    found.append(f"{f.relative_to(REPO)}:{node.lineno}: shell=")
    assert not found, found
