"""Extensions are leaves (docs/architecture.md §3, "Plug-in points"): the core never imports an extension.

An extension package (``embodied_rft.regrpo``, ``embodied_rft.vegas``, and later ``embodied_rft.dna`` and
``embodied_rft.embodied_r``) may be imported by itself, by ``stages/``, by ``embodied_rft.tools`` and
``embodied_rft.study`` (their drivers and study adapters) and by tests; every other module under
``src/embodied_rft/`` is the core, which reaches an extension only through a registry it fills when the module that
config data names is imported (``core/plugins.py``). Imports are read with ``ast``, nothing is imported: absolute,
relative (resolved) and lazy ones inside functions, and a string literal that is a dotted extension module name (an
``importlib`` import in disguise). Second, a stage's process imports an extension only when its config uses one of
the names the ``plugins:`` table gives it. Third, the import graph between the first-level parts of ``embodied_rft``
(its subpackages and modules) has no cycle.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
EXTENSIONS = ("vegas", "regrpo", "dna", "embodied_r")
# where an extension may be imported from, besides its own package (paths relative to the repository)
ALLOWED = ("stages/", "src/embodied_rft/tools/", "src/embodied_rft/study/")
_EXT_MODULE = re.compile(rf"^embodied_rft\.(?:{'|'.join(EXTENSIONS)})(?:\.\w+)*(?::\w+)?$")


def module_name(path: Path, root: Path = REPO) -> str:
    """Dotted name of a file under ``src/`` or of ``stages/...``."""
    rel = path.relative_to(root / "src" if path.is_relative_to(root / "src") else root).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(text: str, name: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in a module's source, wherever it sits, relative ones resolved; ``from a
    import b`` yields ``a.b`` too (``b`` may be a submodule); a string that names an extension module counts."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            yield node.lineno, base
            for alias in node.names:  # ``from pkg import sub`` imports the submodule when there is one
                sub = f"{base}.{alias.name}"
                if alias.name != "*" and any(f.is_file() for f in _files(sub)):
                    yield node.lineno, sub
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _EXT_MODULE.match(node.value):
            yield node.lineno, node.value.partition(":")[0]


def _files(module: str) -> tuple[Path, Path]:
    base = SRC.joinpath(*module.split("."))
    return base.with_suffix(".py"), base / "__init__.py"


def extension_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "embodied_rft" and parts[1] in EXTENSIONS else None


def violations(text: str, rel: str) -> list[str]:
    """``file:line: imports <module>`` for each extension a module may not import (module docstring)."""
    if rel.startswith(ALLOWED):
        return []
    path = REPO / rel
    name = module_name(path)
    own = extension_of(name + ".x")
    return [
        f"{rel}:{line}: imports {mod}: the core reaches an extension through a registry (core/plugins.py)"
        for line, mod in imports(text, name, path.name == "__init__.py")
        if extension_of(mod) not in (None, own)
    ]


def sources() -> list[Path]:
    return sorted([*(SRC / "embodied_rft").rglob("*.py"), *(REPO / "stages").rglob("*.py")])


def test_the_core_imports_no_extension():
    found = [v for p in sources() for v in violations(p.read_text("utf-8"), p.relative_to(REPO).as_posix())]
    assert not found, "extensions are leaves:\n  " + "\n  ".join(found)


def test_a_planted_extension_import_is_reported():
    text = (
        'import json\n\n\ndef f():\n    from ..regrpo.trigger import summarize\n    return "embodied_rft.vegas.bon"\n'
    )
    rel = "src/embodied_rft/evaluate/planted.py"
    assert violations(text, rel) == [
        f"{rel}:5: imports embodied_rft.regrpo.trigger: the core reaches an extension through a registry "
        "(core/plugins.py)",
        f"{rel}:6: imports embodied_rft.vegas.bon: the core reaches an extension through a registry (core/plugins.py)",
    ]
    # the same text is fine inside an extension, a tool or a stage; an extension may not import another one
    assert violations(text.replace("vegas", "regrpo"), "src/embodied_rft/regrpo/planted.py") == []
    assert violations(text, "src/embodied_rft/tools/planted.py") == violations(text, "stages/planted.py") == []
    assert [v.split(": ")[1] for v in violations(text, "src/embodied_rft/dna/planted.py")] == [
        "imports embodied_rft.regrpo.trigger",
        "imports embodied_rft.vegas.bon",
    ]


_LOADS = """
import json, sys
import yaml
from embodied_rft.config import build
from embodied_rft.data.decompose import DecomposeConfig
from embodied_rft.evaluate.config import EvalConfig
from embodied_rft.models import ModelConfig
from embodied_rft.pipeline import stage_context
from embodied_rft.reward import RewardConfig
from embodied_rft.teacher.config import TeacherConfig
from embodied_rft.train.grpo.config import GRPOConfig

cfg = yaml.safe_load(open("params.yaml"))
for dotted, value in json.loads(sys.argv[1]).items():
    *path, last = dotted.split(".")
    node = cfg
    for k in path:
        node = node[k]
    node[last] = value
stage_context(cfg, "grpo")
for key, cls in [("decompose", DecomposeConfig), ("teacher", TeacherConfig), ("reward", RewardConfig),
                 ("evaluate", EvalConfig), ("grpo", GRPOConfig), ("model", ModelConfig)]:
    build(cls, cfg[key], key)
print(" ".join(sorted({m.split(".")[1] for m in sys.modules if m.startswith(("embodied_rft.regrpo", "embodied_rft.vegas"))})))
"""


@pytest.mark.parametrize(
    "overrides,extensions",
    [
        ({}, ""),  # the paper's pipeline
        ({"reward.variant": "regrpo"}, "regrpo"),
        ({"decompose.rot.enabled": True, "decompose.recovery_per_episode": 1}, "regrpo"),
        ({"evaluate.reflection": "free"}, "regrpo"),
        ({"model.tokenizer_extra": ["verification"]}, "vegas"),
    ],
)
def test_a_stage_imports_an_extension_only_when_its_config_uses_it(overrides, extensions):
    """A stage's process (params.yaml with ``overrides``, its configs built) has imported exactly these extensions."""
    run = subprocess.run(
        [sys.executable, "-c", _LOADS, json.dumps(overrides)], cwd=REPO, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == extensions


# ---------------------------------------------------------------------------------------------- the part graph


def part_of(module: str) -> str | None:
    """The first-level part of ``embodied_rft`` a module belongs to (``embodied_rft.train.grpo.engine`` ->
    ``embodied_rft.train``), None outside it."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[0] == "embodied_rft" else None


def part_graph(files: list[Path]) -> dict[str, set[str]]:
    """part -> the parts its modules import (lazy imports included); first-level names that are not parts (an
    attribute imported from ``embodied_rft`` itself) are dropped."""
    parts = {part_of(module_name(p)) for p in files} - {None}
    graph: dict[str, set[str]] = {p: set() for p in parts}
    for p in files:
        name = module_name(p)
        src = part_of(name)
        for _, mod in imports(p.read_text("utf-8"), name, p.name == "__init__.py"):
            dst = part_of(mod)
            if src and dst in parts and dst != src:
                graph[src].add(dst)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_parts_of_the_package_import_each_other_without_a_cycle():
    cycle = find_cycle(part_graph(sorted((SRC / "embodied_rft").rglob("*.py"))))
    assert cycle is None, "import cycle between parts of embodied_rft: " + " -> ".join(cycle or [])


def test_a_planted_cycle_is_reported():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
