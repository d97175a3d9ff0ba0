"""The local GRPO engine: ``stage`` (the DVC stage's logic), ``config`` (the ``grpo`` config group), ``engine``
(rollout → filter → update loop), ``rollout`` (prompt encoding, sampling, log-probs), ``workers`` /
``ray_workers`` (rollout processes and Ray actors), ``update`` (the shared-prompt policy update), ``loss``
(advantages, clipped surrogate, KL), ``heldout`` (greedy held-out check and paired gain), ``onpolicy`` (states
the initial policy reaches), ``checkpoint`` (atomic resumable state) and ``log`` (metrics rows, W&B)."""
