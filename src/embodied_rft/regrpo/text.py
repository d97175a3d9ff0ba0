"""The reflection triple's text: format, parser, the reflection span a reward or a trigger counts, and the quality
gates (docs/regrpo.md §2-3).

Input: a triple (:class:`Triple`: error type, evidence, fix plan), a response text, or a RoT sample's metadata
(its ``rot`` field: the failed action, the simulator's feedback o_fail, the corrected plan). Output:

- :func:`format_triple` / :func:`parse_triple`: ``ErrorType: <type>. Evidence: <e>. FixPlan: <f>.``, the text that
  goes in the EB response's ``reasoning_and_reflection`` (the corrected remaining plan goes in ``executable_plan``);
- :func:`reflection_span`: the reflection block of a response — from its first marker (``ErrorType:``,
  ``Evidence:``, ``FixPlan:``) to the end of ``reasoning_and_reflection``; "" when it has none; and
  :func:`reflection_tokens`: its length in the caller's tokens (the policy tokenizer) or, without one, in words;
- :func:`gate`: the released code's quality gates — schema; evidence grounded in o_fail (a token of length >= 4
  of o_fail occurs in the evidence, or >= 2 tokens are shared); no label leak (the corrected action does not
  occur in the prompt before its turn, the expert's own earlier steps aside); failed != corrected.

Departure: the grounding rule ignores the fixed words of EB's feedback and of the observation renderer ("Last action
is invalid", "You see", "In hand", ...): they occur in every o_fail, so with them any sentence mentioning "action"
would count as grounded. Pure; no imports beyond the response parser.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..data.response import parse_response

# the four error types of the reflection triple (ReGRPO; docs/regrpo.md §2)
ERROR_TYPES = ("GroundingDrift", "ToolMismatch", "ArgInvalid", "InfoInsufficient")

MARKERS = ("ErrorType:", "Evidence:", "FixPlan:")
_TRIPLE_RE = re.compile(r"ErrorType:\s*(?P<t>[A-Za-z]+)\W*?Evidence:\s*(?P<e>.*?)\s*FixPlan:\s*(?P<f>.*)", re.S)
_MARKER_RE = re.compile("|".join(re.escape(m) for m in MARKERS))
_TOKEN_RE = re.compile(r"[a-z0-9_./:-]+")
_WORD_RE = re.compile(r"\S+")
MIN_GROUNDED_TOKEN_LEN = 4
MIN_TOKEN_OVERLAP = 2
# words every o_fail may hold whatever happened (EB's feedback prefixes, the renderer's fixed lines)
_BOILERPLATE = frozenset(
    "last action is invalid executed successfully you are at the in middle of room see around hand nothing "
    "this may not exist scene try to explore other instances instead find object before picking up it".split()
)


class Triple(NamedTuple):
    """One reflection: the error type, the evidence (quoting the simulator) and the fix plan."""

    error_type: str
    evidence: str
    fix_plan: str


def clause(text: str) -> str:
    """One sentence of the triple: whitespace collapsed, no closing period (the format adds it)."""
    return " ".join(str(text).split()).rstrip(" .")


def format_triple(t: Triple) -> str:
    """The triple as the text of ``reasoning_and_reflection``."""
    return f"ErrorType: {t.error_type}. Evidence: {clause(t.evidence)}. FixPlan: {clause(t.fix_plan)}."


def parse_triple(text: object) -> Triple | None:
    """The triple a reasoning text states (markers in order), or None."""
    if not isinstance(text, str):
        return None
    m = _TRIPLE_RE.search(text)
    if m is None:
        return None
    return Triple(m.group("t"), clause(m.group("e")), clause(m.group("f")))


def _reasoning(response: object) -> str | None:
    obj = response if isinstance(response, dict) else parse_response(response)
    if isinstance(obj, dict):
        r = obj.get("reasoning_and_reflection")
        return r if isinstance(r, str) else ""
    return None


def reflection_span(response: object) -> str:
    """The reflection block of a response (module docstring); an unreadable response's raw text is searched up to
    the closing quote of the string the first marker sits in."""
    text = _reasoning(response)
    if text is None:
        if not isinstance(response, str):
            return ""
        m = _MARKER_RE.search(response)
        if m is None:
            return ""
        end = response.find('"', m.start())
        return response[m.start() : end if end >= 0 else len(response)]
    m = _MARKER_RE.search(text)
    return text[m.start() :] if m else ""


def count_words(text: str) -> int:
    return len(_WORD_RE.findall(text))


def reflection_tokens(response: object, count: Callable[[str], int] | None = None) -> int:
    """Tokens of :func:`reflection_span` (``count``: the policy tokenizer's count; default: words)."""
    span = reflection_span(response)
    return (count or count_words)(span) if span else 0


def last_failed(history: Sequence[dict]) -> bool:
    """Whether the last action of a prompt history failed (EB's feedback says it is invalid)."""
    return bool(history) and str(history[-1].get("feedback", "")).startswith("Last action is invalid")


# ---------------------------------------------------------------------------------------------- the gates


def _tokens(text: str) -> set[str]:
    toks = (t.strip("./:-") for t in _TOKEN_RE.findall(text.lower()))
    return {t for t in toks if len(t) >= 2 and t not in _BOILERPLATE}


def grounded(evidence: str, o_fail: str) -> bool:
    """Evidence grounded in the failure observation (module docstring)."""
    if not evidence or not o_fail:
        return False
    ev = evidence.lower()
    obs = _tokens(o_fail)
    if any(len(t) >= MIN_GROUNDED_TOKEN_LEN and t in ev for t in obs):
        return True
    return len(obs & _tokens(evidence)) >= MIN_TOKEN_OVERLAP


def _prefix_step(line: str, n_prefix: int) -> bool:
    m = re.match(r"(?:Step )?(\d+)[.,] ", line)
    return m is not None and 1 <= int(m.group(1)) <= n_prefix


def gate(triple: Triple | None, rot: dict, prompt_text: str, n_prefix: int) -> list[str]:
    """The problems of one RoT sample's triple ([] = it passes every gate). ``rot`` is the sample's metadata,
    ``prompt_text`` its user prompt and ``n_prefix`` the number of history steps before the failed action (the
    expert's own, which may name the corrected action legitimately: after heating, the apple is found again)."""
    problems = []
    if triple is None:
        return ["schema: no 'ErrorType: ... Evidence: ... FixPlan: ...' triple"]
    if triple.error_type not in ERROR_TYPES:
        problems.append(f"schema: error type {triple.error_type!r} is not one of {list(ERROR_TYPES)}")
    elif triple.error_type != rot.get("error_type"):
        problems.append(f"schema: error type {triple.error_type!r}, the near-miss is {rot.get('error_type')!r}")
    if not triple.evidence or not triple.fix_plan:
        problems.append("schema: empty evidence or fix plan")
    elif parse_triple(format_triple(triple)) != triple:
        problems.append("schema: the triple does not read back from its text")
    if triple.evidence and not grounded(triple.evidence, str(rot.get("o_fail", ""))):
        problems.append("evidence: no token of the failure observation")
    corrected = rot.get("corrected") or [[None, ""]]
    name = str(corrected[0][1])
    # history lines are numbered ("1. <id> <name>: ...", EB's "Step 1, ..."): drop the expert's own steps
    kept = [ln for ln in prompt_text.split("\n") if not _prefix_step(ln, n_prefix)]
    if name and name in "\n".join(kept):
        problems.append(f"leak: the corrected action {name!r} occurs in the prompt before its turn")
    if list(rot.get("failed_action") or []) == list(corrected[0]):
        problems.append("failed == corrected")
    return problems


__all__ = [
    "MARKERS",
    "Triple",
    "clause",
    "count_words",
    "format_triple",
    "gate",
    "grounded",
    "last_failed",
    "parse_triple",
    "reflection_span",
    "reflection_tokens",
]
