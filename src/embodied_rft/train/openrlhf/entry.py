"""The OpenRLHF job's entrypoint, on the cluster: check the inputs from where the job runs, then run the trainer.

``python3 -m embodied_rft.train.openrlhf.entry --job-dir DIR --submission-id ID --input NAME=PATH ... [--env K=V ...]
-- python3 -m openrlhf.cli.train_ppo_ray ...`` (built by :func:`.job.job_entrypoint`; Ray runs it in the uploaded
copy of the repository). In order:

1. the job's folder ``DIR`` (on the shared filesystem) must exist and be writable from here, and every ``--input``
   must exist and be readable (a folder: listable; the prompt file: every image it names too). The first one that is
   not ends the job before any training, exit status 2, with one line naming the input, the path, this host and what
   to change (the shared root is not mounted here, or not at the same path);
2. ``DIR/job.json`` records the job: submission id, host, working folder, Python, OpenRLHF's installed version, the
   trainer module and its argv, start time (written atomically, then again with the end time and exit status);
3. the trainer runs with ``--env`` added to its environment (the keys OpenRLHF's own ``ray.init`` hands on to its
   workers); its output goes to this job's log and to ``DIR/trainer.log`` (the stage reads OpenRLHF's per-step lines
   from it);
4. after a trainer that exits 0, ``--ckpt.output_dir`` must hold a Hugging Face checkpoint (``config.json`` and
   weights); a trainer that says it succeeded but wrote no model fails the job.

Nothing here imports OpenRLHF; its version is read from the installed package's metadata.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from embodied_rft.core.atomic import write_json_atomic
from embodied_rft.models.integrity import DamagedCheckpointError, check_checkpoint
from embodied_rft.train.openrlhf.job import JobLayout

FIX = (
    "the job cannot see the shared root here: mount grpo.openrlhf.shared_root at the same path on every Ray node, "
    "or set grpo.openrlhf.shared_root to a folder they all share (docs/architecture.md, 'The cluster path')"
)


class InputError(Exception):
    """An input the job cannot read from where it runs."""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _where() -> str:
    return f"host {socket.gethostname()}, cwd {os.getcwd()}"


def check_input(name: str, path: Path) -> None:
    """Raise :class:`InputError` unless ``path`` can be read from here (a folder: listed; a JSONL prompt file: every
    image path its records name exists)."""
    if not path.is_absolute():
        raise InputError(f"input {name!r}: {path} is relative; the job only takes absolute paths on the shared root")
    if not path.exists():
        raise InputError(f"input {name!r}: {path} not found from {_where()}; {FIX}")
    if not os.access(path, os.R_OK):
        raise InputError(f"input {name!r}: {path} is not readable from {_where()} (permissions)")
    if path.is_dir():
        try:
            next(iter(os.scandir(path)), None)
        except OSError as e:
            raise InputError(f"input {name!r}: {path} cannot be listed from {_where()} ({e})") from None
        return
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as e:
                    raise InputError(f"input {name!r}: {path}:{lineno} is not JSON ({e})") from None
                for image in rec.get("images") or ():
                    if not Path(image).is_file():
                        raise InputError(
                            f"input {name!r}: {path}:{lineno} names image {image}, not found from {_where()}; {FIX}"
                        )


def _openrlhf_version() -> str | None:
    try:
        return importlib.metadata.version("openrlhf")
    except importlib.metadata.PackageNotFoundError:
        return None


def run(job_dir: Path, submission_id: str, inputs: dict[str, Path], env: dict[str, str], train: list[str]) -> int:
    """Steps 1-4 of the module docstring; returns the job's exit status."""
    if not job_dir.is_dir():
        print(f"error: the job folder {job_dir} is not found from {_where()}; {FIX}", file=sys.stderr)
        return 2
    if not os.access(job_dir, os.W_OK):
        print(f"error: the job folder {job_dir} is not writable from {_where()}", file=sys.stderr)
        return 2
    try:
        for name, path in inputs.items():
            check_input(name, path)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    record = {
        "submission_id": submission_id,
        "host": socket.gethostname(),
        "cwd": os.getcwd(),
        "python": sys.executable,
        "openrlhf_version": _openrlhf_version(),
        "trainer": train[2] if len(train) > 2 and train[1] == "-m" else train[0],
        "argv": train,
        "inputs": {k: str(v) for k, v in inputs.items()},
        "started": _now(),
    }
    lay = JobLayout(job_dir)
    write_json_atomic(lay.record, record)
    print(f"embodied_rft: inputs checked from {_where()}; running {record['trainer']}", flush=True)
    proc = subprocess.Popen(
        train, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1, text=True
    )
    with open(lay.log, "w", encoding="utf-8") as logf:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            logf.write(line)
            logf.flush()
    rc = proc.wait()
    if rc == 0:
        try:
            check_checkpoint(lay.model)  # config, complete weights and a tokenizer, as the stage will load it
        except DamagedCheckpointError as e:
            print(f"error: the trainer exited 0 but {lay.model} holds no checkpoint: {e}", file=sys.stderr)
            rc = 1
    write_json_atomic(lay.record, {**record, "finished": _now(), "returncode": rc})
    return rc


def _pair(text: str, what: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{what} must be NAME=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    return k, v


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("error: no trainer command after --", file=sys.stderr)
        return 2
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="python3 -m embodied_rft.train.openrlhf.entry", description=__doc__.split("\n")[0])
    p.add_argument("--job-dir", required=True, type=Path)
    p.add_argument("--submission-id", default="")
    p.add_argument("--input", action="append", default=[], type=lambda t: _pair(t, "--input"))
    p.add_argument("--env", action="append", default=[], type=lambda t: _pair(t, "--env"))
    args = p.parse_args(argv[:cut])
    train = argv[cut + 1 :]
    if not train:
        print("error: no trainer command after --", file=sys.stderr)
        return 2
    inputs = {k: Path(v) for k, v in args.input}
    return run(args.job_dir, args.submission_id, inputs, dict(args.env), train)


if __name__ == "__main__":
    sys.exit(main())
