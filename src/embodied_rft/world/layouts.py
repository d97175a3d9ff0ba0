"""Procedural room layouts: which furniture and appliances a room has.

Input: a room type and a seeded ``random.Random``. Output: :class:`Layout` (id, room, the fixed objects and
their counts, where lamps and faucets are mounted). A layout plays the part of an ALFRED floor plan: small
objects are scattered over it per episode (``generator.py``), and splits are drawn by layout
(``valid_unseen`` layouts never appear in ``train``).

Room contents follow ALFRED's four scene types (kitchens 1-30, living rooms 201-230, bedrooms 301-330,
bathrooms 401-430) as seen in its trajectories: which receptacles plans use per room, and which pickable
types its scenes hold (:data:`POOLS`, measured on ``shared/alfred``). Counts are this module's choice.
Each Sink and Bathtub gets a Faucet mounted on it (``parent`` = the basin), each DeskLamp sits on a Desk,
SideTable or Dresser; so finding a Sink also brings its Faucet within reach, as in THOR.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

ROOMS = ("kitchen", "living_room", "bedroom", "bathroom")

# room -> [(type, min count, max count)] of fixed receptacles (ALFRED plans' receptacles per scene type)
FURNITURE: dict[str, list[tuple[str, int, int]]] = {
    "kitchen": [
        ("CounterTop", 1, 3),
        ("Cabinet", 3, 8),
        ("Drawer", 1, 5),
        ("Fridge", 1, 1),
        ("Microwave", 1, 1),
        ("Sink", 1, 1),
        ("StoveBurner", 2, 4),
        ("CoffeeMachine", 0, 1),
        ("GarbageCan", 1, 1),
        ("DiningTable", 0, 1),
        ("Shelf", 0, 2),
        ("SideTable", 0, 1),
    ],
    "living_room": [
        ("Sofa", 1, 1),
        ("ArmChair", 0, 2),
        ("CoffeeTable", 1, 1),
        ("SideTable", 0, 2),
        ("Dresser", 0, 1),
        ("Shelf", 0, 3),
        ("Drawer", 0, 3),
        ("Cabinet", 0, 3),
        ("GarbageCan", 1, 1),
        ("DiningTable", 0, 1),
        ("Ottoman", 0, 1),
        ("Desk", 0, 1),
        ("Safe", 0, 1),
    ],
    "bedroom": [
        ("Bed", 1, 1),
        ("Desk", 0, 1),
        ("Dresser", 0, 1),
        ("SideTable", 0, 2),
        ("Drawer", 1, 5),
        ("Shelf", 0, 3),
        ("GarbageCan", 1, 1),
        ("Safe", 0, 1),
        ("ArmChair", 0, 1),
        ("DiningTable", 0, 1),
        ("Cabinet", 0, 2),
    ],
    "bathroom": [
        ("Toilet", 1, 1),
        ("ToiletPaperHanger", 0, 1),
        ("Sink", 1, 2),
        ("Bathtub", 0, 1),
        ("CounterTop", 1, 1),
        ("Cabinet", 1, 4),
        ("Drawer", 0, 4),
        ("GarbageCan", 1, 1),
        ("Shelf", 0, 2),
        ("Cart", 0, 1),
        ("SideTable", 0, 1),
        ("Dresser", 0, 1),
    ],
}

# room -> pickable types its scenes hold (ALFRED object_poses per scene type, EB types only)
POOLS: dict[str, tuple[str, ...]] = {
    "kitchen": (
        "Apple",
        "Bread",
        "Lettuce",
        "Potato",
        "Tomato",
        "Egg",
        "Knife",
        "ButterKnife",
        "Fork",
        "Spoon",
        "Spatula",
        "Ladle",
        "Mug",
        "Cup",
        "Bowl",
        "Plate",
        "Pan",
        "Pot",
        "Kettle",
        "DishSponge",
        "SaltShaker",
        "PepperShaker",
        "SoapBottle",
        "Glassbottle",
        "WineBottle",
        "Vase",
        "Statue",
        "CellPhone",
        "CreditCard",
        "Book",
        "Pen",
        "Pencil",
        "SprayBottle",
    ),
    "living_room": (
        "Book",
        "Bowl",
        "Box",
        "Candle",
        "CellPhone",
        "CreditCard",
        "KeyChain",
        "Laptop",
        "Newspaper",
        "Pen",
        "Pencil",
        "Pillow",
        "Plate",
        "RemoteControl",
        "Statue",
        "TissueBox",
        "Vase",
        "Watch",
        "WateringCan",
    ),
    "bedroom": (
        "AlarmClock",
        "BaseballBat",
        "BasketBall",
        "Book",
        "Bowl",
        "Box",
        "CD",
        "CellPhone",
        "Cloth",
        "CreditCard",
        "KeyChain",
        "Laptop",
        "Mug",
        "Pen",
        "Pencil",
        "Pillow",
        "RemoteControl",
        "Statue",
        "TennisRacket",
        "TissueBox",
        "Vase",
        "Watch",
    ),
    "bathroom": (
        "Candle",
        "Cloth",
        "DishSponge",
        "HandTowel",
        "Plunger",
        "SoapBar",
        "SoapBottle",
        "SprayBottle",
        "TissueBox",
        "ToiletPaper",
    ),
}

LAMP_HOSTS = ("Desk", "SideTable", "Dresser")


@dataclass(frozen=True)
class Layout:
    layout_id: str
    room: str
    # (id, type, parent) of every fixed object, in id order (furniture, then mounted fixtures, then lamps)
    fixed: tuple[tuple[str, str, str | None], ...]

    @property
    def signature(self) -> tuple:
        """What makes two layouts the same: the multiset of fixed types and where fixtures are mounted."""
        return (self.room, tuple(sorted((t, p or "") for _, t, p in self.fixed)))

    def types(self) -> set[str]:
        return {t for _, t, _ in self.fixed}


def _name(counts: dict[str, int], typ: str) -> str:
    counts[typ] = counts.get(typ, 0) + 1
    n = counts[typ]
    return typ if n == 1 else f"{typ}_{n}"


def sample_layout(room: str, rng: random.Random, layout_id: str) -> Layout:
    counts: dict[str, int] = {}
    fixed: list[tuple[str, str, str | None]] = []
    for typ, lo, hi in FURNITURE[room]:
        for _ in range(rng.randint(lo, hi)):
            fixed.append((_name(counts, typ), typ, None))
    for oid, typ, _ in list(fixed):
        if typ in ("Sink", "Bathtub"):
            fixed.append((_name(counts, "Faucet"), "Faucet", oid))
    if room in ("living_room", "bedroom"):
        hosts = [oid for oid, typ, _ in fixed if typ in LAMP_HOSTS]
        # a bedroom always has a desk lamp (ALFRED's bedrooms do); living rooms have one lamp or two
        want_desk = bool(hosts) and (room == "bedroom" or rng.random() < 0.5)
        if room == "bedroom" and not hosts:
            fixed.append((_name(counts, "SideTable"), "SideTable", None))
            hosts = [fixed[-1][0]]
            want_desk = True
        if want_desk:
            fixed.append((_name(counts, "DeskLamp"), "DeskLamp", rng.choice(hosts)))
        if not want_desk or rng.random() < 0.3:
            fixed.append((_name(counts, "FloorLamp"), "FloorLamp", None))
    return Layout(layout_id, room, tuple(fixed))


def make_layouts(
    seed: int, n_train: int, n_unseen: int, rooms: tuple[str, ...] = ROOMS
) -> tuple[list[Layout], list[Layout]]:
    """``n_train`` and ``n_unseen`` layouts per room; unseen ones differ from every train layout."""
    train: list[Layout] = []
    unseen: list[Layout] = []
    for room in rooms:
        rng = random.Random(f"layouts/{seed}/{room}")
        seen: set = set()
        k = 0
        tries = 0
        while (
            len([x for x in train if x.room == room]) < n_train or len([x for x in unseen if x.room == room]) < n_unseen
        ):
            tries += 1
            if tries > 100 * (n_train + n_unseen) + 100:
                raise ValueError(f"cannot draw {n_train}+{n_unseen} distinct {room} layouts")
            is_train = len([x for x in train if x.room == room]) < n_train
            lid = f"{room}-{'t' if is_train else 'u'}{k:03d}"
            lay = sample_layout(room, rng, lid)
            if lay.signature in seen:
                continue
            seen.add(lay.signature)
            (train if is_train else unseen).append(lay)
            k += 1
    return train, unseen


__all__ = ["FURNITURE", "LAMP_HOSTS", "Layout", "POOLS", "ROOMS", "make_layouts", "sample_layout"]
