"""Object-type table of the symbolic EB-ALFRED world.

Inputs: none (static facts). Outputs: :data:`TYPES` (EB type name -> :class:`ObjectType`), :func:`can_contain`,
and the capability sets the simulator, planner and generator use.

Facts come from ALFRED (askforalfred/alfred ``gen/constants.py``: the receptacle -> object compatibility
``VAL_RECEPTACLE_OBJECTS``, ``MOVABLE_RECEPTACLES``, ``OPENABLE_CLASS_LIST``, and the Heatable / Coolable /
Cleanable / Sliceable / Toggleable sets) and from EmbodiedBench's 162 global actions (which types are findable,
pickable, openable, toggleable, sliceable). They are re-encoded here in EB's names:

- EB says ``Sink`` and ``Bathtub`` where ALFRED says ``SinkBasin`` / ``BathtubBasin`` (EB builds names from the
  first field of THOR's objectId, which for a basin is its parent's type). Here ``Sink`` *is* the basin.
- ALFRED's ``TableTop`` compatibility is shared by DiningTable, CoffeeTable and SideTable, as in ALFRED.
- Contents that are not EB types (PaperTowel, ToiletPaperRoll, Towel) are left out.

Departure (measured on the real ALFRED plans in ``shared/alfred``): ALFRED's PDDL domain has no compatibility
precondition on ``PutObject``; its planner only ever breaks the table when it disposes of the slicing tool
(Knife / ButterKnife into a Fridge, Microwave, Cabinet, GarbageCan ...). :data:`PUT_ANYWHERE` admits exactly
those two types in every receptacle so that every placement ALFRED's planner makes is legal here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from embodied_rft.world.actions import verb_targets


def _set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Shared content sets (written as the facts they are, in EB names).
_FOOD = "Apple AppleSliced Egg Lettuce LettuceSliced Potato PotatoSliced Tomato TomatoSliced"
_UTENSILS = "ButterKnife DishSponge Fork Knife Ladle Spatula Spoon"
_SMALL = "Candle CD CellPhone Cloth CreditCard KeyChain Pen Pencil Watch"
_TABLETOP = (
    "AlarmClock Apple AppleSliced BaseballBat BasketBall Book Bowl Box Bread BreadSliced ButterKnife Candle CD "
    "CellPhone Cloth CreditCard Cup DishSponge Egg Fork Glassbottle Kettle KeyChain Knife Ladle Laptop Lettuce "
    "LettuceSliced Mug Newspaper Pan Pen Pencil PepperShaker Plate Pot Potato PotatoSliced RemoteControl SaltShaker "
    "SoapBar SoapBottle Spatula Spoon SprayBottle Statue TennisRacket TissueBox ToiletPaper Tomato TomatoSliced Vase "
    "Watch WateringCan WineBottle HandTowel"
)
_FURNITURE_TOP = (
    "AlarmClock BasketBall Book Bowl Box Candle CD CellPhone Cloth CreditCard Cup Glassbottle KeyChain Laptop Mug "
    "Newspaper Pen Pencil Plate RemoteControl SprayBottle Statue TennisRacket TissueBox ToiletPaper Vase Watch "
    "WateringCan WineBottle"
)
_SEAT = "BasketBall Book Box CellPhone Cloth CreditCard KeyChain Laptop Newspaper Pillow RemoteControl"

#: receptacle type -> the object types it can hold (ALFRED VAL_RECEPTACLE_OBJECTS, EB names).
RECEPTACLE_OBJECTS: dict[str, frozenset[str]] = {
    "Pot": _set(f"{_FOOD} {_UTENSILS}"),
    "Pan": _set(f"{_FOOD} {_UTENSILS}"),
    "Bowl": _set(f"{_FOOD} {_UTENSILS} {_SMALL} Mug RemoteControl"),
    "CoffeeMachine": _set("Mug"),
    "Microwave": _set(
        "Apple AppleSliced Bowl Bread BreadSliced Cup Egg Glassbottle Mug Plate Potato PotatoSliced Tomato TomatoSliced"
    ),
    "StoveBurner": _set("Kettle Pan Pot"),
    "Fridge": _set(f"{_FOOD} Bowl Bread BreadSliced Cup Glassbottle Mug Pan Plate Pot WineBottle"),
    "Mug": _set("ButterKnife Fork Knife Pen Pencil Spoon KeyChain Watch"),
    "Plate": _set(f"{_FOOD} {_UTENSILS} {_SMALL} Mug AlarmClock Book Glassbottle TissueBox"),
    "Cup": _set("ButterKnife Fork Spoon"),
    "Sofa": _set(_SEAT),
    "ArmChair": _set(_SEAT),
    "Ottoman": _set(_SEAT),
    "Box": _set(
        "AlarmClock Book Candle CD CellPhone Cloth CreditCard DishSponge Glassbottle KeyChain Mug Pen "
        "Pencil RemoteControl Statue TissueBox Vase Watch"
    ),
    "Dresser": _set(_FURNITURE_TOP),
    "Desk": _set(f"{_FURNITURE_TOP} SoapBottle"),
    "Bed": _set("BaseballBat BasketBall Book CellPhone Laptop Newspaper Pillow TennisRacket"),
    "Toilet": _set("Candle Cloth DishSponge Newspaper SoapBar SoapBottle SprayBottle TissueBox ToiletPaper HandTowel"),
    "ToiletPaperHanger": _set("ToiletPaper"),
    "Cart": _set(
        "Candle Cloth DishSponge Mug Plunger SoapBar SoapBottle SprayBottle Statue TissueBox ToiletPaper Vase HandTowel"
    ),
    "Bathtub": _set("Cloth DishSponge SoapBar HandTowel"),
    "Sink": _set(
        "Apple AppleSliced Bowl ButterKnife Cloth Cup DishSponge Egg Glassbottle Fork Kettle Knife Ladle "
        "Lettuce LettuceSliced Mug Pan Plate Pot Potato PotatoSliced SoapBar Spatula Spoon Tomato "
        "TomatoSliced HandTowel"
    ),
    "Cabinet": _set(
        "Book Bowl Box Candle CD Cloth Cup DishSponge Glassbottle Kettle Ladle Mug Newspaper Pan "
        "PepperShaker Plate Plunger Pot SaltShaker SoapBar SoapBottle SprayBottle TissueBox ToiletPaper "
        "Vase WateringCan WineBottle HandTowel"
    ),
    "DiningTable": _set(_TABLETOP),
    "CoffeeTable": _set(_TABLETOP),
    "SideTable": _set(_TABLETOP),
    "CounterTop": _set(_TABLETOP),
    "Shelf": _set(
        "AlarmClock Book Bowl Box Candle CD CellPhone Cloth CreditCard Cup DishSponge Glassbottle Kettle "
        "KeyChain Mug Newspaper Pen Pencil PepperShaker Plate Pot RemoteControl SaltShaker SoapBar "
        "SoapBottle SprayBottle Statue TissueBox ToiletPaper Vase Watch WateringCan WineBottle HandTowel"
    ),
    "Drawer": _set(
        "Book ButterKnife Candle CD CellPhone Cloth CreditCard DishSponge Fork KeyChain Knife Ladle "
        "Newspaper Pen Pencil PepperShaker RemoteControl SaltShaker SoapBar SoapBottle Spatula Spoon "
        "SprayBottle TissueBox ToiletPaper Watch WateringCan HandTowel"
    ),
    "GarbageCan": _set(
        "Apple AppleSliced Bread BreadSliced CD Cloth DishSponge Egg Lettuce LettuceSliced Newspaper "
        "Pen Pencil Potato PotatoSliced SoapBar SoapBottle SprayBottle TissueBox ToiletPaper Tomato "
        "TomatoSliced WineBottle HandTowel"
    ),
    "Safe": _set("CD CellPhone CreditCard KeyChain Statue Vase Watch"),
}

#: ALFRED's movable receptacles: pickable objects that hold others (contents travel with them).
MOVABLE_RECEPTACLES = _set("Bowl Box Cup Mug Plate Pan Pot")
#: Slicing tools (ALFRED SliceObject precondition).
KNIVES = _set("Knife ButterKnife")
#: Types ALFRED's planner puts into any receptacle (see the module docstring).
PUT_ANYWHERE = KNIVES
#: Whole sliceable type -> the type of its pieces (THOR/ALFRED naming, e.g. AppleSliced).
SLICED_TYPE = {t: f"{t}Sliced" for t in verb_targets("slice the")}
#: Piece type -> whole type.
WHOLE_TYPE = {v: k for k, v in SLICED_TYPE.items()}
#: Where a clean / heat / cool happens (EB update_states; EB's Sink is ALFRED's SinkBasin).
BASINS = _set("Sink Bathtub")
LAMPS = _set("DeskLamp FloorLamp")

_HEATABLE = _set("Apple AppleSliced Bread BreadSliced Cup Egg Mug Plate Potato PotatoSliced Tomato TomatoSliced")
_COOLABLE = _set(
    "Apple AppleSliced Bowl Bread BreadSliced Cup Egg Lettuce LettuceSliced Mug Pan Plate Pot Potato "
    "PotatoSliced Tomato TomatoSliced WineBottle"
)
_CLEANABLE = _set(
    "Apple AppleSliced Bowl ButterKnife Cloth Cup DishSponge Egg Fork Kettle Knife Ladle Lettuce "
    "LettuceSliced Mug Pan Plate Pot Potato PotatoSliced SoapBar Spatula Spoon Tomato TomatoSliced"
)


@dataclass(frozen=True, slots=True)
class ObjectType:
    """Capabilities of one object type (EB name)."""

    name: str
    findable: bool  # has a global ``find a`` action (sliced pieces are found through their whole type)
    pickable: bool
    receptacle: bool
    openable: bool
    toggleable: bool
    sliceable: bool
    movable_receptacle: bool
    heatable: bool  # ALFRED's task sampler only heats these
    coolable: bool
    cleanable: bool


def _build_types() -> dict[str, ObjectType]:
    find = set(verb_targets("find a"))
    pick = set(verb_targets("pick up the"))
    open_ = set(verb_targets("open the"))
    toggle = set(verb_targets("turn on the"))
    slice_ = set(verb_targets("slice the"))
    pieces = set(SLICED_TYPE.values())
    names = sorted(find | pieces)
    out = {}
    for n in names:
        out[n] = ObjectType(
            name=n,
            findable=n in find,
            pickable=n in pick or n in pieces,
            receptacle=n in RECEPTACLE_OBJECTS,
            openable=n in open_,
            toggleable=n in toggle,
            sliceable=n in slice_,
            movable_receptacle=n in MOVABLE_RECEPTACLES,
            heatable=n in _HEATABLE,
            coolable=n in _COOLABLE,
            cleanable=n in _CLEANABLE,
        )
    return out


#: Every type the world knows: the 80 EB findable types plus the five sliced-piece types.
TYPES: dict[str, ObjectType] = _build_types()

#: ALFRED type names that EB spells differently.
ALFRED_TO_EB = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}


def can_contain(receptacle_type: str, object_type: str) -> bool:
    """True iff an object of ``object_type`` may be put into a ``receptacle_type`` (ALFRED compatibility)."""
    allowed = RECEPTACLE_OBJECTS.get(receptacle_type)
    if allowed is None:
        return False
    return object_type in allowed or object_type in PUT_ANYWHERE


@functools.lru_cache(maxsize=16384)
def base_type(instance_id: str) -> str:
    """'Cabinet_2' -> 'Cabinet'; 'Cabinet' -> 'Cabinet' (EB instance naming)."""
    head, sep, tail = instance_id.rpartition("_")
    return head if sep and tail.isdigit() else instance_id


@functools.lru_cache(maxsize=16384)
def instance_index(instance_id: str) -> int:
    """'Cabinet_2' -> 2; 'Cabinet' -> 1."""
    head, sep, tail = instance_id.rpartition("_")
    return int(tail) if sep and tail.isdigit() else 1


def _check_table() -> None:
    # Every receptacle key and every content must be a known type: a typo in the facts above fails at import.
    for r, objs in RECEPTACLE_OBJECTS.items():
        assert r in TYPES, r
        for o in objs:
            assert o in TYPES and TYPES[o].pickable, (r, o)
    for group in (MOVABLE_RECEPTACLES, _HEATABLE, _COOLABLE, _CLEANABLE, KNIVES, LAMPS, BASINS):
        for t in group:
            assert t in TYPES, t


_check_table()

__all__ = [
    "ALFRED_TO_EB",
    "BASINS",
    "KNIVES",
    "LAMPS",
    "MOVABLE_RECEPTACLES",
    "ObjectType",
    "PUT_ANYWHERE",
    "RECEPTACLE_OBJECTS",
    "SLICED_TYPE",
    "TYPES",
    "WHOLE_TYPE",
    "base_type",
    "can_contain",
    "instance_index",
]
