"""Distillation (paper §1.1): ask a teacher to answer every decomposed sample, keep the answers that validate,
and write them as chat records for SFT.

Inputs: a :class:`TeacherConfig`, decomposed samples (JSONL, the shared sample contract), a cache path, and
for ``validate=simulate`` the episodes by id. Outputs (all written atomically):

- ``out_path``: one record per accepted sample, in sample order:
  ``{"messages": [system, user, {"role": "assistant", "content": <canonical response JSON>}],
  "images": [<path relative to out_path's folder>] (only when the sample has an image), "sample_id": ...}``;
- ``metrics_path``: counts of samples, answers, requests, cache hits, tokens, failures by kind, acceptance,
  and the ids of the samples left out of the output, by reason (``left_out_samples``, first 100 each).

Asking works in rounds: round r asks sample index r of every sample that has no accepted answer yet (all
requests of a round run concurrently), then validates. An answer's cache key fixes its content, so the
output is a function of the cache: a run resumed after a crash (or Ctrl-C, or a budget stop) asks only for
what is missing and writes the same file as an uninterrupted run. A sample whose request gave up (retries
or deadline exhausted) or was refused by the budget is left out of this run's output and asked again next
run; it is never skipped ahead to a later sample index.

Departures from the paper: the paper asked Gemini-2.0-flash once per prompt with no stated filtering;
here answers are validated and may be asked again (``max_attempts``); the default teacher is offline.

Plug-in point (core/plugins.py): a section an extension contributes to ``teacher`` that is on (``config.rewrites``)
rewrites the accepted answers before they are written, registered in :data:`REWRITES` under the section's key
(ReGRPO's reasoning of RoT samples and clean:RoT mix, ``teacher.rot``).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tqdm import tqdm

from embodied_rft.core import plugins
from embodied_rft.core.atomic import atomic_open
from embodied_rft.core.metrics import write_metrics
from embodied_rft.schema import parse_sample

from ..data.jsonl import DataError, read_jsonl, require
from .base import ANSWER_KINDS, REQUEST_KINDS, RUN_KINDS, Answer, FatalTeacherError
from .cache import ResponseCache, cache_key
from .config import TeacherConfig, rewrites
from .redact import redact, redacting_logs
from .registry import build_teacher
from .retry import Budget, BudgetExhausted, Counters, GaveUp, RateLimiter, Stopped, call_with_retry
from .validate import validate_answer

log = logging.getLogger(__name__)

_GAVE_UP_WARNINGS = 20
_LISTED = 100  # left-out sample ids listed per reason in the metrics (the counts are always complete)
# rewrites of the accepted answers by section key: ``rewrite(section, samples, accepted, *, teacher, run)`` changes
# ``accepted`` (canonical responses, None where none is kept) in place and returns its metrics (under the key)
REWRITES = plugins.Registry("distillation rewrite")


# what metrics/distill.json shows (request counts, failures by kind and timing are in metrics/distill.details.json)
DISTILL_HEADLINE = {
    "model": True,
    "validate": True,
    "accepted": True,
    "acceptance_rate": True,
    "kept_gold_rate": True,
    "answers_new": True,
    "endpoint_down": True,
}


def _note(ids: dict[str, list[str]], reason: str, sample: dict) -> None:
    lst = ids.setdefault(reason, [])
    if len(lst) < _LISTED:
        lst.append(str(sample["sample_id"]))


def _parse_sample(rec: dict, where: str, image_root: Path | None = None) -> dict:
    require(rec, "sample_id", str, where)
    require(rec, "history", list, where)
    # the image must exist even for a text teacher: the record written here points SFT at it
    return parse_sample(rec, where, image_root)


def _record(sample: dict, content: str, image_root: Path, out_dir: Path) -> dict:
    messages = [*(dict(m) for m in sample["prompt"]), {"role": "assistant", "content": content}]
    rec: dict[str, Any] = {"messages": messages}
    if sample.get("image"):
        rec["images"] = [os.path.relpath(image_root / sample["image"], out_dir)]
    rec["sample_id"] = sample["sample_id"]
    return rec


class _Run:
    """One distillation run's state: the teacher, cache, pacing, budget and counters."""

    def __init__(self, cfg: TeacherConfig, teacher: Any, cache: ResponseCache | None):
        self.cfg = cfg
        self.teacher = teacher
        self.cache = cache
        self.stop = threading.Event()
        self.counters = Counters()
        self.budget = Budget(cfg.budget)
        self.limiter = RateLimiter(getattr(teacher, "requests_per_minute", 0.0), self.stop)
        self.give_ups_in_a_row = 0
        self.endpoint_down: str | None = None  # why the run stopped asking, when it did

    def fetch(self, key: str, sample: dict, index: int) -> Answer:
        """Ask the teacher (with retries) and store the answer before returning it. The request is rebuilt
        here rather than kept from key time, so a round holds no inlined images in memory."""
        request = self.teacher.request(sample, index)
        rng = random.Random(int(key[:16], 16))  # jitter; seeded so a rerun behaves alike
        answer = call_with_retry(
            lambda: self.teacher.ask(sample, index, request),
            cfg=self.cfg.retry,
            limiter=self.limiter,
            budget=self.budget,
            counters=self.counters,
            stop=self.stop,
            rng=rng,
            label=str(sample["sample_id"]),
        )
        if self.cache is not None:
            self.cache.put(
                key, answer, model=self.teacher.model, sample_id=str(sample["sample_id"]), sample_index=index
            )
        self.budget.add_tokens(answer.tokens_in + answer.tokens_out)
        self.counters.add("tokens_in", answer.tokens_in)
        self.counters.add("tokens_out", answer.tokens_out)
        self.counters.add("answers_new")
        return answer

    def answers(self, todo: dict[str, tuple[dict, int]], desc: str) -> tuple[dict[str, Answer], dict[str, str]]:
        """Answers for ``todo`` (key -> (sample, index)): from the cache, else asked. Returns the
        answers and, for keys left without one, the reason (gave_up | budget)."""
        got: dict[str, Answer] = {}
        missing: dict[str, str] = {}
        ask = []
        rejected_before = self.cache.rejected if self.cache is not None else 0
        for key, item in todo.items():
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                got[key] = hit
                self.counters.add("cache_hits")
            else:
                ask.append((key, item))
        if self.cache is not None and self.cache.rejected > rejected_before:
            # rows that no longer match their digest: deleted by the cache, asked again here (never used)
            self.counters.add("cache_rejected", self.cache.rejected - rejected_before)
        if not ask:
            return got, missing
        bar = tqdm(total=len(ask), desc=desc, unit="req", leave=False, disable=None)
        try:
            if self.teacher.concurrency <= 1:
                for key, (sample, index) in ask:
                    self._settle(key, lambda: self.fetch(key, sample, index), got, missing)  # noqa: B023 - called in this iteration
                    bar.update()
            else:
                self._ask_parallel(ask, got, missing, bar)
        finally:
            bar.close()
        return got, missing

    def _ask_parallel(self, ask: list, got: dict, missing: dict, bar: Any) -> None:
        pool = cf.ThreadPoolExecutor(max_workers=self.teacher.concurrency, thread_name_prefix="teacher")
        futures = {pool.submit(self.fetch, key, *item): key for key, item in ask}
        try:
            for fut in cf.as_completed(futures):
                self._settle(futures[fut], fut.result, got, missing)
                bar.update()
        except BaseException:
            # Ctrl-C or a fatal error: stop new requests; in-flight ones finish (bounded by the request
            # timeout) so answers already being paid for still reach the cache.
            self.stop.set()
            log.warning(
                "stopping: waiting for %d in-flight request(s) to land in the cache",
                sum(1 for f in futures if f.running()),
            )
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _settle(self, key: str, result: Any, got: dict, missing: dict) -> None:
        """Record one request's outcome (called from the collecting thread only)."""
        try:
            got[key] = result()
            self.give_ups_in_a_row = 0
        except BudgetExhausted:
            missing[key] = "budget"
        except GaveUp as exc:
            missing[key] = "gave_up"
            self.counters.add("gave_up_logged")
            # a dead endpoint gives up on every request: say so a few times, not 40k times
            level = logging.WARNING if self.counters["gave_up_logged"] <= _GAVE_UP_WARNINGS else logging.DEBUG
            log.log(level, "request gave up (%s): %s", exc.kind, exc)
            self._note_give_up(exc)
        except Stopped:
            missing[key] = "stopped"

    def _note_give_up(self, exc: GaveUp) -> None:
        """Stop asking once ``max_consecutive_give_ups`` requests in a row gave up: without this a dead endpoint
        costs up to max_total_s per sample, i.e. days for a full data set, to produce nothing."""
        self.give_ups_in_a_row += 1
        limit = self.cfg.retry.max_consecutive_give_ups
        if limit and self.give_ups_in_a_row >= limit and self.endpoint_down is None:
            self.endpoint_down = f"{self.give_ups_in_a_row} requests in a row gave up (last: {exc.kind})"
            log.error(
                "the teacher endpoint looks down: %s; stopping this run (a rerun asks again what is missing)",
                self.endpoint_down,
            )
            self.stop.set()


def run_distill(
    cfg: TeacherConfig,
    samples_path: str | Path,
    out_path: str | Path,
    cache_path: str | Path,
    metrics_path: str | Path,
    *,
    episodes_by_id: Mapping[str, dict] | None = None,
    image_root: str | Path | None = None,
    teacher: Any = None,
) -> dict[str, Any]:
    """Distil ``samples_path`` into ``out_path``; returns the metrics also written to ``metrics_path``.

    ``image_root``: the folder a sample's ``image`` path is relative to (default: the samples file's
    folder, where ``decompose`` writes ``images/``). ``teacher``: an already built backend (tests);
    default :func:`build_teacher` from ``cfg``. Raises FatalTeacherError (no key, bad credentials),
    with the cache kept, when the run cannot go on.
    """
    t0 = time.monotonic()
    samples_path, out_path = Path(samples_path), Path(out_path)
    image_root = Path(image_root) if image_root is not None else samples_path.parent
    samples = read_jsonl(samples_path, lambda rec, where: _parse_sample(rec, where, image_root))
    if not samples:
        # an empty SFT set would only fail later, in `sft`, naming the wrong file
        raise DataError(
            f"{samples_path}: no decomposed samples to distil; check decompose.train_split and the episodes"
        )
    if cfg.max_samples is not None:
        samples = samples[: cfg.max_samples]
    if cfg.validate == "simulate":
        if episodes_by_id is None:
            raise DataError("teacher.validate=simulate needs episodes_by_id (the episodes the samples came from)")
        lost = sorted({s.get("episode_id") for s in samples} - set(episodes_by_id))
        if lost:
            raise DataError(f"{samples_path}: {len(lost)} sample episode(s) not in episodes_by_id, e.g. {lost[0]!r}")

    teacher = teacher if teacher is not None else build_teacher(cfg, image_root)
    secrets = tuple(getattr(teacher, "secrets", ()))
    with redacting_logs(secrets):
        try:
            metrics = _distill(cfg, teacher, samples, out_path, cache_path, image_root, episodes_by_id)
        except FatalTeacherError as exc:
            raise FatalTeacherError(redact(str(exc), secrets)) from None
        except Exception as exc:
            # an unexpected error (say, a library quoting a header it could not encode) must not carry the
            # key into a traceback: re-raise it scrubbed, without the chained original
            if any(sec and sec in str(exc) for sec in secrets):
                raise FatalTeacherError(f"{type(exc).__name__}: {redact(str(exc), secrets)}") from None
            raise
        finally:
            teacher.close()
    metrics["seconds"] = round(time.monotonic() - t0, 2)
    write_metrics(metrics_path, metrics, DISTILL_HEADLINE)
    return metrics


def _distill(
    cfg: TeacherConfig,
    teacher: Any,
    samples: list[dict],
    out_path: Path,
    cache_path: str | Path,
    image_root: Path,
    episodes_by_id: Mapping[str, dict] | None,
) -> dict[str, Any]:
    cache = ResponseCache(cache_path) if teacher.cached else None
    run = _Run(cfg, teacher, cache)
    n = len(samples)
    accepted: list[str | None] = [None] * n
    accepted_at: Counter[int] = Counter()
    verdicts: Counter[str] = Counter()
    left_out: Counter[str] = Counter()  # samples without an answer this run, by reason
    left_out_ids: dict[str, list[str]] = {}  # ... and which (the first _LISTED of each reason)
    open_ = list(range(n))
    gold_plans = 0  # kept answers whose plan is the whole gold remaining plan
    # how good the kept data is where validation does not require the gold plan (none, simulate, a min_prefix):
    # the teacher's accuracy on what SFT will learn; exact-prefix validation keeps only gold plans
    kept_is_gold = cfg.validate == "prefix" and cfg.min_prefix is None
    try:
        for r in range(cfg.max_attempts):
            if not open_:
                break
            todo: dict[str, tuple[dict, int]] = {}
            key_of: dict[int, str] = {}
            for i in open_:
                key = cache_key(teacher.request(samples[i], r), r)
                key_of[i] = key
                todo.setdefault(key, (samples[i], r))
            got, missing = run.answers(todo, desc=f"distill round {r + 1}/{cfg.max_attempts}")
            still = []
            for i in open_:
                key = key_of[i]
                if key in missing:
                    left_out[missing[key]] += 1
                    _note(left_out_ids, missing[key], samples[i])
                    continue  # asked again next run, at this same sample index
                ep = episodes_by_id.get(samples[i].get("episode_id")) if episodes_by_id is not None else None
                v = validate_answer(got[key].text, samples[i], cfg.validate, cfg.min_prefix, ep)
                if v.accepted:
                    accepted[i] = v.canonical
                    accepted_at[r + 1] += 1
                    verdicts["accepted"] += 1
                    gold_plans += kept_is_gold or validate_answer(got[key].text, samples[i], "prefix").accepted
                else:
                    verdicts[v.kind] += 1
                    log.debug("sample %s index %d rejected (%s): %s", samples[i]["sample_id"], r, v.kind, v.reason)
                    still.append(i)
            open_ = still
        rewritten = {
            name: REWRITES.lookup(name, f"teacher.{name}")(section, samples, accepted, teacher=teacher, run=run)
            for name, section in cfg.extensions.items()
            if rewrites(section)
        }
    finally:
        if cache is not None:
            cache_rows = len(cache)
            cache.close()
    left_out["rejected"] += len(open_)  # every try answered, none valid
    for i in open_:
        _note(left_out_ids, "rejected", samples[i])

    out_dir = out_path.parent
    kept = 0
    with atomic_open(out_path) as fh:
        for i, content in enumerate(accepted):
            if content is not None:
                rec = _record(samples[i], content, image_root, out_dir)
                fh.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
                kept += 1
    if kept == 0 and n:
        log.warning("distill kept no sample of %d: check teacher.validate and the failures in the metrics", n)

    c = run.counters
    judged = sum(verdicts.values())
    failures = {k: c[f"failures.{k}"] for k in REQUEST_KINDS}
    failures.update({k: verdicts[k] for k in ANSWER_KINDS})
    failures.update({k: left_out[k] for k in RUN_KINDS})
    metrics: dict[str, Any] = {
        "backend": cfg.backend,
        "model": teacher.model,
        "validate": cfg.validate,
        "samples": n,
        "accepted": kept,
        "yield": round(kept / n, 4) if n else 0.0,
        "answers": judged,
        "acceptance_rate": round(verdicts["accepted"] / judged, 4) if judged else 0.0,
        "accepted_at_attempt": {str(k): accepted_at[k] for k in sorted(accepted_at)},
        # of the kept samples, those whose plan is the gold remaining plan: the teacher's accuracy on the SFT data
        "kept_gold_plans": gold_plans,
        "kept_gold_rate": round(gold_plans / kept, 4) if kept else 0.0,
        "rejected_samples": left_out["rejected"],
        "requests": c["requests"],
        "answers_new": c["answers_new"],
        "cache_hits": c["cache_hits"],
        # cached answers that no longer matched their digest (edited or damaged): deleted and asked again
        "cache_rejected": c["cache_rejected"],
        "tokens_in": c["tokens_in"],
        "tokens_out": c["tokens_out"],
        "failures": failures,
        # which samples are missing from the output and why (counts above; ids capped per reason)
        "left_out_samples": {k: v for k, v in sorted(left_out_ids.items())},
        "stopped_by_budget": left_out["budget"] > 0,
        # set when the run stopped asking because teacher.retry.max_consecutive_give_ups requests in a row gave up
        "endpoint_down": run.endpoint_down,
        "complete": left_out["budget"] + left_out["gave_up"] + left_out["stopped"] == 0,
    }
    if cache is not None:
        metrics["cache_entries"] = cache_rows
    metrics.update(rewritten)
    log.info(
        "distill: %d/%d samples kept (answer acceptance %.1f%%), %d requests, %d cache hits, %d+%d tokens%s",
        kept,
        n,
        100 * metrics["acceptance_rate"],
        metrics["requests"],
        metrics["cache_hits"],
        metrics["tokens_in"],
        metrics["tokens_out"],
        "; STOPPED BY BUDGET" if metrics["stopped_by_budget"] else "",
    )
    return metrics
