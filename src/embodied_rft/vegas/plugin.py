"""VeGAS's plug-ins: what this package adds to the core's plug-in points (core/plugins.py), registered on import.

The core never imports this package; its own stages (``stages/synth.py``, ``verifier.py``, ``bon.py``) import what
they run. The ``plugins:`` table of ``conf/config.yaml`` names this module for the names below, so ``make params``
checks the VeGAS sections and the ``base`` stage imports it only with ``model.tokenizer_extra: [verification]``:

- the top-level sections ``synth``, ``verifier`` and ``bon`` (``plugins.SECTIONS``; ``params.section_configs``
  builds them);
- the tokenizer text set ``verification`` (``models.config.TOKENIZER_TEXTS``): the verifier's prompt and
  chain-of-thought templates, ``TEMPLATE_REPEAT`` times over (``templates.py``; docs/vegas.md §6).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..core.plugins import SECTIONS
from ..models.config import TOKENIZER_TEXTS
from .bon_config import BonConfig
from .config import SynthConfig
from .verifier_config import VerifierConfig

SECTIONS.register("synth", SynthConfig)
SECTIONS.register("verifier", VerifierConfig)
SECTIONS.register("bon", BonConfig)


@TOKENIZER_TEXTS.register("verification")
def verification_texts() -> Iterator[str]:
    from .templates import TEMPLATE_REPEAT, template_corpus

    for _ in range(TEMPLATE_REPEAT):
        yield from template_corpus()
