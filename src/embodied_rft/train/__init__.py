"""Training: ``sft`` (TRL's SFTTrainer on the distilled chat records), ``grpo`` (the local GRPO engine, its
rollout workers, checkpoints and on-policy prompts) and ``openrlhf`` (the same GRPO recipe as an OpenRLHF job on
a Ray cluster)."""
