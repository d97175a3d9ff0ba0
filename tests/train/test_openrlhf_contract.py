"""Our OpenRLHF side against the INSTALLED OpenRLHF 0.11.2 (openrlhf, openrlhf_reward).

The argv goes through OpenRLHF's own parser and post-parse checks; the prompt data through its dataset
preprocessing; the reward file through its own loader and single-turn executor; the filter range through
its own dynamic-filtering code. See tests/helpers/openrlhf_harness.py for how those run on a CPU without vLLM.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from embodied_rft.config import ConfigError, build
from embodied_rft.filtering import FilterConfig, accept, openrlhf_range
from embodied_rft.models import load_model
from embodied_rft.train.grpo.config import GRPOConfig, OpenRLHFConfig
from embodied_rft.train.openrlhf import job as orl
from embodied_rft.train.openrlhf.reward import split_response
from tests.helpers.grpo_fixtures import gold_response, grpo_samples, sft_policy, vl_data, write_jsonl
from tests.helpers.openrlhf_harness import fake_response, parse_train_ppo_ray, run_dynamic_filter

pytest.importorskip("openrlhf")

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / orl.REWARD_FILE


LAYOUT = orl.JobLayout(Path("/shared/ws/.cache/work/openrlhf/k"))


def paper_cfg(**kw) -> GRPOConfig:
    return GRPOConfig(backend="openrlhf", **kw)


def job(cfg: GRPOConfig, **kw):
    """(trainer argv, submit argv) for ``cfg`` with a fixed job folder and submission id."""
    return orl.build_openrlhf_job(cfg, layout=LAYOUT, submission_id="sid", **kw)


def parsed(cfg: GRPOConfig, vision: bool = False, **kw):
    train, _ = job(cfg, policy_path="/ckpt/sft", prompt_data="/shared/ws/prompts.jsonl", vision=vision, **kw)
    assert train[:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"]
    return parse_train_ppo_ray(train[3:])


# ------------------------------------------------------------------------------------------- argv


def test_paper_settings_parse_and_map_back():
    cfg = paper_cfg()
    a = parsed(cfg, vision=True)
    assert a.actor.model_name_or_path == "/ckpt/sft"
    assert a.algo.advantage.estimator == "group_norm"
    assert a.rollout.n_samples_per_prompt == 8 and a.rollout.temperature == 1.0
    assert a.rollout.batch_size == 128 and a.train.batch_size == 128
    # K_2 = max_epochs x N_B x G / train_batch_size
    assert a.train.max_epochs * a.rollout.batch_size * a.rollout.n_samples_per_prompt // a.train.batch_size == 8
    assert a.train.num_episodes == 10
    assert a.rollout.max_new_tokens == 4096 and a.data.max_len == 3000 + 4096
    assert a.actor.adam.lr == 1e-6 and a.algo.kl.init_coef == 0.0 and not a.algo.kl.use_loss
    assert a.actor.eps_clip == 0.2 and tuple(a.actor.eps_clip_low_high) == (0.2, 0.2)
    assert a.algo.dynamic_filtering_enable
    assert tuple(a.algo.dynamic_filtering_range) == pytest.approx(openrlhf_range(8, 1, 7))
    assert a.reward.remote_url == [orl.REWARD_FILE]
    assert (a.data.input_key, a.data.label_key, a.data.image_key) == ("prompt", "label", "images")
    assert a.data.apply_chat_template
    assert a.ds.zero_stage == 3 and a.ds.param_dtype == "bf16"
    assert a.actor.freeze_visual_encoder and a.data.max_images_per_prompt == 1
    assert a.critic.model_name_or_path is None  # group_norm: no critic
    assert a.train.colocate_all and a.vllm.num_engines == 8


def test_text_model_with_kl_and_sequence_mean():
    cfg = paper_cfg(
        group_size=4,
        kl_coef=0.01,
        loss_agg="seq_mean_token_mean",
        train_batch_size=16,
        filter=FilterConfig(lower=1, upper=2, buffer_size=8, updates_per_buffer=4),
        openrlhf=OpenRLHFConfig(gpus_per_node=4, vllm_num_engines=4, micro_train_batch_size=2),
    )
    a = parsed(cfg)
    assert a.algo.kl.use_loss and a.algo.kl.estimator == "k3" and a.algo.kl.init_coef == 0.01
    assert a.actor.loss_agg_mode == "seq-mean-token-mean"
    assert a.train.max_epochs == 2  # 4 = 2 x 8 x 4 / 16
    assert tuple(a.algo.dynamic_filtering_range) == pytest.approx(((1 - 0.5) / 4, (2 + 0.5) / 4))
    assert a.data.max_images_per_prompt == 0 and not a.actor.freeze_visual_encoder


def test_dr_grpo_advantage_maps_to_openrlhfs_estimator():
    a = parsed(paper_cfg(advantage="dr_grpo"))
    assert a.algo.advantage.estimator == "dr_grpo" and a.critic.model_name_or_path is None
    with pytest.raises(ConfigError, match="grpo.advantage"):
        paper_cfg(advantage="whiten")


def test_filter_off_sends_no_dynamic_filtering():
    a = parsed(
        paper_cfg(filter=FilterConfig(enabled=False, drop_zero_variance=False, buffer_size=128, updates_per_buffer=8))
    )
    assert not a.algo.dynamic_filtering_enable


@pytest.mark.parametrize(
    "kw, key",
    [
        # 128 x 8 / 96 is not whole
        ({"train_batch_size": 96}, "grpo.train_batch_size"),
        # one epoch over the buffer is 8 updates: K_2 = 12 is not a whole number of epochs
        ({"filter": FilterConfig(buffer_size=128, updates_per_buffer=12)}, "filter.updates_per_buffer"),
        # 128 sequences per update cannot be split into micro-batches of 3 on each of 8 GPUs
        ({"openrlhf": OpenRLHFConfig(micro_train_batch_size=3)}, "grpo.train_batch_size"),
    ],
)
def test_batch_arithmetic_errors_say_what_to_change(kw, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        job(paper_cfg(**kw), policy_path="m", prompt_data="d")


def test_local_backend_is_refused():
    with pytest.raises(ConfigError, match="grpo.backend"):
        job(GRPOConfig(), policy_path="m", prompt_data="d")


def test_submit_command_and_runtime_env():
    cfg = paper_cfg(openrlhf=OpenRLHFConfig(ray_address="http://head:8265", wandb_project="eb"))
    train, submit = job(cfg, policy_path="/shared/m", prompt_data="/shared/d.jsonl", reward_variant="rr_code")
    assert submit[:7] == ["ray", "job", "submit", "--address", "http://head:8265", "--submission-id", "sid"]
    env = json.loads(submit[submit.index("--runtime-env-json") + 1])
    assert env["working_dir"] == "."
    assert env["env_vars"]["EMBODIED_RFT_REWARD_VARIANT"] == "rr_code"
    assert env["env_vars"]["EMBODIED_RFT_REWARD_LOG"] == str(LAYOUT.rewards)
    assert ".venv" in env["excludes"] and "models" in env["excludes"]
    # the entrypoint checks the inputs, then runs the trainer; OpenRLHF's own ray.init keys go to its process
    entry = submit[submit.index("--") + 1 :]
    assert entry[:3] == ["python3", "-m", "embodied_rft.train.openrlhf.entry"]
    assert entry[entry.index("--job-dir") + 1] == str(LAYOUT.dir)
    assert ["--input", "policy=/shared/m", "--input", "prompts=/shared/d.jsonl"] == entry[7:11]
    assert entry[entry.index("--env") + 1] == "TOKENIZERS_PARALLELISM=false"
    assert "TOKENIZERS_PARALLELISM" not in env["env_vars"] and "NCCL_DEBUG" not in env["env_vars"]
    assert entry[entry.index("--") + 1 :] == train
    # checkpoints and the model go to the job's folder on the shared root, by absolute path
    assert train[train.index("--ckpt.output_dir") + 1] == str(LAYOUT.model)
    assert train[train.index("--ckpt.path") + 1] == str(LAYOUT.ckpt)
    # W&B is switched on by name only; the key comes from the cluster's environment
    assert train[train.index("--logger.wandb.key") + 1] == "WANDB_API_KEY"
    parse_train_ppo_ray(train[3:])


def test_the_jobs_runtime_env_merges_with_openrlhfs_ray_init():
    """OpenRLHF's train_ppo_ray calls ray.init(runtime_env={"env_vars": {...}}); Ray refuses a job whose runtime env
    sets any of the same keys ("Failed to merge the Job's runtime env"). The keys are read from the installed
    OpenRLHF's source, the merge is Ray's own."""
    import ast
    import importlib.util

    from ray.runtime_env.runtime_env import _merge_runtime_env

    src = Path(importlib.util.find_spec("openrlhf.cli.train_ppo_ray").origin).read_text()
    init = next(
        n
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "init" and n.keywords
    )
    env_dict = next(k.value for k in init.keywords if k.arg == "runtime_env").values[0]
    theirs = {ast.literal_eval(k) for k in env_dict.keys}
    assert theirs == set(orl.DRIVER_ENV)
    cfg = paper_cfg(
        openrlhf=OpenRLHFConfig(env={"TOKENIZERS_PARALLELISM": "false", "NCCL_DEBUG": "WARN", "HF_HOME": "/h"})
    )
    _, submit = job(
        cfg,
        policy_path="/m",
        prompt_data="/d.jsonl",
        reward_variant="regrpo",
        reward_plugin="embodied_rft.regrpo.plugin",
    )
    ours = json.loads(submit[submit.index("--runtime-env-json") + 1])
    assert ours["env_vars"]["HF_HOME"] == "/h"
    assert ours["env_vars"]["EMBODIED_RFT_TOKENIZER"] == "/m"  # the regrpo cost counts the policy's tokens
    assert ours["env_vars"]["EMBODIED_RFT_REWARD_PLUGIN"] == "embodied_rft.regrpo.plugin"  # registers it on the job
    openrlhf_env = {"env_vars": dict.fromkeys(theirs, "x")}
    assert _merge_runtime_env(ours, openrlhf_env) is not None
    # the configuration this replaces put both keys in the job's runtime env: Ray refuses that
    assert _merge_runtime_env({"env_vars": dict(cfg.openrlhf.env)}, openrlhf_env) is None


def test_secrets_in_env_are_refused():
    with pytest.raises(ConfigError, match="grpo.openrlhf.env.WANDB_API_KEY"):
        OpenRLHFConfig(env={"WANDB_API_KEY": "abc"})
    OpenRLHFConfig(env={"TOKENIZERS_PARALLELISM": "false"})  # a name containing TOKEN is not a secret


def test_cli_prints_the_paper_presets_job_unless_told_otherwise(capsys):
    from embodied_rft.train.openrlhf import dry_run

    conf = str(REPO / "conf")
    assert dry_run.main(["--config-dir", conf]) == 0
    out = capsys.readouterr()
    assert out.err.startswith("# experiment=paper_qwen25vl_7b with grpo=openrlhf: 1 node(s) x 8 GPUs")
    argv = shlex.split(out.out.strip())
    assert argv[:3] == ["ray", "job", "submit"]
    entry = argv[argv.index("--") + 1 :]
    a = parse_train_ppo_ray(entry[entry.index("--") + 4 :])
    # the paper's sizes, never the CPU preset's on eight GPUs
    assert (a.rollout.n_samples_per_prompt, a.rollout.batch_size, a.rollout.max_new_tokens) == (8, 128, 4096)
    assert a.actor.adam.lr == 1e-6 and a.actor.num_gpus_per_node == 8
    assert Path(a.actor.model_name_or_path).is_absolute() and Path(a.data.prompt_dataset).is_absolute()
    # another preset composes when asked for, and says which it is
    assert dry_run.main(["--config-dir", conf, "experiment=tiny", "grpo.group_size=4"]) == 0
    out = capsys.readouterr()
    assert out.err.startswith("# experiment=tiny with grpo=openrlhf") and "G = 4" in out.err
    composed = dry_run.compose_job_config(["grpo.group_size=4"], conf)
    assert composed["grpo"]["backend"] == "openrlhf" and composed["grpo"]["group_size"] == 4
    assert dry_run.main(["--config-dir", conf, "grpo.group_sise=8"]) == 2
    assert "group_sise" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- data + reward file


def _openrlhf_prompts(path: Path, tok) -> list:
    """Our prompt file through OpenRLHF's own loading and preprocessing."""
    from datasets import load_dataset
    from openrlhf.datasets.prompts_dataset import PromptDataset

    data = load_dataset("json", data_files=str(path))["train"]
    args = SimpleNamespace(
        data=SimpleNamespace(input_key="prompt", label_key="label", apply_chat_template=True, image_key="images")
    )
    strategy = SimpleNamespace(args=args, is_rank_0=lambda: True)
    ds = PromptDataset(data, tok, strategy)
    return [ds[i] for i in range(len(ds))]


class _Engine:
    """A vLLM engine stand-in that 'generates' fixed text, as vLLM's RequestOutput carries it."""

    def __init__(self, tok, text: str) -> None:
        self.ids = tok(text + "<|im_end|>", add_special_tokens=False)["input_ids"]
        self.text = text

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        self.prompt_token_ids, self.multi_modal_data = prompt_token_ids, multi_modal_data
        out = SimpleNamespace(token_ids=self.ids, text=self.text, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


def _execute(executor, prompt, label, tok, text, images=None):
    engine = _Engine(getattr(tok, "tokenizer", tok), text)
    params = SimpleNamespace(max_tokens=200, logprobs=None)
    return asyncio.run(executor.execute(prompt, label, params, 2048, tok, engine, images=images)), engine


def test_reward_file_through_openrlhf_loader_and_executor(tmp_path):
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    _, tok = load_model(sft_policy())
    n, vision = orl.write_prompt_data(
        write_jsonl(tmp_path / "d" / "train.jsonl", grpo_samples()), tmp_path / "orl.jsonl"
    )
    assert n == 4 and not vision
    items = _openrlhf_prompts(tmp_path / "orl.jsonl", tok)
    _, prompt, label, images = items[1]
    assert prompt.endswith("<|im_start|>assistant\n") and images is None
    sample = grpo_samples()[1]
    assert label == sample["label"]

    executor = SingleTurnAgentExecutor(remote_rm_url=[str(SHIM)])  # the CLI splits --reward.remote_url into a list
    assert executor.reward_func is not None
    right, _ = _execute(executor, prompt, label, tok, gold_response(sample, full=True))
    assert float(right["reward"]) == pytest.approx(1.5) and float(right["scores"]) == 1.0
    assert set(right["extra_logs"]) == {"structure", "valid", "match", "accuracy", "accuracy_full"}
    assert float(right["extra_logs"]["structure"]) == 0.125 and float(right["extra_logs"]["accuracy"]) == 1.0

    wrong_plan = json.loads(gold_response(sample, full=True))
    wrong_plan["executable_plan"] = wrong_plan["executable_plan"][1:]  # skips the next action
    wrong, _ = _execute(executor, prompt, label, tok, json.dumps(wrong_plan))
    assert float(wrong["scores"]) == 0.0 and float(wrong["extra_logs"]["accuracy"]) == 0.0
    assert 0.0 < float(wrong["reward"]) < 1.5

    garbage, _ = _execute(executor, prompt, "not a label {", tok, "}}} <|endoftext|> ???")
    assert float(garbage["reward"]) == 0.0 and float(garbage["scores"]) == 0.0


def test_reward_file_with_a_vlm_prompt(tmp_path):
    """VLM: the query holds the expanded image tokens; the response is still found after the assistant header."""
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    policy, samples_path = vl_data()
    _, proc = load_model(policy)
    n, vision = orl.write_prompt_data(samples_path, tmp_path / "orl.jsonl", image_prefix=str(samples_path.parent))
    assert vision
    _, prompt, label, images = _openrlhf_prompts(tmp_path / "orl.jsonl", proc)[0]
    assert prompt.count("<|image_pad|>") == 1 and images and Path(images[0]).exists()
    sample = json.loads(samples_path.read_text().splitlines()[0])
    executor = SingleTurnAgentExecutor(remote_rm_url=[str(SHIM)])
    out, engine = _execute(executor, prompt, label, proc, gold_response(sample, full=True), images=images)
    assert engine.multi_modal_data is not None  # the image went to the engine
    query = proc.tokenizer.decode(out["observation_tokens"], skip_special_tokens=False)
    assert query.count("<|image_pad|>") > 1  # expanded: the prompt is not a prefix of the query any more
    assert not query.startswith(prompt)
    assert float(out["reward"]) == pytest.approx(1.5) and float(out["scores"]) == 1.0


def test_split_response_edge_cases():
    p = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert split_response(p + "hello<|im_end|><|endoftext|>", p) == "hello"
    # an assistant header the model generates itself does not move the split
    assert split_response(p + "a<|im_start|>assistant\nb", p) == "a<|im_start|>assistant\nb"
    assert split_response("plain prompt answer", "plain prompt ") == "answer"
    assert split_response("unrelated", "prompt") == ""


# ------------------------------------------------------------------------------------------- filter equivalence


def _groups(g: int) -> list[list[dict]]:
    """One group per C_x = 0..G: C_x responses with accuracy_full 1, the rest 0."""
    return [[fake_response(c, 1.0 if j < c else 0.0) for j in range(g)] for c in range(g + 1)]


def test_openrlhf_range_keeps_exactly_the_accepted_groups_for_every_g_up_to_16():
    checked = 0
    for g in range(1, 17):
        groups = _groups(g)
        for lower in range(0, g + 1):
            for upper in range(lower, g + 1):
                lo, hi = openrlhf_range(g, lower, upper)
                kept = run_dynamic_filter(groups, lo, hi, light=True)
                assert kept == [c for c in range(g + 1) if accept(c, lower, upper)], (g, lower, upper)
                checked += 1
    assert checked == 968


def test_paper_range_with_openrlhfs_own_experience_conversion():
    lo, hi = FilterConfig().openrlhf_range(8)
    assert run_dynamic_filter(_groups(8), lo, hi) == list(range(1, 8))


@pytest.mark.slow
def test_every_range_with_openrlhfs_own_experience_conversion():
    for g in range(1, 17):
        groups = _groups(g)
        for lower in range(0, g + 1):
            for upper in range(lower, g + 1):
                kept = run_dynamic_filter(groups, *openrlhf_range(g, lower, upper))
                assert kept == [c for c in range(g + 1) if accept(c, lower, upper)], (g, lower, upper)


def test_executor_scores_drive_openrlhfs_filter(tmp_path):
    """The whole chain for one prompt: reward file -> executor -> OpenRLHF's filter, paper bounds, G = 4."""
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    _, tok = load_model(sft_policy())
    sample = grpo_samples()[0]
    orl.write_prompt_data(write_jsonl(tmp_path / "train.jsonl", [sample]), tmp_path / "orl.jsonl")
    _, prompt, label, _ = _openrlhf_prompts(tmp_path / "orl.jsonl", tok)[0]
    executor = SingleTurnAgentExecutor(remote_rm_url=[str(SHIM)])
    right, wrong = gold_response(sample, full=True), "{}"
    lo, hi = build(
        GRPOConfig, {"group_size": 4, "train_batch_size": 16, "filter": {"buffer_size": 4}}, "grpo"
    ).filter.openrlhf_range(4)

    def group(index: int, texts: list[str]) -> list[dict]:
        outs = [_execute(executor, prompt, label, tok, t)[0] for t in texts]
        for o in outs:
            o["prompt"] = str(index)
        return outs

    groups = [
        group(0, [right, wrong, wrong, wrong]),
        group(1, [right] * 4),
        group(2, [wrong] * 4),
        group(3, [right, right, wrong, right]),
    ]
    assert run_dynamic_filter(groups, lo, hi) == [0, 3]
