"""SIGKILL `prepare` and `decompose` (their library entries, in a child process) while they write: no partial
file is ever visible at an output path, and the rerun writes exactly what an uninterrupted run writes.

Two kill points each: the instant an atomic write's temporary file appears (the kill lands mid-write), and a
random time in the run. A watcher polls the outputs every millisecond while the child runs: an output file
must be absent or byte-identical to the finished one; an image must be a whole PNG.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.killing import (
    kill_mid_write,
    kill_repeatedly,
    kill_rng,
    run_to_end,
    visible_files,
    whole_json,
    whole_jsonl,
)

GEN = {"source": "generated", "generator": {"n_train": 150, "n_valid_seen": 30, "n_valid_unseen": 30}}
SPLITS = ("train", "valid_seen", "valid_unseen")

PREPARE = r"""
import json, sys
from embodied_rft.prepare import run_prepare
print("READY", flush=True)
run_prepare(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3])
"""

DECOMPOSE = r"""
import sys
from embodied_rft.data.decompose import DecomposeConfig, run_decompose
from embodied_rft.data.prompt import PromptConfig
print("READY", flush=True)
run_decompose(DecomposeConfig(val_split="valid_seen", images=True), PromptConfig(style="compact", action_list="extras"),
              sys.argv[1], sys.argv[2], sys.argv[3])
"""


def _prepare_args(root: Path) -> list[str]:
    return [json.dumps(GEN), str(root / "episodes"), str(root / "prepare.json")]


def test_prepare_killed_mid_write_and_at_random_leaves_no_partial_file(tmp_path):
    rng, replay = kill_rng("prepare")
    ref = run_to_end(PREPARE, _prepare_args(tmp_path / "ref"), tmp_path / "ref.log")
    want = {s: (tmp_path / "ref" / "episodes" / f"{s}.jsonl").read_bytes() for s in SPLITS}
    assert all(want.values())

    for mode in ("mid_write", "random"):
        root = tmp_path / mode
        out = root / "episodes"

        def watch(out: Path = out, root: Path = root) -> None:  # bound now: called within this iteration only
            for s in SPLITS:
                whole_jsonl(out / f"{s}.jsonl", want[s])
            whole_json(root / "prepare.json")

        if mode == "mid_write":
            # the splits are written into a sibling temp folder that is swapped in whole at the end
            k = kill_mid_write(
                PREPARE, _prepare_args(root), root / "kill.log", root, watch=watch, pattern=".episodes.tmp-*/.*.tmp"
            )
        else:
            (k,) = kill_repeatedly(PREPARE, _prepare_args(root), root, rng, ref.work_s, watch, kills=1)
        assert k.killed, f"{mode}: the child finished before the kill ({replay})"
        assert k.checks > 0
        # what a reader sees: no episodes folder, or the whole one — never a partial set of splits
        visible = {p.name for p in visible_files(out)}
        assert visible in (set(), {f"{s}.jsonl" for s in SPLITS}), (visible, replay)
        if mode == "mid_write":
            assert not out.exists() and not (root / "prepare.json").exists()
            assert list(root.glob(".episodes.tmp-*")), "the killed run's half-built folder (hidden)"

        run_to_end(PREPARE, _prepare_args(root), root / "rerun.log")
        assert not list(root.glob(".episodes.tmp-*")), "the rerun removes the killed run's temp folder"
        for s in SPLITS:
            assert (out / f"{s}.jsonl").read_bytes() == want[s], (mode, s, replay)
        assert json.loads((root / "prepare.json").read_text()) == json.loads(
            (tmp_path / "ref" / "prepare.json").read_text()
        )


@pytest.fixture(scope="module")
def small_episodes(tmp_path_factory) -> Path:
    """16 train and 4 valid_seen episodes: ~150 samples with a rendered frame each."""
    from embodied_rft.core.atomic import write_jsonl_atomic
    from embodied_rft.world.generator import GeneratorConfig, generate_episodes

    d = tmp_path_factory.mktemp("episodes")
    cfg = GeneratorConfig(seed=3, n_train=16, n_valid_seen=4)
    write_jsonl_atomic(d / "train.jsonl", generate_episodes(cfg, "train"))
    write_jsonl_atomic(d / "valid_seen.jsonl", generate_episodes(cfg, "valid_seen"))
    return d


def test_decompose_killed_mid_write_and_at_random_leaves_no_partial_file(tmp_path, small_episodes):
    rng, replay = kill_rng("decompose")
    args = lambda root: [str(small_episodes), str(root / "decomposed"), str(root / "decompose.json")]  # noqa: E731
    ref = run_to_end(DECOMPOSE, args(tmp_path / "ref"), tmp_path / "ref.log")
    ref_out = tmp_path / "ref" / "decomposed"
    want = {n: (ref_out / f"{n}.jsonl").read_bytes() for n in ("train", "val")}
    ref_images = {p.name: p.read_bytes() for p in (ref_out / "images").iterdir()}
    n_samples = sum(len(b.splitlines()) for b in want.values())
    assert len(ref_images) == n_samples > 50

    for mode in ("mid_write", "random"):
        root = tmp_path / mode
        out = root / "decomposed"
        seen: set[str] = set()

        def watch(out: Path = out, root: Path = root, seen: set[str] = seen) -> None:  # this iteration's
            for n in ("train", "val"):
                whole_jsonl(out / f"{n}.jsonl", want[n])
            whole_json(root / "decompose.json")
            img_dir = out / "images"
            if img_dir.is_dir():
                for p in img_dir.iterdir():
                    if p.name.startswith(".") or p.name in seen:
                        continue
                    # an image appears whole (atomic rename) and is the very frame of the finished run
                    assert p.read_bytes() == ref_images[p.name], p
                    seen.add(p.name)

        if mode == "mid_write":
            # killed while train.jsonl, the stage's main output, is being written
            k = kill_mid_write(
                DECOMPOSE,
                args(root),
                root / "kill.log",
                root,
                watch=watch,
                pattern=".decomposed.tmp-*/.train.jsonl.*.tmp",
            )
        else:
            (k,) = kill_repeatedly(DECOMPOSE, args(root), root, rng, ref.work_s, watch, kills=1)
        assert k.killed, f"{mode}: the child finished before the kill ({replay})"
        assert not (root / "decompose.json").exists()  # the metrics are written last
        if mode == "mid_write":
            # nothing visible yet: the samples and frames so far sit in the hidden temp folder
            assert not out.exists() and not seen
            (half,) = root.glob(".decomposed.tmp-*")
            assert any((half / "images").iterdir())

        run_to_end(DECOMPOSE, args(root), root / "rerun.log")
        assert not list(root.glob(".decomposed.tmp-*")), "the rerun removes the killed run's temp folder"
        for n in ("train", "val"):
            assert (out / f"{n}.jsonl").read_bytes() == want[n], (mode, n, replay)
        got = {p.name: p.read_bytes() for p in (out / "images").iterdir() if not p.name.startswith(".")}
        assert got == ref_images
        # every image a sample names exists: the rerun rewrote what the kill cut off
        for line in want["train"].splitlines():
            assert (out / json.loads(line)["image"]).is_file()
