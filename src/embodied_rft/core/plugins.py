"""Plug-in points: the registries extensions fill, and the loading of an extension by the module config data names.

The core (every part of ``embodied_rft`` but the extension packages ``regrpo/`` and ``vegas/``, ``tools/`` and
``study/``) never imports an extension (tests/test_extension_leaves.py). It offers registries instead, each a dict
from a name an option may take to what implements it (:class:`Registry`; e.g. ``reward.REWARDS``), plus
:data:`SECTIONS`: the config sections an extension contributes (``reward.regrpo``, ``decompose.rot``, the top-level
``synth``). An extension fills them when its plug-in module is imported (``embodied_rft.regrpo.plugin``,
``embodied_rft.vegas.plugin``).

Which module registers a name is config data: the ``plugins:`` table of ``conf/config.yaml`` (name -> module), which
a stage hands to :func:`use` before it builds its configs (``pipeline.stage_context``). A registry that misses a name
imports the module the table gives for it and looks again (:meth:`Registry.lookup`), so a stage imports an extension
only when its config uses one of the extension's names, and the paper's pipeline imports none. ``make params``
imports every module of the table (:func:`load_all`) and so checks every extension's sections, used or not.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

from ..config import ConfigError, build

_TABLE: dict[str, str] = {}
_OFF = (None, False, "none")


class Registry(dict[str, Any]):
    """Names of one kind of plug-in -> what implements them; ``register(name)`` is a decorator."""

    def __init__(self, what: str, /, **builtin: Any) -> None:
        super().__init__(builtin)
        self.what = what

    def register(self, name: str, obj: Any = None) -> Any:
        def add(o: Any) -> Any:
            if self.get(name, o) is not o:
                raise ValueError(f"{self.what} {name!r} is registered twice")
            self[name] = o
            return o

        return add if obj is None else add(obj)

    def find(self, name: str, key: str, via: str | None = None) -> Any:
        """``self[name]``, after importing the module the ``plugins:`` table names for ``via`` (default ``name``)
        when it is missing; None when neither has it. ``key`` names the option in an import error."""
        if name not in self and (via or name) in _TABLE:
            load(via or name, key)
        return self.get(name)

    def lookup(self, name: str, key: str, via: str | None = None) -> Any:
        """:meth:`find`, or ConfigError naming ``key``, the known names and the table."""
        found = self.find(name, key, via)
        if found is None:
            raise ConfigError(
                f"{key}: {name!r} is not one of {sorted(self)} (an extension's {self.what} is registered by the "
                "module named under `plugins:` in conf/config.yaml)"
            )
        return found


def use(table: Mapping[str, str] | None) -> None:
    """Add the ``plugins:`` table (name -> module) to what this process loads extensions from."""
    _TABLE.update(table or {})


def module_for(name: str) -> str | None:
    """The module the table names for ``name`` (what a worker process or a cluster job must import)."""
    return _TABLE.get(name)


def load(name: str, key: str) -> None:
    """Import the module the table names for ``name`` (ConfigError naming ``key`` and the table entry)."""
    module = _TABLE[name]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"{key}: cannot import {module!r} (plugins.{name}): {exc}") from None


def load_all(table: Mapping[str, str] | None) -> None:
    """:func:`use` ``table`` and import every module it names (``make params``: every extension's checks run)."""
    use(table)
    for name in table or {}:
        load(name, f"plugins.{name}")


def import_module(module: str | None) -> None:
    """Import ``module`` (an extension's plug-in module handed to a worker process), if any."""
    if module:
        importlib.import_module(module)


SECTIONS = Registry("config section")


def owns(key: str) -> bool:
    """Whether ``key`` (``reward.regrpo``) is a section an extension contributes: registered, or its name is in the
    table (``config.build`` keeps such a key of a core section, see :func:`extensions`)."""
    return key in SECTIONS or key.rpartition(".")[2] in _TABLE


def extensions() -> Any:
    """The field of a core section's dataclass that holds the sections extensions contribute to it, by key: beside
    the core's keys in config data and in ``config.as_dict``; fill it with :func:`sections` in ``__post_init__``."""
    return dataclasses.field(default_factory=dict, metadata={"extensions": owns})


def switched_on(section: Any, *keys: str) -> bool:
    """Whether any of a section's switch ``keys`` is on (not null, false or ``none``); a mapping or a dataclass."""
    get = section.get if isinstance(section, Mapping) else lambda k: getattr(section, k, None)
    return any(get(k) not in _OFF for k in keys)


def sections(parent: Any, where: str, on: Callable[[str, Any], bool]) -> dict[str, Any]:
    """The extension sections of the core section ``parent`` (dotted key ``where``): each built by the dataclass
    registered as ``where.<name>``, whose module is imported first when ``on(name, section)`` says the section is
    used (ConfigError when none registers it); kept as given while its extension is neither loaded nor used. A registered section that config data
    leaves out gets its defaults; a section's ``check_in(parent)`` checks it against the keys beside it."""
    out: dict[str, Any] = {}
    for name, given in parent.extensions.items():
        key = f"{where}.{name}"
        cls = SECTIONS.lookup(key, key, name) if on(name, given) else SECTIONS.get(key)
        out[name] = given if cls is None or isinstance(given, cls) else build(cls, given, key)
    for key, cls in SECTIONS.items():
        head, _, name = key.rpartition(".")
        if head == where and name not in out:
            out[name] = cls()
    for sec in out.values():
        if hasattr(sec, "check_in"):
            sec.check_in(parent)
    return out


__all__ = [
    "SECTIONS",
    "Registry",
    "extensions",
    "import_module",
    "load",
    "load_all",
    "module_for",
    "owns",
    "sections",
    "switched_on",
    "use",
]
