"""SFT on the tiny models: assistant-only loss, learning, frozen vision, LoRA, resume after a kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from embodied_rft.config import ConfigError, build
from embodied_rft.core.integrity import seal_folder
from embodied_rft.data.jsonl import DataError
from embodied_rft.models import ModelConfig, build_base_model, load_model
from embodied_rft.train.sft.config import LoraSettings, SFTConfig, ValSettings
from embodied_rft.train.sft.data import corpus_texts, read_sft_records
from embodied_rft.train.sft.resume import prepare_work_dir
from embodied_rft.train.sft.synthetic import write_synthetic_sft
from embodied_rft.train.sft.trainer import prepare_sft, run_sft

torch.set_num_threads(1)

# A few steps of a tiny model from scratch: lr high enough that the loss visibly falls in 6 steps.
FAST = dict(
    lr=2e-3,
    max_steps=6,
    batch_size=4,
    grad_accum=1,
    warmup_ratio=0.2,
    logging_steps=1,
    save_steps=2,
    max_len=384,
    num_threads=1,
    device="cpu",
    val=ValSettings(max_samples=0),
)


def _cfg(**kw) -> SFTConfig:
    return SFTConfig(**{**FAST, **kw})


@pytest.fixture(scope="module")
def text_setup(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("sft_text")
    data = write_synthetic_sft(d / "sft.jsonl", 48, seed=0)
    base = build_base_model(
        ModelConfig(name="tiny", kind="tiny", vocab_size=800), corpus_texts(read_sft_records(data)), d / "base"
    )
    return base, data


@pytest.fixture(scope="module")
def vl_setup(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("sft_vl")
    data = write_synthetic_sft(d / "sft.jsonl", 32, seed=0, image_size=(96, 80))
    cfg = ModelConfig(name="tiny_vl", kind="tiny_vl", vocab_size=800, image_max_pixels=12544)
    base = build_base_model(cfg, corpus_texts(read_sft_records(data)), d / "base")
    return base, data


def _state(path: Path) -> dict[str, torch.Tensor]:
    model, _ = load_model(path)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_labels_mask_everything_but_the_answer(tmp_path: Path, text_setup) -> None:
    base, data = text_setup
    setup = prepare_sft(_cfg(), base, data, tmp_path / "work")
    tr, tok = setup.trainer, setup.processing_class
    batch = tr.data_collator([tr.train_dataset[0], tr.train_dataset[1]])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    rec = read_sft_records(data)[0]
    prompt = tok.apply_chat_template(rec.prompt, tokenize=False, add_generation_prompt=True)
    n_prompt = len(tok(prompt, add_special_tokens=False).input_ids)
    assert (labels[:n_prompt] == -100).all()  # system, user and the assistant cue carry no loss
    trained = labels[labels != -100]
    assert tok.decode(trained) == rec.answer + "<|im_end|>"  # the answer and its stop token, nothing else
    assert torch.equal(ids[n_prompt : n_prompt + len(trained)], trained)
    assert setup.truncated_examples == 0 and setup.dropped_examples == 0


def test_examples_over_the_cutoff_are_counted(tmp_path: Path, text_setup) -> None:
    base, data = text_setup
    setup = prepare_sft(_cfg(max_len=150), base, data, tmp_path / "work")
    tok = setup.processing_class
    lengths = [
        len(tok.apply_chat_template(list(r.messages), tokenize=True)["input_ids"]) for r in read_sft_records(data)
    ]
    assert setup.truncated_examples == sum(n >= 150 for n in lengths) > 0
    assert all(len(ids) <= 150 for ids in setup.trainer.train_dataset["input_ids"])


def test_vl_labels_mask_image_tokens(tmp_path: Path, vl_setup) -> None:
    base, data = vl_setup
    setup = prepare_sft(_cfg(), base, data, tmp_path / "work")
    tr, proc = setup.trainer, setup.processing_class
    batch = tr.data_collator([tr.train_dataset[0], tr.train_dataset[1]])
    assert batch["pixel_values"].shape[0] == int(batch["image_grid_thw"].prod(dim=1).sum())
    image_id = proc.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    ids, labels = batch["input_ids"], batch["labels"]
    assert (ids == image_id).sum() > 0 and (labels[ids == image_id] == -100).all()
    rec = read_sft_records(data)[0]
    assert proc.tokenizer.decode(labels[0][labels[0] != -100]) == rec.answer + "<|im_end|>"


def test_sft_tiny_learns_and_updates_every_parameter(tmp_path: Path, text_setup) -> None:
    base, data = text_setup
    out, metrics_path, plots = tmp_path / "sft", tmp_path / "metrics.json", tmp_path / "loss.csv"
    m = run_sft(
        _cfg(val=ValSettings(max_samples=3, max_new_tokens=8)), base, data, out, metrics_path, plots, val_data=data
    )
    assert m["steps"] == 6 and m["final_loss"] < m["first_loss"] - 0.5
    assert m["tokens"] > 6 * 4 * 100 and m["tokens_per_s"] > 0 and m["train_time_s"] > 0
    assert m["val"]["samples"] == 3 and 0.0 <= m["val"]["json_valid_rate"] <= 1.0
    assert json.loads(metrics_path.read_text())["final_loss"] == m["final_loss"]
    rows = plots.read_text().splitlines()
    assert rows[0] == "step,loss,lr" and [int(r.split(",")[0]) for r in rows[1:]] == [1, 2, 3, 4, 5, 6]
    lrs = [float(r.split(",")[2]) for r in rows[1:]]
    # 2 warm-up steps (0.2 x 6, rounded up) from 0 to the peak, then a cosine decay
    assert lrs[:3] == pytest.approx([0.0, 1e-3, 2e-3]) and lrs[2] > lrs[3] > lrs[4] > lrs[5] > 0
    before, after = _state(base), _state(out)
    unchanged = [n for n in before if torch.equal(before[n], after[n])]
    assert not unchanged, unchanged
    assert not (tmp_path / ".sft.work").exists()  # checkpoints removed after success
    assert json.loads((out / "embodied_rft_model.json").read_text())["sft"]["lr"] == 2e-3


def test_sft_tiny_vl_freezes_the_vision_tower(tmp_path: Path, vl_setup) -> None:
    base, data = vl_setup
    m = run_sft(_cfg(max_steps=4), base, data, tmp_path / "sft", tmp_path / "m.json", tmp_path / "p.csv")
    assert m["vision"] and m["steps"] == 4 and m["final_loss"] < m["first_loss"] - 0.3
    before, after = _state(base), _state(tmp_path / "sft")
    vision = [n for n in before if ".visual." in f".{n}"]
    assert vision and m["frozen_vision_params"] == sum(before[n].numel() for n in vision)
    assert all(torch.equal(before[n], after[n]) for n in vision)
    changed = [n for n in before if n not in vision and not torch.equal(before[n], after[n])]
    assert len(changed) == len(before) - len(vision)


def test_lora_trains_adapters_and_saves_a_merged_checkpoint(tmp_path: Path, text_setup) -> None:
    base, data = text_setup
    cfg = _cfg(max_steps=3, lr=5e-3, lora=LoraSettings(enabled=True, r=4, alpha=8, target_modules=("q_proj", "v_proj")))
    m = run_sft(cfg, base, data, tmp_path / "sft", tmp_path / "m.json", tmp_path / "p.csv")
    assert m["trainable_params"] < 0.05 * m["total_params"]
    assert not (tmp_path / "sft" / "adapter_config.json").exists()
    before, after = _state(base), _state(tmp_path / "sft")
    assert set(before) == set(after)  # an ordinary checkpoint: adapters merged away
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed == {n for n in before if n.endswith(("q_proj.weight", "v_proj.weight"))}


class Killed(RuntimeError):
    pass


def _kill_after_save(step: int):
    from transformers import TrainerCallback

    class KillAfterSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if state.global_step == step:
                raise Killed(f"simulated kill after the step-{step} checkpoint")

    return KillAfterSave()


def test_killed_run_resumes_and_matches_an_uninterrupted_one(tmp_path: Path, text_setup) -> None:
    base, data = text_setup
    cfg = _cfg()
    ref = run_sft(cfg, base, data, tmp_path / "ref", tmp_path / "ref.json", tmp_path / "ref.csv")

    out, work = tmp_path / "sft", tmp_path / "work"
    with pytest.raises(Killed):
        run_sft(
            cfg,
            base,
            data,
            out,
            tmp_path / "m.json",
            tmp_path / "p.csv",
            work_dir=work,
            callbacks=[_kill_after_save(4)],
        )
    assert not out.exists() and (work / "checkpoint-4" / "trainer_state.json").is_file()

    m = run_sft(cfg, base, data, out, tmp_path / "m.json", tmp_path / "p.csv", work_dir=work)
    assert m["resumed_from_step"] == 4 and m["steps"] == ref["steps"] == 6
    assert m["tokens"] == ref["tokens"]  # same batches, same order
    assert (tmp_path / "p.csv").read_text().splitlines()[:5] == (tmp_path / "ref.csv").read_text().splitlines()[:5]
    assert m["final_loss"] == pytest.approx(ref["final_loss"], rel=1e-4)
    a, b = _state(tmp_path / "ref"), _state(out)
    for n in a:
        assert torch.allclose(a[n], b[n], rtol=1e-4, atol=1e-6), n


def test_work_folder_of_another_run_is_cleared_not_resumed(tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert prepare_work_dir(work, {"settings": {"lr": 1}}, "auto") is None
    (work / "checkpoint-2").mkdir()
    (work / "checkpoint-2" / "trainer_state.json").write_text("{}")
    seal_folder(work / "checkpoint-2")  # what callbacks.SealCheckpoints does once the trainer saved it
    (work / "checkpoint-4").mkdir()  # no state file: a checkpoint cut short by the kill
    (work / "checkpoint-6").mkdir()  # saved, but killed before its seal
    (work / "checkpoint-6" / "trainer_state.json").write_text("{}")
    (work / "checkpoint-8").mkdir()  # sealed, then a byte of its weights changed on disk
    (work / "checkpoint-8" / "trainer_state.json").write_text("{}")
    (work / "checkpoint-8" / "model.safetensors").write_bytes(b"\x00" * 64)
    seal_folder(work / "checkpoint-8")
    (work / "checkpoint-8" / "model.safetensors").write_bytes(b"\x00" * 63 + b"\x01")
    assert prepare_work_dir(work, {"settings": {"lr": 1}}, "auto") == work / "checkpoint-2"
    assert prepare_work_dir(work, {"settings": {"lr": 2}}, "auto") is None
    assert not (work / "checkpoint-2").exists()


def test_bad_records_are_reported_with_file_line_and_field(tmp_path: Path) -> None:
    f = tmp_path / "sft.jsonl"
    ok = {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}
    cases = [
        ({"messages": [{"role": "user", "content": "u"}]}, "last message must be the assistant"),
        ({"messages": [{"role": "robot", "content": "u"}, {"role": "assistant", "content": "a"}]}, "role"),
        ({**ok, "images": ["missing.png"]}, r"images\[0\]"),
        ({"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "a"}]}, "content"),
    ]
    for bad, field in cases:
        f.write_text(json.dumps(ok) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(DataError, match=rf"sft\.jsonl:2.*{field}"):
            read_sft_records(f)


def test_sft_config_checks_ranges_and_keys() -> None:
    with pytest.raises(ConfigError, match=r"sft\.warmup_ratio"):
        build(SFTConfig, {"warmup_ratio": 1.5}, "sft")
    with pytest.raises(ConfigError, match=r"sft\.lora\.alhpa: unknown key; did you mean 'alpha'"):
        build(SFTConfig, {"lora": {"alhpa": 8}}, "sft")
    cfg = build(SFTConfig, {"report_to": ["wandb"], "max_steps": 10}, "sft")
    assert cfg.report_to == ("wandb",) and cfg.max_steps == 10


@pytest.mark.slow
def test_sigkilled_process_resumes_and_matches(tmp_path: Path, text_setup) -> None:
    """A real SIGKILL mid-run (not an exception): the rerun resumes and ends where an uninterrupted run does."""
    base, data = text_setup
    cfg = dict(FAST, max_steps=8, save_steps=2, val=None)
    script = textwrap.dedent(
        f"""
        import os, signal, sys, torch
        from transformers import TrainerCallback
        from embodied_rft.train.sft.trainer import run_sft
        from embodied_rft.train.sft.config import SFTConfig, ValSettings
        torch.set_num_threads(1)
        kw = {json.dumps({k: v for k, v in cfg.items() if k != "val"})}
        class Kill(TrainerCallback):
            def on_save(self, args, state, control, **k):
                if state.global_step == 6 and len(sys.argv) > 2:
                    os.kill(os.getpid(), signal.SIGKILL)
        run_sft(SFTConfig(**kw, val=ValSettings(max_samples=0)), {str(base)!r}, {str(data)!r}, sys.argv[1] + "/sft",
                sys.argv[1] + "/m.json", sys.argv[1] + "/p.csv", work_dir=sys.argv[1] + "/work", callbacks=[Kill()])
        """
    )
    run = lambda d, *kill: subprocess.run([sys.executable, "-c", script, str(d), *kill], capture_output=True, text=True)  # noqa: E731
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    assert run(tmp_path / "a").returncode == 0
    killed = run(tmp_path / "b", "kill")
    assert killed.returncode == -signal.SIGKILL and not (tmp_path / "b" / "sft").exists()
    resumed = run(tmp_path / "b")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((tmp_path / "b" / "m.details.json").read_text())["resumed_from_step"] == 6
    a, b = _state(tmp_path / "a" / "sft"), _state(tmp_path / "b" / "sft")
    for n in a:
        assert torch.allclose(a[n], b[n], rtol=1e-4, atol=1e-6), n


def test_multi_gpu_configs_parse_with_the_installed_libraries() -> None:
    from accelerate.commands.config.config_args import ClusterConfig

    from embodied_rft.train.sft.trainer import _deepspeed_config

    conf = Path(__file__).resolve().parents[2] / "conf" / "accelerate"
    z3 = ClusterConfig.from_yaml_file(str(conf / "zero3.yaml"))
    assert z3.distributed_type == "DEEPSPEED" and z3.deepspeed_config["zero_stage"] == 3 and z3.num_processes == 4
    assert ClusterConfig.from_yaml_file(str(conf / "ddp.yaml")).distributed_type == "MULTI_GPU"
    ds = _deepspeed_config(str(conf / "ds_zero3.yaml"))
    assert ds["zero_optimization"]["stage"] == 3 and ds["gradient_accumulation_steps"] == "auto"
    for f in conf.glob("*.yaml"):
        lines = f.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() and not line.lstrip().startswith("#"):
                assert lines[i - 1].lstrip().startswith("#"), f"{f.name}:{i + 1}: no comment above {line.strip()!r}"


@pytest.mark.slow
def test_tiny_sft_learns_the_eb_json_format(tmp_path: Path) -> None:
    """~3 CPU-minutes: from random init to greedy answers that are complete four-key EB JSON objects."""
    data = write_synthetic_sft(tmp_path / "sft.jsonl", 256, seed=0)
    val = write_synthetic_sft(tmp_path / "val" / "val.jsonl", 16, seed=123)
    base = build_base_model(
        ModelConfig(name="tiny", kind="tiny", vocab_size=1024), corpus_texts(read_sft_records(data)), tmp_path / "base"
    )
    cfg = _cfg(
        lr=3e-3,
        max_steps=80,
        batch_size=8,
        warmup_ratio=0.05,
        logging_steps=10,
        save_steps=1000,
        max_len=512,
        val=ValSettings(max_samples=16, max_new_tokens=256, batch_size=16),
    )
    m = run_sft(cfg, base, data, tmp_path / "sft", tmp_path / "m.json", tmp_path / "p.csv", val_data=val)
    assert m["final_loss"] < 0.5 < 5.0 < m["first_loss"]
    assert m["val"]["json_valid_rate"] >= 0.9 and m["val"]["format_rate"] >= 0.9 and m["val"]["truncated_rate"] <= 0.1


def test_wandb_logs_offline_and_keeps_secrets_out(tmp_path: Path, text_setup, monkeypatch) -> None:
    base, data = text_setup
    import wandb

    wandb.teardown()  # W&B keeps process-wide settings (incl. its dir) from an earlier run in this process
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.delenv("WANDB_MODE", raising=False)  # the config's default (offline) must apply
    secret = "sk-test-6f1d0c9e-not-a-real-key"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("HF_TOKEN", secret)
    run_sft(
        _cfg(max_steps=2, report_to=("wandb",)), base, data, tmp_path / "sft", tmp_path / "m.json", tmp_path / "p.csv"
    )
    assert os.environ["WANDB_MODE"] == "offline"
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    blobs = b"".join(f.read_bytes() for f in runs[0].rglob("*") if f.is_file())
    assert b"train/loss" in blobs and secret.encode() not in blobs
