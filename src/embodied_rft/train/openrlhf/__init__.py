"""GRPO as an OpenRLHF job: ``job`` builds the ``ray job submit … openrlhf.cli.train_ppo_ray`` command and its
prompt file; ``reward`` is the file OpenRLHF loads as its remote reward function."""
