"""Run pieces of the INSTALLED OpenRLHF 0.11.2 on CPU, for the contract tests (no copies of its code).

* :func:`parse_train_ppo_ray` — the CLI parser and post-parse checks of ``openrlhf/cli/train_ppo_ray.py``:
  its ``if __name__ == "__main__":`` block is located with ``ast`` and executed on its own, after the
  module's imports that load without vLLM, with ``train`` replaced by a function that returns the parsed
  args (nothing is trained, no trainer is faked).
* :func:`samples_generator` — ``openrlhf.trainer.ppo_utils.samples_generator`` imported with ``vllm`` and
  the vLLM engine module stubbed through ``sys.modules`` (as OpenRLHF's own CPU tests do), so its real
  dynamic-filtering code can be run on hand-made responses; ``ray`` inside it is replaced by a local
  stand-in whose ``wait``/``get`` return already computed results.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _main_block(tree: ast.Module) -> ast.If:
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__"
        ):
            return node
    raise AssertionError("train_ppo_ray.py has no `if __name__ == '__main__':` block")


def parse_train_ppo_ray(argv: Sequence[str]) -> Any:
    """OpenRLHF's own parse + validation of ``argv`` (flags only); returns the hierarchical args.

    Raises SystemExit on a parser error and AssertionError when a post-parse check fails, as the CLI would.
    """
    spec = importlib.util.find_spec("openrlhf.cli.train_ppo_ray")
    assert spec is not None and spec.origin is not None, (
        "openrlhf is not installed (pip install --no-deps openrlhf==0.11.2)"
    )
    path = Path(spec.origin)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    ns: dict[str, Any] = {"__name__": "__main__", "__file__": str(path)}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            try:
                exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), ns)
            except ImportError:
                pass  # the trainer's Ray/vLLM actors: not needed to parse
    captured: list[Any] = []
    ns["train"] = captured.append
    block = compile(ast.Module(body=_main_block(tree).body, type_ignores=[]), str(path), "exec")
    saved = sys.argv
    sys.argv = ["train_ppo_ray.py", *argv]
    try:
        exec(block, ns)
    finally:
        sys.argv = saved
    assert len(captured) == 1, "train(args) was not reached"
    return captured[0]


class _LocalRay:
    """``ray.wait``/``ray.get`` over values that are already computed (the stand-in's 'refs')."""

    @staticmethod
    def wait(refs: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        return refs[:num_returns], refs[num_returns:]

    @staticmethod
    def get(ref: Any) -> Any:
        return ref


def samples_generator() -> types.ModuleType:
    """OpenRLHF's samples_generator module, importable on CPU (see module docstring)."""
    name = "openrlhf.trainer.ppo_utils.samples_generator"
    if name in sys.modules:
        return sys.modules[name]
    stub_vllm = importlib.util.find_spec("vllm") is None
    if stub_vllm:
        vllm = types.ModuleType("vllm")

        class SamplingParams:  # only constructed by the dispatch method, which the tests replace
            def __init__(self, **kw: Any) -> None:
                self.__dict__.update(kw)

        vllm.SamplingParams = SamplingParams  # type: ignore[attr-defined]
        sys.modules["vllm"] = vllm
    engine = "openrlhf.trainer.ray.vllm_engine"
    if engine not in sys.modules:
        stub = types.ModuleType(engine)
        stub.batch_vllm_engine_call = lambda *a, **k: None  # type: ignore[attr-defined]
        stub.create_vllm_engines = lambda *a, **k: None  # type: ignore[attr-defined]
        sys.modules[engine] = stub
    try:
        mod = importlib.import_module(name)
    finally:
        if stub_vllm:
            # the module keeps its reference; left in sys.modules the stub would make later `find_spec("vllm")`
            # calls (TRL's, at import) fail with "vllm.__spec__ is None"
            del sys.modules["vllm"]
    mod.ray = _LocalRay  # type: ignore[attr-defined]
    mod.tqdm = functools.partial(mod.tqdm, disable=True)  # type: ignore[attr-defined]
    return mod


class _Scalar:
    """A one-element stand-in for a tensor entry: the filter only calls ``.item()`` on it."""

    __slots__ = ("value",)

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


class _LightExperience:
    """What the filter reads of an Experience (``scores[0].item()``) and what tells the groups apart
    (``prompts``)."""

    __slots__ = ("scores", "prompts")

    def __init__(self, response: dict) -> None:
        score = response.get("scores")
        self.scores = None if score is None else [_Scalar(float(score))]
        self.prompts = [response["prompt"]]


def run_dynamic_filter(responses_per_prompt: list[list[dict]], lo: float, hi: float, light: bool = False) -> list[int]:
    """Feed one group of response dicts per prompt through OpenRLHF's ``_generate_vllm`` with dynamic
    filtering on; returns the indices of the prompts whose groups it kept.

    ``light=True`` swaps OpenRLHF's response→Experience conversion (about 1 ms per response on this CPU) for
    one that carries only ``scores`` and ``prompts``; the keep decision is still OpenRLHF's own code."""
    sg = samples_generator()
    args = types.SimpleNamespace(
        algo=types.SimpleNamespace(dynamic_filtering_enable=True, dynamic_filtering_range=(lo, hi)),
        rollout=types.SimpleNamespace(
            batch_size=len(responses_per_prompt), n_samples_per_prompt=len(responses_per_prompt[0])
        ),
        vllm=types.SimpleNamespace(enable_sleep=False),
    )
    strategy = types.SimpleNamespace(args=args)
    gen = sg.SamplesGenerator(strategy, None, None, None, [])
    # prompts are the indices; the "refs" the dispatcher returns are the finished groups themselves
    batches = iter([(["default"], [str(i)], [str(i)], [None]) for i in range(len(responses_per_prompt))])
    gen._dispatch_prompts_to_vllm = lambda prompts, labels, images=None, **kw: [
        responses_per_prompt[int(p)] for p in prompts
    ]
    if light:
        gen._process_response_into_experience = lambda response, **kw: _LightExperience(response)
    experiences, consumed, _ = gen._generate_vllm(
        batches, len(responses_per_prompt), dynamic_filtering=True, max_len=64
    )
    kept = sorted({int(e.prompts[0]) for e in experiences})
    return kept


def fake_response(prompt_index: int, score: float, reward: float = 0.0) -> dict:
    """A rollout result in the shape SingleTurnAgentExecutor returns (3 prompt + 2 response tokens)."""
    return {
        "prompt": str(prompt_index),
        "label": str(prompt_index),
        "images": None,
        "mm_train_inputs": None,
        "observation_tokens": [1, 2, 3, 4, 5],
        "action_ranges": [(3, 5)],
        "rollout_log_probs": None,
        "truncated": False,
        "reward": reward,
        "scores": score,
        "extra_logs": {},
    }
