"""EB-ALFRED's action space: the one module that owns action names and ids.

EmbodiedBench's EB-ALFRED has 162 global actions whose ids are fixed by their order (docs/facts.md §4.1):
``find a {obj}`` (0-79), ``pick up the {obj}`` (80-132), ``put down the object in hand`` (133),
``drop the object in hand`` (134), ``open/close the {o}`` (135-148), ``turn on/off the {o}`` (149-156),
``slice the {o}`` (157-161). The list ships with the package (``eb_alfred_global_actions.json``) so the
project runs without ``../shared``. A scene appends extra actions after id 161 for repeated instances
(``find a Cabinet_2``, ``open the Cabinet_2``, ...): :class:`ActionSpace` is the global list plus a
scene's extras, and everything (prompts, reward, simulator, ALFRED conversion) uses it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources

N_GLOBAL = 162
PUT_DOWN = "put down the object in hand"
DROP = "drop the object in hand"

_VERB_RE = re.compile(r"^(find a|pick up the|open the|close the|turn on the|turn off the|slice the) (\S+)$")


@functools.lru_cache(maxsize=1)
def global_actions() -> tuple[str, ...]:
    """The 162 global EB-ALFRED action names in id order."""
    text = resources.files(__package__).joinpath("eb_alfred_global_actions.json").read_text("utf-8")
    names = tuple(json.loads(text))
    assert len(names) == N_GLOBAL, f"expected {N_GLOBAL} global actions, found {len(names)}"
    return names


@functools.lru_cache(maxsize=1)
def _global_index() -> dict[str, int]:
    return {n: i for i, n in enumerate(global_actions())}


def split_action(name: str) -> tuple[str, str | None]:
    """'find a Cabinet_2' -> ('find a', 'Cabinet_2'); 'put down the object in hand' -> (name, None)."""
    m = _VERB_RE.match(name)
    if m:
        return m.group(1), m.group(2)
    return name, None


def verb_targets(verb: str) -> tuple[str, ...]:
    """Object types a global verb applies to, e.g. verb_targets('slice the') -> ('Potato', ...)."""
    return tuple(t for v, t in map(split_action, global_actions()) if v == verb and t is not None)


@dataclass(frozen=True)
class ActionSpace:
    """Global actions plus a scene's extras (ids 162, 163, ... in the given order)."""

    extras: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        g = _global_index()
        seen = set()
        for name in self.extras:
            if name in g or name in seen:
                raise ValueError(f"extra action {name!r} duplicates an existing action")
            seen.add(name)

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        return global_actions() + tuple(self.extras)

    @functools.cached_property
    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    def __len__(self) -> int:
        return len(self.names)

    def name(self, action_id: int) -> str:
        return self.names[action_id]

    def id(self, name: str) -> int:
        return self.index[name]

    def get_id(self, name: str) -> int | None:
        return self.index.get(name)

    def valid_pair(self, action_id: object, name: object) -> bool:
        """True iff (action_id, name) is an entry of this action map (ints only, bools rejected)."""
        return (
            isinstance(action_id, int)
            and not isinstance(action_id, bool)
            and 0 <= action_id < len(self.names)
            and self.names[action_id] == name
        )

    @classmethod
    def for_instances(cls, instance_ids: Iterable[str]) -> ActionSpace:
        """Extras for repeated instances named ``Type_N`` (N >= 2), EB style: for each such instance
        the ``find a`` action and, where the global list has that verb for its type, ``pick up``,
        ``open``/``close``, ``turn on``/``turn off`` and ``slice``; sorted by (type, N) for
        determinism."""
        g = _global_index()
        extras: list[str] = []
        keyed = []
        for iid in set(instance_ids):
            m = re.fullmatch(r"([A-Za-z]+)_(\d+)", iid)
            if m and int(m.group(2)) >= 2:
                keyed.append((m.group(1), int(m.group(2)), iid))
        for typ, _, iid in sorted(keyed):
            for verb in ("find a", "pick up the", "open the", "close the", "turn on the", "turn off the", "slice the"):
                if f"{verb} {typ}" in g:
                    extras.append(f"{verb} {iid}")
        return cls(tuple(extras))


GLOBAL = ActionSpace()


def plan_to_pairs(plan: Sequence[str], space: ActionSpace) -> list[tuple[int, str]]:
    """Action names -> [(id, name)], raising KeyError naming the first unknown action."""
    out = []
    for name in plan:
        aid = space.get_id(name)
        if aid is None:
            raise KeyError(f"unknown EB-ALFRED action {name!r}")
        out.append((aid, name))
    return out
