"""The paper's reward: R = R_format + R_accuracy, at most 1.5 (docs/facts.md §1.4).

Inputs: a response (model text: ``str``/``bytes``, or an already-parsed ``dict``) and the decomposed
sample's ``label``: its JSON string or dict ``{"gold": [[id, name], ...], "extra_actions": [...]}``, or a
bare list of ``[id, name]`` pairs, of ``{"action_id", "action_name"}`` dicts or of action names.
Output: a :class:`RewardBreakdown` (structure, valid, match, accuracy, total, accuracy_full, plus counts).
:func:`score` is pure and deterministic and never raises on any response or label; ``total`` is always in
[0, 1.5]. It is the one reward used by the local GRPO engine, the OpenRLHF reward shim and evaluation.

Variants (``REWARDS``):

``paper`` (default) — the paper's formulas:
  * R_structure = 0.125 iff the object has all four keys (their values are not inspected).
  * R_valid = 0.125 × #well-typed steps / #steps; well-typed = a JSON object whose ``action_id`` is a JSON
    integer (``true``/``false``, ``3.0`` and ``"3"`` are not) and whose ``action_name`` is a string.
  * R_match = 0.25 × #steps whose (id, name) is an entry of the sample's action map / #steps; the map is
    ``ActionSpace(extra_actions)``: EB's 162 global actions plus the scene's extras, names exact.
  * R_accuracy = n(n+1) / (k(k+1)), k = len(gold), n = the longest prefix of predicted steps *equal* to
    the gold steps. **Equal means the exact pair**: a well-typed step whose ``action_id`` equals the gold
    id and whose ``action_name`` equals the gold name, case-sensitively. EB executes only the id, so a
    name-only match would reward a plan that does something else; an id-only match would reward a name
    R_match already calls wrong. Steps beyond k cost nothing in R_accuracy (they do count in the
    R_valid/R_match denominators). k = 0 (an empty or unreadable label) gives R_accuracy = 0.
  * Parsing goes through the tolerant parser (``embodied_rft.data.response``: code fences, surrounding
    prose, light repair); an unrecoverable response scores 0 everywhere.
  * ``accuracy_full`` = 1.0 iff n == k ≥ 1: the C_x count of the online filter (docs/facts.md §1.6).

``rr_code`` — the released RR reward file (``reward_func_embench_alfred_nonlinear.py``), quirks included:
  * strict ``json.loads`` of the stripped text; anything that is not then a JSON object scores 0.
  * accuracy compares **names only, lower-cased**, over the object steps; ids are ignored.
  * if k == 1 and the plan has more than one step, 0.25 is subtracted from the accuracy term, so
    ``accuracy`` can be −0.25 (full prefix + extra steps → 0.75). Otherwise extra steps are free.
  * R_valid counts ``true``/``false`` ids as integers (Python's ``isinstance(True, int)``); R_match
    compares lower-cased names and never matches a bool id.
  * every input on which the RR code raises (and its trainer then scores 0): a non-object plan step,
    an ``action_name`` that is present but not a string, an ``executable_plan`` that is ``null``, a
    number or a non-empty string/object — scores 0 everywhere here too.
  * departures, to keep one contract: ``total`` is clamped at 0 (the RR code lets it reach −0.25 when
    the format terms are below 0.25), ``accuracy_full`` = 1.0 only when the accuracy term is exactly 1
    (so a penalised k == 1 answer is not "full"), responses longer than ``max_chars`` are cut there, and
    R_match uses EB's ``ActionSpace(extra_actions)`` — the RR file matched against a fixed 225-entry
    ALFRED high-level map ("goto apple", "pickup apple", ...), which does not apply to EB actions.

An extension adds a variant (a plug-in point, core/plugins.py): it registers its scoring function in ``REWARDS``
under the variant's name and its section ``reward.<name>`` in ``plugins.SECTIONS``, and config data names its module
(``plugins.<name>``); e.g. ReGRPO's ``regrpo``, λ_exec·success − η·reflection cost + λ_val·V (docs/regrpo.md §5),
whose other terms are the paper's and whose ``total`` may be negative. The section's object supplies what the
variant needs beyond the response and the label (:class:`RewardConfig`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from embodied_rft.config import as_dict, check
from embodied_rft.core import plugins
from embodied_rft.data.response import DEFAULT_MAX_CHARS, RESPONSE_KEYS, parse_response
from embodied_rft.world.actions import ActionSpace, global_actions

logger = logging.getLogger(__name__)

MAX_REWARD = 1.5
_KEYSET = frozenset(RESPONSE_KEYS)
_MAX_LABEL_CHARS = 1 << 20  # a label is trusted data, but a garbage megabyte is not worth parsing
_WARN_LIMIT = 5
_warned: dict[str, int] = {}


def _warn(kind: str, msg: str, *args: object, exc_info: bool = False) -> None:
    """Log the first few warnings of each kind: a bad label repeats G times per prompt, every step."""
    n = _warned.get(kind, 0)
    if n < _WARN_LIMIT:
        _warned[kind] = n + 1
        suffix = " (further warnings of this kind suppressed)" if n + 1 == _WARN_LIMIT else ""
        logger.warning(msg + suffix, *args, exc_info=exc_info)


@dataclass(frozen=True, slots=True)
class RewardBreakdown:
    """One response's reward terms. ``total`` = structure + valid + match + accuracy (clamped to
    [0, 1.5]); ``accuracy_full`` is 1.0 when the whole remaining gold plan was matched."""

    structure: float
    valid: float
    match: float
    accuracy: float
    total: float
    accuracy_full: float
    n_matched: int = 0  # n: matched prefix length
    n_gold: int = 0  # k: gold plan length (remaining actions a_n..a_k)
    n_steps: int = 0  # predicted executable_plan length (0 when there is no plan list)
    parsed: bool = False  # a JSON object was recovered from the response
    reflection_tokens: int = 0  # an extension's variant (regrpo): the reflection block's tokens

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _zero(k: int = 0) -> RewardBreakdown:
    return RewardBreakdown(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, k, 0, False)


# --------------------------------------------------------------------------------------------- labels


class Gold(NamedTuple):
    """A parsed label: gold ``(id, name)`` pairs (an unreadable entry is ``(None, None)``, which
    matches nothing) and the scene's extra action names."""

    pairs: tuple[tuple[int | None, str | None], ...]
    extras: tuple[str, ...]


_EMPTY_GOLD = Gold((), ())


class _ActionMap(NamedTuple):
    names: tuple[str, ...]
    lower: tuple[str, ...]
    index: dict[str, int]


@functools.lru_cache(maxsize=1024)
def _action_map(extras: tuple[str, ...]) -> _ActionMap:
    """The R_match map for a scene, cached by its extras (a scene's samples share one)."""
    try:
        names = ActionSpace(extras).names
    except ValueError as exc:
        # Extras that repeat an action break the id order EB defines; score against the list as given
        # rather than raise inside a trainer.
        _warn("extras", "label extra_actions are inconsistent (%s); matching against them as given", exc)
        names = global_actions() + extras
    index: dict[str, int] = {}
    for i, n in enumerate(names):
        index.setdefault(n, i)
    return _ActionMap(names, tuple(n.lower() for n in names), index)


def _gold_entry(entry: object) -> tuple[object, object]:
    if isinstance(entry, Mapping):
        aid, name = entry.get("action_id"), entry.get("action_name")
    elif isinstance(entry, (list, tuple)) and len(entry) == 2:
        aid, name = entry
    elif isinstance(entry, str):
        aid, name = None, entry  # a bare name (the RR code's label format); its id is looked up
    else:
        return None, None
    if not isinstance(name, str):
        return None, None
    if aid is not None and (not isinstance(aid, int) or isinstance(aid, bool)):
        return None, None
    return aid, name


def _build_gold(obj: object) -> Gold:
    if isinstance(obj, Mapping):
        gold, extras = obj.get("gold"), obj.get("extra_actions", ())
    else:
        gold, extras = obj, ()
    if not isinstance(gold, (list, tuple)) or not isinstance(extras, (list, tuple)):
        _warn("label", "label has no readable gold list; scoring accuracy as 0: %.200r", obj)
        return _EMPTY_GOLD
    extras_t = tuple(e for e in extras if isinstance(e, str))
    amap = _action_map(extras_t)
    pairs = []
    for entry in gold:
        aid, name = _gold_entry(entry)
        if name is not None and aid is None:
            aid = amap.index.get(name)
        if name is None:
            _warn("gold_entry", "unreadable gold entry %.200r; it matches no prediction", entry)
        pairs.append((aid, name))
    return Gold(tuple(pairs), extras_t)


def _gold_from_text(text: str) -> Gold:
    if len(text) > _MAX_LABEL_CHARS:
        _warn("label", "label longer than %d characters; scoring accuracy as 0", _MAX_LABEL_CHARS)
        return _EMPTY_GOLD
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        try:  # the RR code's labels are Python literals: "['find a ladle', ...]"
            with warnings.catch_warnings():  # junk such as "1e9x" makes the compiler warn, not fail
                warnings.simplefilter("ignore", SyntaxWarning)
                obj = ast.literal_eval(text.strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            _warn("label", "label is neither JSON nor a Python literal; scoring accuracy as 0: %.200r", text)
            return _EMPTY_GOLD
    return _build_gold(obj)


_gold_cached = functools.lru_cache(maxsize=8192)(_gold_from_text)
_CACHED_LABEL_CHARS = 8192


def parse_label(label: object) -> Gold:
    """A sample's label as :class:`Gold`; never raises (an unreadable label is an empty gold plan)."""
    try:
        if isinstance(label, (bytes, bytearray)):
            label = bytes(label).decode("utf-8", errors="replace")
        if isinstance(label, str):
            # G responses per prompt share one label: cache typical ones (not huge junk: memory).
            return _gold_cached(label) if len(label) <= _CACHED_LABEL_CHARS else _gold_from_text(label)
        if isinstance(label, Gold):
            return label
        return _build_gold(label)
    except Exception:  # noqa: BLE001 - see score(): a label bug must not take a trainer down
        _warn("label_crash", "could not read label %.200r", label, exc_info=True)
        return _EMPTY_GOLD


# --------------------------------------------------------------------------------------------- scoring


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _prefix_accuracy(n: int, k: int) -> float:
    return n * (n + 1) / (k * (k + 1)) if k else 0.0


def _clamp(total: float) -> float:
    return 0.0 if total < 0.0 else MAX_REWARD if total > MAX_REWARD else total


def score_paper(response: object, label: object, *, max_chars: int = DEFAULT_MAX_CHARS) -> RewardBreakdown:
    """The paper's reward (module docstring, variant ``paper``)."""
    gold = parse_label(label)
    k = len(gold.pairs)
    obj = response if isinstance(response, dict) else parse_response(response, max_chars=max_chars)
    if obj is None:
        return _zero(k)
    structure = 0.125 if _KEYSET.issubset(obj) else 0.0
    plan = obj.get("executable_plan")
    steps = plan if isinstance(plan, list) else []
    n_steps = len(steps)
    names = _action_map(gold.extras).names
    n_names = len(names)
    pairs = gold.pairs
    good = ok = matched = 0
    in_prefix = True
    # One pass (this is the trainer's hot loop): R_valid and R_match count every step, the prefix
    # stops at the first step that is not the exact gold pair. Exact types: JSON ints and strings.
    for i, step in enumerate(steps):
        if type(step) is dict:
            aid, name = step.get("action_id"), step.get("action_name")
            if type(aid) is int and type(name) is str:
                good += 1
                if 0 <= aid < n_names and names[aid] == name:
                    ok += 1
                if in_prefix and i < k and pairs[i][0] == aid and pairs[i][1] == name:
                    matched += 1
                    continue
        in_prefix = False
    valid = 0.125 * good / n_steps if n_steps else 0.0
    match = 0.25 * ok / n_steps if n_steps else 0.0
    accuracy = _prefix_accuracy(matched, k)
    full = 1.0 if k and matched == k else 0.0
    total = _clamp(structure + valid + match + accuracy)
    return RewardBreakdown(structure, valid, match, accuracy, total, full, matched, k, n_steps, True)


def _rr_load(response: object, max_chars: int) -> object:
    if isinstance(response, dict):
        return response
    if isinstance(response, (bytes, bytearray)):
        response = bytes(response[: 4 * max_chars]).decode("utf-8", errors="replace")
    if not isinstance(response, str):
        return None
    text = response[:max_chars].strip()
    if not text:
        return None
    try:
        return json.loads(text)  # strict, as the RR code
    except (ValueError, RecursionError):
        return None


def score_rr_code(response: object, label: object, *, max_chars: int = DEFAULT_MAX_CHARS) -> RewardBreakdown:
    """The RR code's reward, quirks included (module docstring, variant ``rr_code``)."""
    gold = parse_label(label)
    k = len(gold.pairs)
    data = _rr_load(response, max_chars)
    if not isinstance(data, dict):
        return _zero(k)
    plan = data.get("executable_plan", [])
    if isinstance(plan, list):
        steps = plan
    elif isinstance(plan, (str, dict)) and not plan:
        steps = []  # iterating an empty string/object is harmless in the RR code
    else:
        return _zero(k)  # the RR code raises on these and its trainer records 0
    for step in steps:
        if not isinstance(step, dict) or not isinstance(step.get("action_name", ""), str):
            return _zero(k)  # ditto: .get on a non-object step, .lower() on a non-string name
    n_steps = len(steps)
    amap = _action_map(gold.extras)
    n_names = len(amap.names)
    structure = 0.125 if _KEYSET.issubset(data) else 0.0
    good = ok = 0
    for step in steps:
        aid, name = step.get("action_id"), step.get("action_name", "")
        if isinstance(aid, int) and isinstance(step.get("action_name"), str):  # bools count, as in RR
            good += 1
        if _is_int(aid) and 0 <= aid < n_names and name.lower() == amap.lower[aid]:
            ok += 1
    valid = 0.125 * good / n_steps if n_steps else 0.0
    match = 0.25 * ok / n_steps if n_steps else 0.0
    matched = 0
    for step, (_, gname) in zip(steps, gold.pairs):
        if gname is None or step.get("action_name", "").lower() != gname.lower():
            break
        matched += 1
    accuracy = _prefix_accuracy(matched, k)
    if k == 1 and n_steps > 1:
        accuracy -= 0.25
    full = 1.0 if accuracy == 1.0 else 0.0
    total = _clamp(structure + valid + match + accuracy)
    return RewardBreakdown(structure, valid, match, accuracy, total, full, matched, k, n_steps, True)


RewardFn = Callable[..., RewardBreakdown]
# the variants by name: the core's two, then the extensions' (module docstring)
REWARDS = plugins.Registry("reward variant", paper=score_paper, rr_code=score_rr_code)


def _reward_fn(variant: str) -> RewardFn:
    fn = REWARDS.find(variant, "reward.variant")
    if fn is None:  # a programming/config error, not a data error: fail loudly
        raise ValueError(f"unknown reward variant {variant!r}; choose one of {sorted(REWARDS)}")
    return fn


def score(
    response: object, label: object, variant: str = "paper", *, max_chars: int = DEFAULT_MAX_CHARS, **options: Any
) -> RewardBreakdown:
    """Score one response against its sample's label. Never raises for any response or label; only an
    unknown ``variant`` name raises ValueError. ``options`` go to the variant (an extension's coefficients)."""
    fn = _reward_fn(variant)
    try:
        return fn(response, label, max_chars=max_chars, **options)
    except Exception:  # noqa: BLE001 - OpenRLHF swallows reward exceptions and lets the sample through
        _warn("score_crash", "reward %s failed on response %.200r; scoring 0", variant, response, exc_info=True)
        return _zero()


def score_batch(
    responses: Sequence[object],
    labels: Sequence[object],
    variant: str = "paper",
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    **options: Any,
) -> list[RewardBreakdown]:
    """:func:`score` over aligned sequences (ValueError when their lengths differ)."""
    if len(responses) != len(labels):
        raise ValueError(f"score_batch: {len(responses)} responses but {len(labels)} labels")
    _reward_fn(variant)
    return [score(r, lab, variant, max_chars=max_chars, **options) for r, lab in zip(responses, labels)]


@dataclass(frozen=True)
class RewardConfig:
    """The ``reward:`` config section. An extension variant's own section (``reward.<variant>``) is its
    extension's object, which may define ``options(**context)`` (the scoring function's keyword options; context:
    ``count_tokens``, the policy tokenizer's count, and ``executed``, an executor's result), ``openrlhf_options()``
    (the options OpenRLHF's reward file gets, None when it cannot score the variant), ``executor(episodes_path)``
    (``(response, sample) -> (success, value)`` run from the sample's state, or None) and ``terms`` (the breakdown
    fields the variant adds, logged beside the paper's)."""

    # Which reward: "paper" = docs/facts.md §1.4 as written (the paper's; default); "rr_code" = the released
    # RR reward file with its quirks (lower-cased name matching, k == 1 penalty), for ablations; or an extension's
    # (module docstring), e.g. "regrpo" = ReGRPO's success minus reflection cost (docs/regrpo.md).
    variant: str = "paper"
    # Characters of a response that are looked at; the rest is ignored (unit: characters). 64 Ki is four
    # times the paper's 4096-token generation cap; the paper had no cap.
    max_response_chars: int = DEFAULT_MAX_CHARS
    # the extension variants' sections, e.g. reward.regrpo (core/plugins.py); only the variant's own is used
    extensions: dict[str, Any] = plugins.extensions()

    def __post_init__(self) -> None:
        REWARDS.lookup(self.variant, "reward.variant")
        check(self.max_response_chars >= 1024, "reward.max_response_chars", "must be >= 1024 characters")
        used = plugins.sections(self, "reward", lambda name, _: name == self.variant)
        object.__setattr__(self, "extensions", used)

    @property
    def section(self) -> Any:
        """The variant's own section (an extension's object), or None."""
        return self.extensions.get(self.variant)

    def _hook(self, name: str) -> Any:
        return getattr(self.section, name, None)

    def options(self, **context: Any) -> dict[str, Any]:
        """The variant's keyword options (class docstring); {} for the core's variants."""
        hook = self._hook("options")
        return hook(**context) if hook else {}

    def openrlhf_options(self) -> dict[str, Any] | None:
        """What OpenRLHF's reward file gets as ``EMBODIED_RFT_REWARD_OPTIONS`` (class docstring)."""
        hook = self._hook("openrlhf_options")
        return hook() if hook else None

    def executor(self, episodes_path: Any) -> Any:
        """The variant's executor over the episodes at ``episodes_path`` (class docstring), or None."""
        hook = self._hook("executor")
        return hook(episodes_path) if hook else None

    def identity(self) -> dict[str, Any]:
        """What decides the scores, for checkpoint fingerprints: the core's keys and the variant's own section only
        (so a variant's fingerprint does not change when an extension's section is added or edited)."""
        d = as_dict(self)
        return {k: v for k, v in d.items() if k in ("variant", "max_response_chars", self.variant)}

    def score(
        self, response: object, label: object, *, count_tokens: Any = None, executed: Any = None
    ) -> RewardBreakdown:
        opts = self.options(count_tokens=count_tokens, executed=executed)
        return score(response, label, self.variant, max_chars=self.max_response_chars, **opts)

    def score_batch(self, responses: Sequence[object], labels: Sequence[object]) -> list[RewardBreakdown]:
        return score_batch(responses, labels, self.variant, max_chars=self.max_response_chars, **self.options())


class BoundReward:
    """A reward config bound to the policy's token counter and, when the variant has one, an executor
    ``(response, sample) -> (success, value)``; ``score`` takes the sample. Duck-types the config for the GRPO
    engine and its held-out check."""

    def __init__(self, cfg: RewardConfig, count_tokens: Callable[[str], int] | None = None, executor: Any = None):
        self.cfg, self.count_tokens, self.executor = cfg, count_tokens, executor
        self.variant, self.max_response_chars = cfg.variant, cfg.max_response_chars

    def score(self, response: object, label: object, sample: dict | None = None) -> RewardBreakdown:
        done = self.executor(response, sample) if self.executor is not None and sample is not None else None
        return self.cfg.score(response, label, count_tokens=self.count_tokens, executed=done)

    def score_batch(self, responses: list, labels: list) -> list[RewardBreakdown]:
        return [self.score(r, lab) for r, lab in zip(responses, labels, strict=True)]


__all__ = [
    "MAX_REWARD",
    "REWARDS",
    "BoundReward",
    "Gold",
    "RewardBreakdown",
    "RewardConfig",
    "parse_label",
    "score",
    "score_batch",
    "score_paper",
    "score_rr_code",
]
