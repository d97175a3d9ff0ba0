"""DVC stage `base`: the untrained policy -> models/base.

For the tiny kinds the byte-level BPE tokenizer is trained on the distilled corpus (prompts and answers; with
``model.tokenizer_extra: [verification]`` also the VeGAS verifier's templates, a text set VeGAS's plug-in registers:
``models.config.TOKENIZER_TEXTS``) and the model initialised from config; pretrained kinds are converted (GGUF) or
copied. The base model is evaluated beside SFT and GRPO and is
the start of the GRPO-without-SFT ablation.
"""

import json
from pathlib import Path

from embodied_rft.config import build
from embodied_rft.core.atomic import write_json_atomic
from embodied_rft.data.jsonl import iter_jsonl
from embodied_rft.models import ModelConfig, build_base_model
from embodied_rft.models.config import TOKENIZER_TEXTS
from embodied_rft.models.factory import CARD
from embodied_rft.pipeline import stage_context
from stages._hydra import stage_main


def corpus(path: Path, extra: tuple[str, ...] = ()):
    for _, rec in iter_jsonl(path):
        for m in rec.get("messages", []):
            if isinstance(m.get("content"), str):
                yield m["content"]
    for name in extra:  # model.tokenizer_extra: text sets extensions register (VeGAS's verification: docs/vegas.md §6)
        yield from TOKENIZER_TEXTS.lookup(name, "model.tokenizer_extra")()


@stage_main
def main(cfg) -> None:
    ctx = stage_context(cfg, "base")
    mcfg = build(ModelConfig, ctx.section("model"), "model")
    out = build_base_model(mcfg, corpus(Path(ctx.paths.distilled), mcfg.tokenizer_extra), ctx.paths.base_model)
    card = json.loads((Path(out) / CARD).read_text())
    write_json_atomic(
        ctx.paths.metrics("base"),
        {
            "name": mcfg.name,
            "kind": mcfg.kind,
            "source": card["source"],
            "parameters": card["parameters"],
            "vision": card["vision"],
        },
    )


if __name__ == "__main__":
    main()
