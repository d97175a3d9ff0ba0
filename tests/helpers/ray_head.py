"""A real local Ray head for the cluster-path tests: ``ray start --head --block`` on loopback, on free ports, in a
temporary folder, with the test's Python first on PATH (so the job's ``python3`` is this venv's, as ``ray start``
from a cluster's venv would make it). Stopped by killing its process group: ``ray stop`` would stop every Ray
instance of the user on this machine.

Token authentication is off for the head and, while it runs, for this process and its children
(``RAY_AUTH_MODE=disabled``): Ray 2.60 turns it on for a new head whenever ``~/.ray/auth_token`` exists (any earlier
local ``ray.init()`` writes one), and a client given an explicit address does not send the token. The head listens
on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class RayHead:
    address: str  # the job server, for `ray job submit --address` and RAY_ADDRESS
    gcs: str  # host:port of the GCS, for ray.init(address=...)
    env: dict[str, str]  # the environment the head was started with


def _wait_http(url: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the Ray job server at {url} did not answer in {timeout:.0f} s")


@contextlib.contextmanager
def ray_head(num_cpus: int = 2, timeout: float = 120.0, env: dict[str, str] | None = None) -> Iterator[RayHead]:
    """A running head for the ``with`` block, its processes (and so every job's) with ``env`` added to this one's
    (skips nothing: the caller checks that ``ray`` is installed)."""
    tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    gcs_port, dash = free_port(), free_port()
    extra = env or {}
    env = {
        **os.environ,
        **extra,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
        "RAY_AUTH_MODE": "disabled",
    }
    saved_mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    env.pop("RAY_ADDRESS", None)
    ray = str(Path(sys.executable).parent / "ray")
    cmd = [
        ray, "start", "--head", "--block", "--disable-usage-stats",
        "--node-ip-address", "127.0.0.1", "--port", str(gcs_port),
        "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
        "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
        "--metrics-export-port", str(free_port()), "--runtime-env-agent-port", str(free_port()),
        "--ray-client-server-port", str(free_port()), "--num-cpus", str(num_cpus), "--num-gpus", "0",
        "--temp-dir", str(tmp),
    ]  # fmt: skip
    log = open(tmp / "head.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        address = f"http://127.0.0.1:{dash}"
        _wait_http(f"{address}/api/version", proc, timeout)
        yield RayHead(address, f"127.0.0.1:{gcs_port}", env)
    finally:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait)
                break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the head's daemons share its process group
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if saved_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved_mode
