"""ReGRPO (reflection-enhanced GRPO; code showlab/ReGRPO) on the symbolic world: the reflection-of-thought data engine
(executed near-misses, the ErrorType/Evidence/FixPlan triple and its quality gates), the cold-start data options of
``decompose`` and ``distill``, the ``regrpo`` reward's reflection cost and the inference trigger; docs/regrpo.md. The
core reaches it only through the plug-in points ``plugin.py`` fills (core/plugins.py)."""
