"""D&A's plug-ins: the top-level config section ``dna`` (``plugins.SECTIONS``), registered on import.

The ``plugins:`` table of ``conf/config.yaml`` names this module for ``dna``, so ``make params`` checks the
section; the core never imports this package.
"""

from __future__ import annotations

from ..core.plugins import SECTIONS
from .config import DnaConfig

SECTIONS.register("dna", DnaConfig)
