"""Command-line tools beside the pipeline: ``seeds`` (the whole pipeline per seed, pooled tests), ``sweeps``
(tables from Hydra multiruns), ``reward_replay`` (the reward on recorded responses), ``serve`` (an
OpenAI-compatible server for EmbodiedBench's remote model) and ``results`` (the README's results table)."""
