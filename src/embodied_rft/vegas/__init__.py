"""VeGAS (arXiv 2605.12620) on the symbolic world: failure synthesis executed in the simulator (``synth``), a trained
generative verifier (``verifier``) and verifier-guided Best-of-N action selection (``bon``); docs/vegas.md. Its own
stages import it; the core reaches it only through the plug-in points ``plugin.py`` fills (core/plugins.py)."""
