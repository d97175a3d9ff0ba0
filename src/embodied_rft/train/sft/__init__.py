"""Supervised fine-tuning on the distilled chat records: ``trainer`` (the stage's entry, TRL's SFTTrainer or a
plain loop), ``config`` (the ``sft`` config group), ``data`` (records → messages + images), ``heldout`` (the
greedy held-out format check), ``callbacks``, ``resume`` and ``synthetic`` (a record generator for tests and
benchmarks)."""
