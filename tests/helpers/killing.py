"""SIGKILL a child process at a random point, and check what it left where other stages read.

A child is ``python -c <script> <args>``; the script prints ``READY`` once its imports are done, so the kill
lands in the work, not in the interpreter's start-up. :func:`kill_at_random` kills it a random fraction of
the way through the work time measured on an uninterrupted run (:func:`run_to_end`); :func:`kill_mid_write`
kills it the moment an atomic write's temporary file appears, i.e. while an output is being written. While
the child runs, the parent polls ``watch()`` every millisecond or so: a callable that raises when anything at
an output path is partial, so a file that is visible even for an instant in an incomplete state is caught.

The random draws come from ``ERFT_KILL_SEED`` when set (to replay a failure), else from a fresh seed that the
failure message prints.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

READY = "READY"


def kill_rng(test: str) -> tuple[random.Random, str]:
    """A seeded RNG for the kill point and a note that says how to replay it."""
    seed = int(os.environ.get("ERFT_KILL_SEED") or random.SystemRandom().randrange(2**31))
    return random.Random(f"{test}:{seed}"), f"ERFT_KILL_SEED={seed}"


def _env() -> dict[str, str]:
    env = os.environ.copy()
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="offline",
    )
    return env


@dataclass
class Finished:
    returncode: int
    work_s: float  # from READY to exit
    output: str


def _start(script: str, args: list[str], log: Path) -> tuple[subprocess.Popen, threading.Event, list[str]]:
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env()
    )
    ready = threading.Event()
    lines: list[str] = []

    def pump() -> None:
        with log.open("a") as fh:
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.append(line)
                fh.write(line)
                if line.strip() == READY:
                    ready.set()
        ready.set()  # the child ended (maybe before READY)

    threading.Thread(target=pump, daemon=True).start()
    return proc, ready, lines


def run_to_end(script: str, args: list[str], log: Path, timeout: float = 300) -> Finished:
    proc, ready, lines = _start(script, args, log)
    assert ready.wait(timeout), f"child never got ready; see {log}"
    t0 = time.monotonic()
    rc = proc.wait(timeout)
    work = time.monotonic() - t0
    time.sleep(0.05)  # let the pump drain
    out = "".join(lines)
    assert rc == 0, f"child failed (rc {rc}):\n{out[-3000:]}"
    return Finished(rc, work, out)


@dataclass
class Killed:
    killed: bool  # False: the child finished before the kill point
    after_s: float  # seconds after READY
    checks: int  # times watch() ran while the child was alive
    output: str


def _watch_until(proc: subprocess.Popen, stop: Callable[[], bool], watch: Callable[[], None] | None) -> int:
    checks = 0
    while proc.poll() is None and not stop():
        if watch is not None:
            watch()
            checks += 1
        time.sleep(0.001)
    return checks


def _kill(proc: subprocess.Popen) -> bool:
    if proc.poll() is not None:
        return False
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return proc.returncode == -signal.SIGKILL


def kill_at_random(
    script: str,
    args: list[str],
    log: Path,
    *,
    rng: random.Random,
    work_s: float,
    watch: Callable[[], None] | None = None,
    lo: float = 0.05,
    hi: float = 0.9,
) -> Killed:
    """Start the child; SIGKILL it ``uniform(lo, hi) * work_s`` seconds after READY, watching outputs."""
    proc, ready, lines = _start(script, args, log)
    assert ready.wait(300), f"child never got ready; see {log}"
    delay = rng.uniform(lo, hi) * work_s
    t0 = time.monotonic()
    checks = _watch_until(proc, lambda: time.monotonic() - t0 >= delay, watch)
    killed = _kill(proc)
    if watch is not None:
        watch()
    time.sleep(0.05)
    return Killed(killed, time.monotonic() - t0, checks, "".join(lines))


def kill_mid_write(
    script: str,
    args: list[str],
    log: Path,
    folder: Path,
    *,
    watch: Callable[[], None] | None = None,
    pattern: str = ".*.tmp",
    timeout: float = 120,
) -> Killed:
    """Start the child; SIGKILL it as soon as a temporary file of an atomic write (``pattern``) appears in
    ``folder`` — a kill while an output is half-written."""
    proc, ready, lines = _start(script, args, log)
    assert ready.wait(300), f"child never got ready; see {log}"
    t0 = time.monotonic()

    def writing() -> bool:
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"no temporary file matching {pattern} appeared in {folder} within {timeout} s")
        return folder.is_dir() and any(folder.glob(pattern))

    checks = _watch_until(proc, writing, watch)
    killed = _kill(proc)
    if watch is not None:
        watch()
    time.sleep(0.05)
    return Killed(killed, time.monotonic() - t0, checks, "".join(lines))


# ---- what "whole" means for each kind of output ------------------------------------------------------------
def whole_jsonl(path: Path, reference: bytes | None = None) -> None:
    """Absent, or every line a JSON object and the file ending on a newline (equal to ``reference`` if given)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    if reference is not None:
        assert data == reference, f"{path}: {len(data)} bytes visible, the finished file has {len(reference)}"
        return
    assert data == b"" or data.endswith(b"\n"), f"{path}: last line cut short"
    for i, line in enumerate(data.splitlines(), 1):
        assert isinstance(json.loads(line), dict), f"{path}:{i}: not a JSON object"


def whole_json(path: Path) -> None:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return
    json.loads(text)  # raises on a partial file


def whole_model(out: Path) -> None:
    """A model folder appears whole (a renamed temp folder) or not at all. A rerun's save swaps a new folder
    in with two renames; a check that straddles the swap (the folder it started on was moved away) is redone."""
    from embodied_rft.models import DamagedCheckpointError, check_checkpoint

    for _ in range(3):
        try:
            ino = out.stat().st_ino
        except FileNotFoundError:
            return
        try:
            check_checkpoint(out)
            return
        except DamagedCheckpointError:
            try:
                if out.stat().st_ino == ino:
                    raise  # still the folder that was read: really damaged
            except FileNotFoundError:
                pass
    raise AssertionError(f"{out} kept changing under the check")


def kill_repeatedly(
    script: str,
    args: list[str],
    root: Path,
    rng: random.Random,
    work_s: float,
    watch: Callable[[], None] | None,
    kills: int = 3,
) -> list[Killed]:
    """Up to ``kills`` runs in a row, each SIGKILLed at a random point, every one resuming what the last left
    (a resumed run has less to do, so a later draw may find it finished: then the series ends early). The first
    kill is retried on a fresh ``root`` (up to 3 times, aiming earlier) if the child outran the timed run.
    Logs go next to ``root``."""
    out: list[Killed] = []
    for _attempt in range(3):  # the first kill must land: a child faster than the timed run is started afresh
        k = kill_at_random(script, args, root.parent / f"{root.name}.kill0.log", rng=rng, work_s=work_s, watch=watch)
        if k.killed:
            break
        shutil.rmtree(root, ignore_errors=True)
        work_s = min(work_s, k.after_s)
    out.append(k)
    for i in range(1, kills if k.killed else 0):
        k = kill_at_random(script, args, root.parent / f"{root.name}.kill{i}.log", rng=rng, work_s=work_s, watch=watch)
        out.append(k)
        if not k.killed:
            break
    return out


def visible_files(folder: Path) -> list[Path]:
    """Files a reader would pick up: everything but hidden (temporary) ones."""
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
