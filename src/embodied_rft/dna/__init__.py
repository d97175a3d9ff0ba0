"""D&A (describe-then-assess): a progress reward without a gold plan, its benchmark, and its uses (docs/dna.md).

A leaf package: the core never imports it; ``stages/rm_bench.py`` and ``stages/rm_eval.py`` do, and its config
section ``dna`` is registered by :mod:`.plugin` through the ``plugins:`` table of ``conf/config.yaml``.
"""
