"""Command-line tools beside the pipeline: ``sweeps`` (tables from Hydra multiruns), ``reward_replay`` (the reward
on recorded responses), ``live_auroc`` (a verifier's AUROC on another run's episodes), ``serve`` (an
OpenAI-compatible server for EmbodiedBench's remote model) and ``results`` (the README's results table). Multi-seed
experiments are studies (``embodied_rft.study``)."""
