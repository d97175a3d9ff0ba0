"""Text and image observations of a :class:`~embodied_rft.world.state.WorldState`.

Inputs: a simulator. Outputs: ``observe_text(sim) -> str`` (a few short lines: room and place, what is
visible there with states, what is held) and ``render_image(sim, size) -> PIL.Image`` (the same content as
coloured, labelled boxes). Both are pure functions of the state, so they are deterministic.

What is visible: before the first ``find`` the agent stands in the middle of the room and sees the room's
top-level furniture and appliances (not what lies in or on them); after a ``find`` it sees its place: the
anchor object, what is mounted on it, what lies there, and the contents of every open container there.
Contents of closed containers stay hidden. EB's observation is a first-person camera frame; this is a
symbolic stand-in sized for a tiny CPU model's prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PIL import Image, ImageDraw, ImageFont

from embodied_rft.world.lexicon import colour_of
from embodied_rft.world.objects import TYPES, WHOLE_TYPE

if TYPE_CHECKING:  # pragma: no cover
    from embodied_rft.world.state import Obj, WorldState


def _states(o: Obj) -> list[str]:
    t = TYPES[o.type]
    out = []
    if t.openable:
        out.append("open" if o.open else "closed")
    if t.toggleable:
        out.append("on" if o.on else "off")
    if o.dirty:
        out.append("dirty")
    if o.cleaned:
        out.append("clean")
    if o.heated:
        out.append("hot")
    if o.cooled:
        out.append("cold")
    return out


def _label(o: Obj) -> str:
    # pieces have no action names of their own: show their type (AppleSliced), addressed as "Apple"
    return o.type if o.type in WHOLE_TYPE else o.id


def _children(sim: WorldState) -> dict[str | None, list[Obj]]:
    kids: dict[str | None, list[Obj]] = {}
    for o in sim.objs.values():
        kids.setdefault(o.parent, []).append(o)
    for lst in kids.values():
        lst.sort(key=lambda o: o.order)
    return kids


def _visible_kids(o: Obj, kids: dict) -> list[Obj]:
    if TYPES[o.type].openable and not o.open:
        return []
    return kids.get(o.id, [])


def _describe(o: Obj, kids: dict) -> str:
    st = _states(o)
    s = _label(o) + (f" ({', '.join(st)})" if st else "")
    inner = _group([_describe(c, kids) for c in _visible_kids(o, kids)])
    return f"{s} [{', '.join(inner)}]" if inner else s


def _group(items: list[str]) -> list[str]:
    # identical descriptions (three apple slices) are written once with a count
    out: list[str] = []
    counts: dict[str, int] = {}
    for it in items:
        if it in counts:
            counts[it] += 1
        else:
            counts[it] = 1
            out.append(it)
    return [f"{it} x{counts[it]}" if counts[it] > 1 else it for it in out]


def _place_objects(sim: WorldState, kids: dict) -> list[Obj]:
    """Top-level things visible at the agent's place (the anchor first, then what was dropped there)."""
    if sim.loc is None:
        tops = sorted((o for o in kids.get(None, []) if o.floor_at == o.id), key=lambda o: (o.type, o.order))
        dropped = [o for o in kids.get(None, []) if o.floor_at is None]
        return tops + dropped
    out = []
    a = sim.objs.get(sim.loc)
    if a is not None and a.parent is None:
        out.append(a)
    out.extend(o for o in kids.get(None, []) if o.floor_at == sim.loc and o.id != sim.loc)
    return out


def observe_text(sim: WorldState) -> str:
    kids = _children(sim)
    room = sim.room.replace("_", " ")
    if sim.loc is None:
        head = f"You are in the middle of the {room}."
        tops = _place_objects(sim, kids)
        seen = ", ".join(_label(o) + (f" ({', '.join(_states(o))})" if _states(o) else "") for o in tops)
        body = f"Around you: {seen}." if seen else "Around you: nothing."
    else:
        head = f"You are at the {sim.loc} in the {room}."
        items = _group([_describe(o, kids) for o in _place_objects(sim, kids)])
        body = f"You see: {'; '.join(items)}." if items else "You see: nothing."
    h = sim.holding()
    hand = f"In hand: {_describe(h, kids)}." if h is not None else "In hand: nothing."
    return "\n".join((head, body, hand))


# ---------------------------------------------------------------------- image
_BG = {
    "kitchen": (236, 229, 214),
    "living_room": (222, 232, 222),
    "bedroom": (226, 224, 238),
    "bathroom": (214, 232, 240),
}


def _font() -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=10)
    except TypeError:  # pragma: no cover - Pillow without size support
        return ImageFont.load_default()


def _text_rgb(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    return (0, 0, 0) if sum(rgb) > 380 else (255, 255, 255)


def _box(d: ImageDraw.ImageDraw, font, o: Obj, kids: dict, x0: int, y0: int, x1: int, y1: int, depth: int) -> None:
    rgb = colour_of(o.type)
    st = _states(o)
    label = _label(o) + (f" ({','.join(st)})" if st else "")
    inner = _visible_kids(o, kids)
    if depth == 0:
        d.rectangle((x0, y0, x1, y1), fill=(250, 250, 250), outline=rgb, width=3)
        d.rectangle((x0, y0, x1, y0 + 13), fill=rgb)
        d.text((x0 + 3, y0 + 1), label, fill=_text_rgb(rgb), font=font)
        top = y0 + 16
    else:
        d.rectangle((x0, y0, x1, y1), fill=rgb, outline=(30, 30, 30))
        d.text((x0 + 2, y0 + 1), label, fill=_text_rgb(rgb), font=font)
        top = y0 + 13
    if not inner or depth > 1:
        return
    cols = 2 if len(inner) > 3 and (x1 - x0) > 120 else 1
    rows = (len(inner) + cols - 1) // cols
    h = max(12, min(30, (y1 - top - 2) // max(rows, 1)))
    w = (x1 - x0 - 6) // cols
    for i, c in enumerate(inner):
        r, k = divmod(i, cols)
        cx0 = x0 + 3 + k * w
        cy0 = top + r * h
        if cy0 + h > y1:
            break
        _box(d, font, c, kids, cx0, cy0, cx0 + w - 3, cy0 + h - 2, depth + 1)


def render_image(sim: WorldState, size: int = 224) -> Image.Image:
    """A deterministic drawing of what :func:`observe_text` says (size x size RGB)."""
    kids = _children(sim)
    img = Image.new("RGB", (size, size), _BG.get(sim.room, (230, 230, 230)))
    d = ImageDraw.Draw(img)
    font = _font()
    place = "middle of the " + sim.room.replace("_", " ") if sim.loc is None else sim.loc
    d.rectangle((0, 0, size, 15), fill=(40, 40, 40))
    d.text((4, 2), f"at: {place}", fill=(255, 255, 255), font=font)
    tops = _place_objects(sim, kids)
    body_top, body_bot = 19, size - 34
    if tops:
        if sim.loc is None:  # room overview: a grid of small tiles
            cols = 3
            rows = (len(tops) + cols - 1) // cols
            th = max(14, (body_bot - body_top) // max(rows, 1))
            tw = size // cols
            for i, o in enumerate(tops):
                r, k = divmod(i, cols)
                y = body_top + r * th
                if y + th > body_bot + 1:
                    break
                rgb = colour_of(o.type)
                d.rectangle((k * tw + 2, y, (k + 1) * tw - 3, y + th - 3), fill=rgb, outline=(30, 30, 30))
                d.text((k * tw + 4, y + 1), _label(o), fill=_text_rgb(rgb), font=font)
        else:
            main, rest = tops[0], tops[1:]
            side = 70 if rest else 0
            _box(d, font, main, kids, 3, body_top, size - 4 - side, body_bot, 0)
            if rest:
                hh = (body_bot - body_top) // len(rest)
                for i, o in enumerate(rest):
                    y = body_top + i * hh
                    _box(d, font, o, kids, size - side, y, size - 4, y + hh - 3, 1)
    d.rectangle((0, size - 30, size, size), fill=(60, 60, 60))
    h = sim.holding()
    if h is None:
        d.text((4, size - 24), "hand: empty", fill=(255, 255, 255), font=font)
    else:
        d.text((4, size - 24), "hand:", fill=(255, 255, 255), font=font)
        row = [h] + _visible_kids(h, kids)  # a held receptacle's contents follow it on the same row
        w = (size - 44) // len(row)
        for i, o in enumerate(row):
            x0 = 40 + i * w
            rgb = colour_of(o.type)
            d.rectangle((x0, size - 27, x0 + w - 3, size - 3), fill=rgb, outline=(255, 255, 255) if i == 0 else None)
            st = _states(o)
            d.text(
                (x0 + 2, size - 22), _label(o) + (f" ({','.join(st)})" if st else ""), fill=_text_rgb(rgb), font=font
            )
    return img


__all__ = ["observe_text", "render_image"]
