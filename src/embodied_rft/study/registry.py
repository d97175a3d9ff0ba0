"""What a study file names by string, registered by the module that implements it.

- ``READERS[stage]``: reads one outcome (success per episode, counts) from a run of that stage's metrics folder.
- ``CHECKS[fn]``: a check of a finished table (``fn(table, **args) -> (holds, figures)``).
- ``SECTIONS[name]``: an extra part of a table computed from the runs (``fn(ctx) -> dict``).
- ``TASKS[name]``: an extra step of an arm that is not a pipeline stage (``fn(ctx, **args) -> {name: dvc stage}``).

The generic ones (the ``evaluate`` reader, the paired and spread checks) live in this package; an extension
registers its own in its study adapter (``embodied_rft.<extension>.study``), which a study loads by naming it under
``plugins:`` — the core never imports an extension.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from embodied_rft.core import plugins


class Registry(plugins.Registry):
    """The core's registry (``core/plugins.py``) with a miss that names the study file and the study adapters."""

    def get_or_fail(self, name: str, where: str) -> Callable[..., Any]:
        if name not in self:
            raise KeyError(
                f"{where}: no {self.what} {name!r}; known: {', '.join(sorted(self)) or 'none'} "
                "(an extension's are registered by the study adapter named under `plugins:`)"
            )
        return self[name]


READERS = Registry("outcome reader")
CHECKS = Registry("check")
SECTIONS = Registry("section")
TASKS = Registry("task")


def section(
    name: str, merge: Callable[[list[dict[str, Any]]], dict[str, Any]], render: Callable[[dict[str, Any]], str]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a table section ``name``: the decorated ``fn(ctx, **args)`` computes it from the runs, ``merge``
    pools the sections of tables of disjoint seeds, ``render`` writes it as Markdown."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.merge, fn.render = merge, render  # type: ignore[attr-defined]
        return SECTIONS.register(name)(fn)

    return deco


def load_plugins(modules: tuple[str, ...] | list[str], where: str) -> None:
    """Import each study adapter a study names (they register on import)."""
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as exc:
            raise KeyError(f"{where}: plugins: cannot import {m!r}: {exc}") from None
