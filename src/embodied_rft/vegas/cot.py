"""Verification chains of thought written by an OpenAI-compatible teacher (``synth.cot: teacher``; the paper's
recipe, ``conf/experiment/vegas_paper.yaml``), asked and cached exactly as distillation asks for plans.

Input: the verification records ``vegas/synth.py`` built (each with its prompt, the simulator facts and the
oracle's verdict), the ``teacher:`` config (``backend: openai``) and a cache path (``paths.verify_cache``).
Output: the records with their assistant turn replaced by the teacher's reasoning plus the oracle's verdict line,
and counters for the metrics.

The teacher is shown the verification prompt, the simulator's facts and the verdict, and asked for 1-3 sentences
of reasoning that lead to it: the label stays the oracle's, only the wording is the teacher's. Requests go
through distillation's machinery (``teacher/distill.py``: the ``openai`` backend, retries with backoff, pacing,
the spending budget, the persistent SQLite answer cache keyed by the exact request), so an interrupted synthesis
resumes without paying twice and a rerun is free. A record whose request gave up keeps its templated chain of
thought and is counted (``fallback``); the API key never leaves the client (logs are redacted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import ConfigError
from ..teacher.cache import ResponseCache, cache_key
from ..teacher.config import TeacherConfig
from ..teacher.distill import _Run
from ..teacher.redact import redacting_logs
from ..teacher.registry import build_teacher
from .text import with_verdict

log = logging.getLogger(__name__)

SYSTEM = (
    "You explain whether a household robot's next action is correct. You are given what the robot was shown, "
    "facts from its simulator and the correct verdict. Write one to three short sentences of reasoning that "
    "lead to the verdict, using only those facts. Do not write the verdict line itself."
)


_ROLE = {
    "task": "named by the task",
    "tool": "a tool the task needs",
    "here": "where the robot already stands",
    "other": "not part of the task",
}


def cot_request(rec: dict) -> dict:
    """The teacher 'sample' for one record: its id and the chat messages that ask for the reasoning."""
    f = rec["facts"]
    facts = [
        f"- goal: {rec['task_type']} with {f['object_target']}"
        + (f" and {f['parent_target']}" if f.get("parent_target") else "")
        + (f" under {f['toggle_target']}" if f.get("toggle_target") else ""),
        f"- in hand: {f['held'] or 'nothing'}; the robot is at: {f['place'] or 'the middle of the room'}",
        f"- the simulator {'executes' if f['executes'] else 'rejects'} '{f['action']}'"
        + ("" if f["executes"] else f": {f['feedback']}"),
        *([f"- the action's object {f['arg']}: {_ROLE[f['arg_role']]}"] if f.get("arg_role") else []),
        f"- effect on the remaining plan: {f['reason'].replace('_', ' ')}",
        f"- verdict: the action is {'correct' if rec['verdict'] == 'yes' else 'not correct'}",
    ]
    user = rec["messages"][0]["content"] + "\n\nFacts from the simulator:\n" + "\n".join(facts)
    return {
        "sample_id": rec["record_id"],
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
        "image": None,
    }


def teacher_rewriter(
    teacher_cfg: TeacherConfig, cache_path: str | Path, max_chars: int, *, teacher: Any = None, verdict: str = "last"
) -> Callable[[list[dict]], dict]:
    """A ``rewrite_cots`` callable for :func:`~.synth.run_synth` (module docstring); ``verdict``: where the record's
    verdict line goes (``synth.verdict``)."""
    if teacher is None and teacher_cfg.backend != "openai":
        raise ConfigError(
            f"synth.cot: teacher needs teacher.backend=openai (an OpenAI-compatible endpoint), got "
            f"{teacher_cfg.backend!r}; use synth.cot=template for the offline templates"
        )

    def rewrite(records: list[dict]) -> dict:
        t = teacher if teacher is not None else build_teacher(teacher_cfg)
        secrets = tuple(getattr(t, "secrets", ()))
        cache = ResponseCache(cache_path)
        try:
            with redacting_logs(secrets):
                run = _Run(teacher_cfg, t, cache)
                todo: dict[str, tuple[dict, int]] = {}
                key_of: dict[str, str] = {}
                for rec in records:
                    sample = cot_request(rec)
                    key = cache_key(t.request(sample, 0), 0)
                    key_of[rec["record_id"]] = key
                    todo.setdefault(key, (sample, 0))
                got, missing = run.answers(todo, desc="verification CoTs")
        finally:
            cache_rows = len(cache)
            cache.close()
            t.close()
        fallback = 0
        for rec in records:
            answer = got.get(key_of[rec["record_id"]])
            text = " ".join((answer.text if answer else "").split())[:max_chars].strip()
            if text:
                rec["messages"][-1]["content"] = with_verdict(text, rec["verdict"], verdict)
                rec["cot_source"] = "teacher"
            else:
                fallback += 1
                rec["cot_source"] = "template"
        if fallback:
            log.warning("%d of %d verification CoTs kept their template (no teacher answer)", fallback, len(records))
        c = run.counters
        return {
            "model": t.model,
            "asked": len(todo),
            "answered": len(got),
            "fallback": fallback,
            "missing_by_reason": {k: sum(1 for v in missing.values() if v == k) for k in set(missing.values())},
            "requests": c["requests"],
            "answers_new": c["answers_new"],
            "cache_hits": c["cache_hits"],
            "cache_entries": cache_rows,
            "endpoint_down": run.endpoint_down,
        }

    return rewrite


__all__ = ["SYSTEM", "cot_request", "teacher_rewriter"]
