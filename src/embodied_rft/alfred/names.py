"""ALFRED object types -> EB-ALFRED type names, and the normalisation used to compare plans.

Input: ALFRED/AI2-THOR object types as they appear in ``traj_data.json`` (``objectName`` prefixes,
``objectId`` prefixes, ``pddl_params``). Output: the type names of EB-ALFRED's 162 global actions
(``world.actions``), or ``None`` for types EB-ALFRED cannot address (no ``find a`` action exists
for them: ``TeddyBear``, ``Towel``, ``PaperTowelRoll`` ...).

EB renames two receptacles (``SinkBasin`` -> ``Sink``, ``BathtubBasin`` -> ``Bathtub``: EB's
``find a Sink`` resolves to the basin, ``thor_connector.put``) and has no sliced types: an
``AppleSliced`` is an ``Apple`` whose ``sliced`` state is set, and EB's ``pick up the Apple``
prefers slices once something was sliced.

:func:`normalize_action` maps both our action names and EB's hand-written gold "NL Steps"
(``pick up a ladle``, ``find a sinkbasin``, ``open the Microwave``, ``put down the ladle``) onto one
comparable form, so the converter can be checked against EB's reference plans.
"""

from __future__ import annotations

import functools
import re

from embodied_rft.world.actions import verb_targets

# THOR receptacle types whose EB name differs (EB's find/put resolve the basin through the sink).
_RENAMED = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}

# Types with open/close actions in EB (``open the {o}``) start closed in ALFRED scenes.
OPENABLE = frozenset(verb_targets("open the"))
TOGGLEABLE = frozenset(verb_targets("turn on the"))
SLICEABLE = frozenset(verb_targets("slice the"))
PICKUPABLE = frozenset(verb_targets("pick up the"))
# Slicing needs one of these in hand (docs/facts.md §3.4).
SLICING_TOOLS = frozenset({"Knife", "ButterKnife"})
# AI2-THOR types with the CanBeDirty property that ALFRED scenes hold; ALFRED's ``dirty_and_empty``
# sets all of them dirty (THOR ``SetStateOfAllObjects CanBeDirty``). EB's clean check does not read
# the flag (it tracks what was under a running faucet), so it is informational.
DIRTYABLE = frozenset({"Bowl", "Cup", "Mug", "Pan", "Plate", "Pot", "Cloth", "Bed"})


@functools.lru_cache(maxsize=1)
def eb_types() -> frozenset[str]:
    """Every type EB-ALFRED can address (the targets of its ``find a`` actions)."""
    return frozenset(verb_targets("find a"))


def base_type(alfred_type: str) -> str:
    """'AppleSliced' -> 'Apple'; other types unchanged."""
    return alfred_type[: -len("Sliced")] if alfred_type.endswith("Sliced") else alfred_type


@functools.lru_cache(maxsize=512)
def eb_type(alfred_type: str) -> str | None:
    """ALFRED type -> EB type name, or None when EB has no action for it.

    Matching is case-insensitive: ALFRED 2.1.0 writes 'Glassbottle' as EB does, while later
    AI2-THOR releases spell it 'GlassBottle'; both must land on EB's 'Glassbottle'.
    """
    t = _RENAMED.get(alfred_type, base_type(alfred_type))
    t = _RENAMED.get(t, t)
    by_lower = _eb_by_lower()
    return by_lower.get(t.lower())


@functools.lru_cache(maxsize=1)
def _eb_by_lower() -> dict[str, str]:
    return {t.lower(): t for t in eb_types()}


def type_of_id(object_id: str) -> str:
    """THOR objectId -> its ALFRED type: 'Sink|-00.11|+00.89|-02.01|SinkBasin' -> 'SinkBasin',
    'Apple|+00.84|+00.83|-00.52|AppleSliced_1' -> 'AppleSliced', 'Knife|+00.17|...' -> 'Knife'."""
    parts = object_id.split("|")
    if len(parts) >= 5:
        return re.sub(r"_\d+$", "", parts[4])
    return parts[0]


_ARTICLE_RE = re.compile(r"^(find|pick up|open|close|turn on|turn off|slice|put down|drop)\s+(?:an?|the)\s+(.*)$")


def normalize_action(action: str) -> str:
    """One comparable form for an EB action name or a gold "NL Steps" line.

    Lower-cased; articles dropped; instance suffixes (``_2``) dropped; spaces inside object names
    dropped; ``sinkbasin``/``bathtubbasin`` -> ``sink``/``bathtub``; every ``put down ...`` ->
    ``put down`` (EB executes one "put down the object in hand", whatever object the NL line names)
    and every ``drop ...`` -> ``drop``. Examples: 'pick up a ladle' and 'pick up the Ladle' ->
    'pick up ladle'; 'find a Cabinet_2' -> 'find cabinet'; 'put down the ladle' -> 'put down'.
    """
    a = " ".join(action.strip().split()).lower()
    if a.startswith("put down"):
        return "put down"
    if a.startswith("drop"):
        return "drop"
    m = _ARTICLE_RE.match(a)
    if not m:
        return a
    verb, obj = m.group(1), m.group(2).replace(" ", "")
    obj = re.sub(r"_\d+$", "", obj)
    obj = {"sinkbasin": "sink", "bathtubbasin": "bathtub"}.get(obj, obj)
    return f"{verb} {obj}"
