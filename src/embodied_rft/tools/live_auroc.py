"""Score a verifier checkpoint on the live candidates of a stored greedy run, without replaying it.

``python -m embodied_rft.tools.live_auroc --verifier DIR --episodes SPLIT.jsonl --greedy STORE.jsonl --out FILE
[--backend hf] [--device auto] [--batch-size 32] [--max-new-tokens 16] [--limit 0] [--seed 0]``

The ``bon`` stage's greedy selector records, at every planner call, the policy's candidates with their oracle
labels (``live`` in ``work_dir/greedy/episodes.jsonl``). This tool rebuilds the same items as the stage does
(``vegas.bon.live_items``: one per live state and distinct first action, the same verification prompt), scores them
with ``Verifier.p_yes`` (the stage's ``bon.score: prob``) and writes one line per item to ``--out`` (``episode_id``
= ``<episode>:<call>:<action>``, ``p``, and ``v``, the greedy verdict; the labels stay in the greedy store), then the
AUROC and balanced accuracy as one JSON line on stdout. ``--out`` is a result store: a killed run resumes where it stopped, and a
different verifier or item set starts it afresh. It is how a verifier trained elsewhere (another recipe, another
base model, another machine) is compared with the preset's on the very same items; ``bon`` itself does the same
for ``bon.live_verifiers`` when it plays.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from embodied_rft.core.integrity import IntegrityError, record_intact
from embodied_rft.data.jsonl import iter_jsonl
from embodied_rft.evaluate.stage import load_episodes
from embodied_rft.evaluate.store import ResultStore, dir_fingerprint, fingerprint
from embodied_rft.vegas.bon import live_items, score_live
from embodied_rft.vegas.score import Verifier

log = logging.getLogger(__name__)


def live_calls_of(episodes_path: str | Path, greedy_path: str | Path) -> list[tuple[dict, dict]]:
    """(episode, live call) pairs of a greedy store in the episode file's order, as the stage lists them (its greedy
    results follow the episodes it played, in file order; the store holds them in the order they finished), so that
    ``--limit`` draws the stage's own seeded subsample. A store record whose episode the file lacks is an error naming
    both files and the line, and so is a record that does not match its digest."""
    records = {}
    for line, rec in iter_jsonl(greedy_path):
        if not record_intact(rec):
            raise IntegrityError(
                f"{greedy_path}:{line}",
                "the record does not match the digest written with it (edited or damaged)",
                "rerun the bon stage (its greedy selector rewrites the record)",
            )
        records[rec.get("episode_id")] = (line, rec)
    episodes = load_episodes([episodes_path], 0, 0)[0]
    known = {ep["episode_id"] for ep in episodes}
    for eid, (line, _) in records.items():
        if eid not in known:
            raise ValueError(f"{greedy_path}:{line}: episode_id {eid!r} is not in {episodes_path}")
    return [
        (ep, c) for ep in episodes if ep["episode_id"] in records for c in records[ep["episode_id"]][1].get("live", [])
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verifier", required=True, help="verifier checkpoint folder")
    ap.add_argument("--episodes", required=True, help="the split's episode file the greedy run played")
    ap.add_argument("--greedy", required=True, help="the bon stage's greedy/episodes.jsonl")
    ap.add_argument("--out", required=True, help="per-item scores (a resumable result store)")
    ap.add_argument("--backend", default="hf", choices=["fast", "hf"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--limit", type=int, default=0, help="a seeded subsample of this many items (0 = all)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%X")
    items = live_items(live_calls_of(a.episodes, a.greedy), a.limit, a.seed)
    if not items:
        print(
            f"error: {a.greedy} holds no live candidates (was it written by the bon stage's greedy selector?)",
            file=sys.stderr,
        )
        return 2
    ver = Verifier.load(
        Path(a.verifier), backend=a.backend, max_new_tokens=a.max_new_tokens, batch_size=a.batch_size, device=a.device
    )
    fp = fingerprint({"verifier": dir_fingerprint(a.verifier), "items": len(items), "seed": a.seed})
    store = ResultStore(a.out, fp, resume=True)
    res = score_live(Path(a.verifier).name, ver, items, store, a.batch_size)
    print(json.dumps({"verifier": str(a.verifier), "greedy": str(a.greedy), **res}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
