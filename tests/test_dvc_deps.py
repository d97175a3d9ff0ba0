"""dvc.yaml's code deps match what each stage actually imports.

For every stage, the first-party import closure of ``stages/<name>.py`` is computed statically with ``ast``
(nothing is imported): ``import embodied_rft.x.y``, ``from embodied_rft.x import y`` (``y`` may be a submodule),
relative imports, imports inside functions (lazy imports count, they run when the stage does), ``stages._hydra``,
and the ``__init__.py`` of every package on the way (importing ``a.b.c`` runs ``a`` and ``a.b`` first). Two
things that are not ``import`` statements are followed too, because a stage runs them: dotted first-party
module names in string literals (``"embodied_rft.generation.hf:HFGenerator"`` is how ``generation.BACKENDS``
loads a backend through ``importlib``), and package data files a module names by a string literal
(``world/actions.py`` reads ``eb_alfred_global_actions.json`` next to it). Imports under
``if TYPE_CHECKING:`` never run and are not followed.

Then, both ways:

* (a) every closure file lies under a declared dep of the stage (a file, or a directory above it), so editing
  code a stage runs makes ``dvc status`` report the stage;
* (b) every declared *code* dep (under ``src/`` or ``stages/``) contains a closure file, so editing code a
  stage never runs does not rerun it; and a directory dep takes in no package (a folder with an
  ``__init__.py``) of which the stage runs nothing -- ``src/embodied_rft/train`` for the SFT stage would make
  every GRPO edit rerun SFT.

An ``__init__.py`` holding nothing but a docstring cannot change what a stage computes, so it need not be a
dep (and does not keep a dep alive); the day it gains code, (a) asks for it. Data deps (``${paths...}``,
``data/``, ``models/``) are out of scope.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
FIRST_PARTY = ("embodied_rft", "stages")
CODE_ROOTS = ("src/", "stages/")
# a dotted first-party module name, optionally with an ``:attr`` (the entry-point / BACKENDS form)
_MODULE_STRING = re.compile(r"^((?:embodied_rft|stages)(?:\.[A-Za-z_]\w*)*)(?::[A-Za-z_]\w*)?$")
_DATA_SUFFIXES = (".json", ".yaml", ".yml", ".txt", ".csv", ".jsonl", ".ttf", ".png")


# ---------------------------------------------------------------------------------------------- the closure


def module_file(mod: str, repo: Path = REPO) -> Path | None:
    """The file a first-party module name is loaded from (``pkg/__init__.py`` for a package), or None."""
    parts = mod.split(".")
    if parts[0] not in FIRST_PARTY:
        return None
    base = (repo / "src" if parts[0] == "embodied_rft" else repo).joinpath(*parts)
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _module_name(path: Path, repo: Path = REPO) -> tuple[str, bool]:
    """(dotted name, is_package) of a first-party file."""
    rel = path.relative_to(repo / "src" if path.is_relative_to(repo / "src") else repo)
    parts = list(rel.with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    if is_pkg:
        parts = parts[:-1]
    return ".".join(parts), is_pkg


def _with_parents(mod: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: importing a module runs every package above it first."""
    parts = mod.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """ast.walk, minus the bodies of ``if TYPE_CHECKING:`` (their ``else`` still runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            stack.append(node.test)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imported_modules(path: Path, repo: Path = REPO) -> tuple[set[str], set[Path]]:
    """First-party modules ``path`` imports (wherever the import sits) and package data files it names."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    name, is_pkg = _module_name(path, repo)
    package = name if is_pkg else name.rpartition(".")[0]
    mods: set[str] = set()
    data: set[Path] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                mods.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                if node.level > 1:
                    anchor = anchor[: -(node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            mods.add(base)
            for alias in node.names:  # ``from pkg import sub`` imports the submodule when there is one
                if alias.name != "*" and module_file(f"{base}.{alias.name}", repo) is not None:
                    mods.add(f"{base}.{alias.name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = _MODULE_STRING.match(node.value)
            if m and module_file(m.group(1), repo) is not None:
                mods.add(m.group(1))
            elif node.value.endswith(_DATA_SUFFIXES) and "/" not in node.value:
                cand = path.parent / node.value
                if cand.is_file():
                    data.add(cand)
    first_party = {m for m in mods if m.split(".")[0] in FIRST_PARTY}
    return {p for m in first_party for p in _with_parents(m)}, data


def closure(entry: Path, repo: Path = REPO) -> set[Path]:
    """Every first-party file (modules and package data) running ``entry`` can load."""
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if path.suffix != ".py":
            continue
        mods, data = imported_modules(path, repo)
        todo.extend(data)
        for mod in mods:
            f = module_file(mod, repo)
            if f is not None and f not in seen:
                todo.append(f)
    return seen


def is_inert(path: Path) -> bool:
    """An ``__init__.py`` that is empty or only a docstring: editing it cannot change a stage's outputs."""
    if path.name != "__init__.py":
        return False
    body = ast.parse(path.read_text("utf-8")).body
    return all(isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) for s in body)


# ---------------------------------------------------------------------------------------------- dvc.yaml


def _lookup(ctx: Mapping, dotted: str):
    cur = ctx
    for key in dotted.split("."):
        if not isinstance(cur, Mapping) or key not in cur:
            return None
        cur = cur[key]
    return cur


def resolve(dep: str, ctx: Mapping) -> str:
    """``${a.b}`` interpolated from ``ctx`` where it can be; left as it is otherwise (only to classify deps)."""

    def sub(m: re.Match) -> str:
        v = _lookup(ctx, m.group(1).strip())
        return m.group(0) if v is None or isinstance(v, (Mapping, list)) else str(v)

    return re.sub(r"\$\{([^}]*)\}", sub, dep)


def load_pipeline(repo: Path = REPO) -> tuple[dict, dict]:
    """(stages, interpolation context: params.yaml plus dvc.yaml ``vars`` mappings)."""
    dvc = yaml.safe_load((repo / "dvc.yaml").read_text("utf-8"))
    params = repo / "params.yaml"
    ctx: dict = dict(yaml.safe_load(params.read_text("utf-8")) or {}) if params.is_file() else {}
    for v in dvc.get("vars") or []:
        if isinstance(v, Mapping):
            ctx.update(v)
    return dvc["stages"], ctx


def dep_path(dep) -> str:
    """A dvc.yaml dep entry is a path, or a one-key mapping ``{path: {options}}``."""
    return next(iter(dep)) if isinstance(dep, Mapping) else str(dep)


def code_deps(deps: Iterable, ctx: Mapping) -> list[str]:
    """The deps under ``src/`` or ``stages/`` (normalised, no trailing slash); data deps are skipped."""
    out = []
    for d in deps or []:
        p = resolve(dep_path(d), ctx).strip().removeprefix("./").rstrip("/")
        if p.startswith(CODE_ROOTS) and "${" not in p:
            out.append(p)
    return out


def entry_point(name: str, stage: Mapping) -> str:
    """The module the stage's cmd runs (``python -m stages.<name>``); falls back to ``stages.<name>``."""
    m = re.search(r"python\S*\s+-m\s+(\S+)", str(stage.get("cmd", "")))
    return m.group(1) if m else f"stages.{name}"


# ---------------------------------------------------------------------------------------------- the check


@dataclass
class DepReport:
    stage: str
    missing: dict[str, str] = field(default_factory=dict)  # closure file -> dep to add
    dead: list[str] = field(default_factory=list)  # declared code dep that holds no closure file
    broad: dict[str, list[str]] = field(default_factory=dict)  # directory dep -> unused packages inside it

    @property
    def ok(self) -> bool:
        return not self.missing and not self.dead and not self.broad

    def messages(self) -> list[str]:
        out = [
            f"stage {self.stage!r}: runs {f} but no dep covers it -> add dep {d!r} to stages.{self.stage}.deps"
            for f, d in sorted(self.missing.items())
        ]
        out += [
            f"stage {self.stage!r}: dep {d!r} holds no file the stage imports -> remove it from "
            f"stages.{self.stage}.deps"
            for d in self.dead
        ]
        out += [
            f"stage {self.stage!r}: dep {d!r} also covers {', '.join(pkgs)}, which the stage never imports -> "
            f"replace it in stages.{self.stage}.deps by deps for only the parts it imports"
            for d, pkgs in sorted(self.broad.items())
        ]
        return out


def _covers(dep: str, rel: str) -> bool:
    return rel == dep or rel.startswith(dep + "/")


def suggest_dep(rel: str) -> str:
    """The dep to add for an uncovered file: its package directory when the file is a package's
    ``__init__.py`` (the whole package is then imported), the file itself otherwise."""
    return rel.rpartition("/")[0] if rel.endswith("/__init__.py") and rel.count("/") > 1 else rel


def check_stage(stage: str, deps: Iterable[str], required: Iterable[Path], repo: Path = REPO) -> DepReport:
    """Compare one stage's declared code deps (repo-relative) with the files it runs (``required``)."""
    deps = list(deps)
    rels = sorted(p.relative_to(repo).as_posix() for p in required)
    report = DepReport(stage)
    for rel in rels:
        if not any(_covers(d, rel) for d in deps):
            report.missing[rel] = suggest_dep(rel)
    for d in deps:
        if not any(_covers(d, rel) for rel in rels):
            report.dead.append(d)
            continue
        if (repo / d).is_dir():
            unused = sorted(
                pkg.parent.relative_to(repo).as_posix()
                for pkg in (repo / d).rglob("__init__.py")
                if pkg.parent != repo / d
                and not any(_covers(pkg.parent.relative_to(repo).as_posix(), rel) for rel in rels)
            )
            # report the outermost unused packages only
            unused = [u for u in unused if not any(u != o and _covers(o, u) for o in unused)]
            if unused:
                report.broad[d] = unused
    return report


def required_files(entry_module: str, repo: Path = REPO) -> set[Path]:
    entry = module_file(entry_module, repo)
    assert entry is not None, f"cannot find the file of {entry_module}"
    return {p for p in closure(entry, repo) if not is_inert(p)}


STAGES, CTX = load_pipeline()


@pytest.fixture(scope="module")
def requirements() -> dict[str, set[Path]]:
    return {name: required_files(entry_point(name, st)) for name, st in STAGES.items()}


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_code_deps_match_import_closure(stage, requirements):
    deps = code_deps(STAGES[stage].get("deps"), CTX)
    report = check_stage(stage, deps, requirements[stage])
    assert report.ok, "dvc.yaml code deps are out of date:\n  " + "\n  ".join(report.messages())


def test_closure_follows_lazy_relative_and_string_imports(requirements):
    """The closure sees what a plain top-of-file scan would miss."""
    rel = {p.relative_to(REPO).as_posix() for p in requirements["evaluate"]}
    # lazy ``from ..world import Simulator`` inside evaluate/episode.py
    assert "src/embodied_rft/world/simulator.py" in rel
    # the backend named only by the string "embodied_rft.generation.hf:HFGenerator"
    assert "src/embodied_rft/generation/hf.py" in rel
    # the data file world/actions.py reads through importlib.resources
    assert "src/embodied_rft/world/eb_alfred_global_actions.json" in rel
    assert "stages/_hydra.py" in rel
    sft = {p.relative_to(REPO).as_posix() for p in requirements["sft"]}
    assert not any(p.startswith("src/embodied_rft/train/grpo/") for p in sft)


def _new_findings(planted: DepReport, baseline: DepReport) -> DepReport:
    """What planting changed (so these tests check the checker even while dvc.yaml itself is off)."""
    return DepReport(
        planted.stage,
        missing={f: d for f, d in planted.missing.items() if f not in baseline.missing},
        dead=[d for d in planted.dead if d not in baseline.dead],
        broad={d: u for d, u in planted.broad.items() if baseline.broad.get(d) != u},
    )


def _rels(paths: Iterable[Path]) -> set[str]:
    return {p.relative_to(REPO).as_posix() for p in paths}


def test_planted_missing_dep_is_reported(requirements):
    """evaluate without its dep on the simulator package: every world file is reported, with the dep to add."""
    deps = code_deps(STAGES["evaluate"].get("deps"), CTX)
    world = "src/embodied_rft/world"
    planted = [d for d in deps if not _covers(d, world + "/simulator.py")]
    assert planted != deps, "the evaluate stage should declare a dep covering src/embodied_rft/world"
    baseline = check_stage("evaluate", deps, requirements["evaluate"])
    report = _new_findings(check_stage("evaluate", planted, requirements["evaluate"]), baseline)
    world_files = {f for f in _rels(requirements["evaluate"]) if f.startswith(world + "/")}
    assert "src/embodied_rft/world/simulator.py" in world_files
    assert set(report.missing) == world_files and not report.dead and not report.broad
    assert report.missing["src/embodied_rft/world/__init__.py"] == world
    msg = "\n".join(report.messages())
    assert "'evaluate'" in msg and "src/embodied_rft/world/simulator.py" in msg and f"add dep {world!r}" in msg


def test_planted_dead_dep_is_reported(requirements):
    """alfred/ added to a stage that never imports it is reported as a dep to remove."""
    alfred = "src/embodied_rft/alfred"
    stage = next(s for s in sorted(STAGES) if not any(_covers(alfred, f) for f in _rels(requirements[s])))
    deps = [d for d in code_deps(STAGES[stage].get("deps"), CTX) if d != alfred]
    baseline = check_stage(stage, deps, requirements[stage])
    report = _new_findings(check_stage(stage, deps + [alfred], requirements[stage]), baseline)
    assert report.dead == [alfred] and not report.missing and not report.broad
    msg = "\n".join(report.messages())
    assert f"{stage!r}" in msg and f"dep {alfred!r}" in msg and "remove it" in msg


def test_planted_too_broad_dep_is_reported(requirements):
    """The old ``sft`` dep on all of ``train/``: GRPO and OpenRLHF edits would rerun SFT."""
    train = "src/embodied_rft/train"
    deps = [d for d in code_deps(STAGES["sft"].get("deps"), CTX) if not _covers(train, d)]
    baseline = check_stage("sft", deps, requirements["sft"])
    report = _new_findings(check_stage("sft", deps + [train], requirements["sft"]), baseline)
    assert report.broad == {train: [f"{train}/grpo", f"{train}/openrlhf"]} and not report.dead
    msg = "\n".join(report.messages())
    assert "'sft'" in msg and f"dep {train!r}" in msg and f"{train}/grpo" in msg and "replace it" in msg
