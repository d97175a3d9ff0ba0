"""Load on the chat server (``tools/serve.py``): clients that keep their connection alive beside clients that open
a new connection for every request, against one real server process, in one run.

Run: ``python bench/bench_serve.py [--model models/grpo] [--clients 32] [--requests 5] [--max-tokens 16]
[--threads 0] [--rounds 1] [--json out.json]``.
Input: a checkpoint (default: the pipeline's ``models/grpo``, else ``models/sft``, else the tiny model the serve
tests fit to episode 0's first prompt: ``tests/helpers/tiny_checkpoints.fitted_model``) and that prompt. The
server runs as ``python -m embodied_rft.tools.serve`` in its own process (its own GIL, as in use), with a bearer
token, on a free loopback port; the clients are threads of this process.

Each mode starts ``--clients`` clients at once (a barrier), each sending ``--requests`` chat requests one after
the other and waiting for each answer:
- ``keep-alive``: each client one HTTP/1.1 connection for all its requests (an ``openai`` client does this);
- ``new connection``: each request on a fresh connection, closed after its answer (``curl`` in a loop, or a
  client without a session).
Rows: answered (status 200) / sent, answers per second over the mode's wall time, and the p50 / p95 latency of
the answered requests (connect to last byte). ``ratio`` = the new-connection row's req/s over keep-alive's: the
server's work per request is the same, so it should be ~1. The machine's other load moves every figure: compare
rows of one run, not runs. ``run()`` returns the rows for a combined bench report.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOKEN_ENV = "SERVE_LOAD_BENCH_TOKEN"


def _model(model: str | None) -> tuple[Path, str]:
    if model:
        return Path(model), Path(model).name
    for name in ("grpo", "sft"):
        if (REPO / "models" / name / "config.json").is_file():
            return REPO / "models" / name, f"models/{name}"
    sys.path.insert(0, str(REPO))
    from tests.helpers import tiny_checkpoints as tc

    return tc.fitted_model(), "tiny fitted (tests/helpers)"


def _prompt() -> list[dict]:
    sys.path.insert(0, str(REPO))
    from tests.helpers import tiny_checkpoints as tc

    return tc.first_prompt(tc.episodes()[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(model: Path, port: int, token: str, max_tokens: int, threads: int, log: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "embodied_rft.tools.serve",
        "--model",
        str(model),
        "--port",
        str(port),
        "--token-env",
        TOKEN_ENV,
        "--served-model-name",
        "bench",
        "--max-tokens-cap",
        str(max_tokens),
        "--device",
        "cpu",
    ]
    if threads:
        cmd += ["--threads", str(threads)]
    proc = subprocess.Popen(
        cmd, env={**os.environ, TOKEN_ENV: token}, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=REPO
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                conn.close()
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server did not answer /health within 300 s: {log.read_text()[-2000:]}")


def _request(conn: http.client.HTTPConnection, body: bytes, token: str) -> int:
    conn.request(
        "POST",
        "/v1/chat/completions",
        body,
        {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    data = resp.read()
    if resp.status == 200:
        json.loads(data)["choices"][0]["message"]["content"]  # a whole answer, not just a status
    return resp.status


def _mode(port: int, token: str, body: bytes, clients: int, requests: int, keep_alive: bool) -> dict:
    lat: list[float] = []
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600) if keep_alive else None
        start.wait()
        for _ in range(requests):
            t0 = time.perf_counter()
            c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            try:
                outcome = str(_request(c, body, token))
            except (OSError, http.client.HTTPException) as exc:
                outcome = type(exc).__name__
                c.close()
                if conn is not None:  # a broken kept-alive connection: the next request reconnects
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            dt = time.perf_counter() - t0
            if conn is None:
                c.close()
            with lock:
                outcomes.append(outcome)
                if outcome == "200":
                    lat.append(dt)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    answered = outcomes.count("200")
    return {
        "answered": answered,
        "total": len(outcomes),
        "wall_s": wall,
        "per_s": answered / wall,
        "p50_s": statistics.median(lat) if lat else float("nan"),
        "p95_s": lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else float("nan"),
        "failures": {o: outcomes.count(o) for o in sorted(set(outcomes)) if o != "200"},
    }


def run(
    clients: int = 32,
    requests: int = 5,
    max_tokens: int = 16,
    model: str | None = None,
    threads: int = 0,
    rounds: int = 1,
) -> list[dict]:
    path, name = _model(model)
    body = json.dumps({"model": "bench", "messages": _prompt(), "max_tokens": max_tokens, "temperature": 0}).encode()
    token = os.urandom(16).hex()
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = _start_server(path, port, token, max_tokens, threads, Path(tmp) / "server.log")
        try:
            _mode(port, token, body, 2, 2, True)  # warm-up: the first generations pay one-off costs
            results: dict[str, list[dict]] = {"keep-alive": [], "new connection": []}
            for _ in range(rounds):
                for mode in results:
                    results[mode].append(_mode(port, token, body, clients, requests, mode == "keep-alive"))
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    rows = []
    for mode, rs in results.items():
        best = max(rs, key=lambda r: r["per_s"])
        rows.append(
            {
                "bench": "serve",
                "case": f"{mode} ({clients} clients x {requests} requests)",
                "value": best["per_s"],
                "per_s": best["per_s"],
                "unit": "req/s",
                "answered": sum(r["answered"] for r in rs),
                "total": sum(r["total"] for r in rs),
                "p50_s": best["p50_s"],
                "p95_s": best["p95_s"],
                "failures": dict(sum((collections.Counter(r["failures"]) for r in rs), collections.Counter())),
                "model": name,
                "max_tokens": max_tokens,
            }
        )
    keep = rows[0]["per_s"]
    rows[0].update(ratio=1.0, vs="itself")
    rows[1].update(ratio=rows[1]["per_s"] / keep if keep else None, vs="keep-alive")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=5, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--model", default=None, help="checkpoint (default: models/grpo, models/sft, else tiny fitted)")
    ap.add_argument("--threads", type=int, default=0, help="the server's --threads (0 = torch's default)")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each mode, alternating; the best is reported")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    rows = run(args.clients, args.requests, args.max_tokens, args.model, args.threads, args.rounds)
    print(
        f"model: {rows[0]['model']}, max_tokens {rows[0]['max_tokens']}, server --threads {args.threads or 'default'}"
    )
    print(f"{'mode':<42} {'answered':>9} {'req/s':>7} {'p50 s':>7} {'p95 s':>7} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['case']:<42} {r['answered']:>4}/{r['total']:<4} {r['per_s']:7.2f} {r['p50_s']:7.3f} {r['p95_s']:7.3f}"
            f" {r['ratio']:6.2f}" + (f"  failures: {r['failures']}" if r["failures"] else "")
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["answered"] == r["total"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
