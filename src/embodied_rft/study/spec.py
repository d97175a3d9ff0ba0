"""A study is a file: ``conf/study/<name>.yaml`` (docs/studies.md has the format and an example).

A study names the arms it runs (``run``), taken from arm files it ``include``s (``conf/study/arms/*.yaml``: arms
shared by several studies, each defined once) and from its own ``arms`` mapping; its seeds; overrides for every
stage; its typed comparisons (outcome a vs outcome b, an outcome being ``<arm>/<mode>``) and its checks (registered
functions of the table, by name). An arm declares the pipeline stages it runs (``stages``), the arm it starts from
(``from``: every input it does not make itself comes from there), inputs taken from another arm (``inputs``), the
Hydra overrides it adds to its ``from`` arm's, its evaluations (``evals``: mode -> stage, what to read, overrides)
and extra steps registered by an adapter (``tasks``). Nothing here derives an arm's name from another's.

:func:`load` reads and checks a study before anything runs; a bad file is refused with the file, the line and the
key (:class:`StudyError`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

STUDY_DIR = Path("conf/study")


class StudyError(ValueError):
    """A study file that cannot be run, with the file, line and key it names."""


@dataclass(frozen=True)
class Eval:
    """One outcome of an arm: a run of ``stage`` (``evaluate``, ``bon``) with ``overrides``, read by the registered
    reader ``reader`` (default: the stage's name) at ``read`` (the model or selector whose episodes it reports).
    ``deps``: path keys the run reads besides those its stage's dvc.yaml entry names (``bon.policy=grpo`` reads
    ``paths.grpo_model``), made deps of the run."""

    mode: str
    stage: str
    read: str
    overrides: tuple[str, ...] = ()
    reader: str = ""
    deps: tuple[str, ...] = ()

    @property
    def reader_name(self) -> str:
        return self.reader or self.stage


@dataclass(frozen=True)
class Arm:
    name: str
    start: str | None = None
    stages: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    inputs: dict[str, str] = field(default_factory=dict)
    evals: dict[str, Eval] = field(default_factory=dict)
    tasks: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Outcome ``b`` against outcome ``a`` (``<arm>/<mode>`` each) on the same episodes."""

    id: str
    a: str
    b: str
    subset: str | None = None


@dataclass(frozen=True)
class Check:
    id: str
    fn: str
    args: dict[str, Any] = field(default_factory=dict)
    clause: str | None = None


@dataclass(frozen=True)
class Study:
    name: str
    file: Path
    description: str
    seeds: tuple[int, ...]
    overrides: tuple[str, ...]
    plugins: tuple[str, ...]
    arms: dict[str, Arm]
    run: tuple[str, ...]
    modes: tuple[str, ...] | None
    comparisons: tuple[Comparison, ...]
    checks: tuple[Check, ...]
    sections: tuple[tuple[str, dict[str, Any]], ...]
    clauses: dict[str, str]
    merge: tuple[str, ...]

    def outcomes(self) -> list[tuple[str, Eval]]:
        """``(arm, eval)`` of every outcome the study reads: the evals of its ``run`` arms in its ``modes``."""
        return [
            (a, e) for a in self.run for e in self.arms[a].evals.values() if self.modes is None or e.mode in self.modes
        ]

    def chain(self, arm: str) -> list[str]:
        """``arm`` and the arms it starts from, nearest first."""
        out = [arm]
        while (start := self.arms[out[-1]].start) is not None:
            out.append(start)
        return out

    def needed(self) -> list[str]:
        """Every arm the run arms need (their ``from`` chains and ``inputs``), each before the arms that need it."""
        order: list[str] = []

        def visit(a: str) -> None:
            if a in order:
                return
            arm = self.arms[a]
            for dep in [*([arm.start] if arm.start else []), *(v.split(".", 1)[0] for v in arm.inputs.values())]:
                visit(dep)
            order.append(a)

        for a in self.run:
            visit(a)
        return order


class _Lines:
    """Line numbers of a YAML file's keys, by dotted path (for errors that name the line)."""

    def __init__(self, text: str) -> None:
        self.lines: dict[str, int] = {}
        node = yaml.compose(text)
        if node is not None:
            self._walk(node, "")

    def _walk(self, node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = f"{prefix}.{k.value}" if prefix else str(k.value)
                self.lines[key] = k.start_mark.line + 1
                self._walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                key = f"{prefix}[{i}]"
                self.lines[key] = v.start_mark.line + 1
                self._walk(v, key)

    def at(self, key: str) -> int | None:
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key.rsplit(".", 1)[0] if "." in key else ""
        return None


class _Reader:
    """Typed access to one YAML file's mapping, with errors naming the file, line and key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            text = path.read_text("utf-8")
            self.data = yaml.safe_load(text) or {}
            self.lines = _Lines(text)
        except FileNotFoundError:
            raise StudyError(f"{path}: no such study file") from None
        except yaml.YAMLError as exc:
            raise StudyError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(self.data, dict):
            raise StudyError(f"{path}: expected a mapping at the top level")

    def fail(self, key: str, message: str) -> StudyError:
        line = self.lines.at(key)
        return StudyError(f"{self.path}{f':{line}' if line else ''}: {key}: {message}")

    def strings(self, value: Any, key: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise self.fail(key, f"expected a list of strings, got {value!r}")
        return tuple(value)

    def mapping(self, value: Any, key: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {value!r}")
        return value

    def entries(
        self, data: dict[str, Any], key: str, allowed: set[str], required: tuple[str, ...]
    ) -> list[tuple[str, dict[str, Any]]]:
        """``data[key]``: a list of mappings with only ``allowed`` keys and a string under each ``required`` one;
        ``[(their dotted key, mapping)]``."""
        raw = data.get(key) or []
        if not isinstance(raw, list):
            raise self.fail(key, "expected a list")
        out = []
        for i, c in enumerate(raw):
            k = f"{key}[{i}]"
            c = self.mapping(c, k)
            self.only(c, k, allowed)
            for need in required:
                if not isinstance(c.get(need), str):
                    raise self.fail(k, f"needs `{need}:` (a name)")
            out.append((k, c))
        return out

    def only(self, value: dict[str, Any], key: str, allowed: set[str]) -> None:
        extra = sorted(k for k in value if k not in allowed and not str(k).startswith("_"))
        if extra:
            raise self.fail(f"{key}.{extra[0]}" if key else extra[0], f"unknown key; expected one of {sorted(allowed)}")


ARM_KEYS = {"from", "stages", "overrides", "inputs", "evals", "tasks", "description"}
EVAL_KEYS = {"stage", "read", "overrides", "reader", "deps"}
STUDY_KEYS = {
    "description",
    "seeds",
    "overrides",
    "plugins",
    "include",
    "arms",
    "run",
    "modes",
    "comparisons",
    "checks",
    "sections",
    "clauses",
    "merge",
}


def _arms(r: _Reader, raw: Any, key: str) -> dict[str, Arm]:
    out: dict[str, Arm] = {}
    for name, d in r.mapping(raw, key).items():
        if str(name).startswith("_"):  # YAML anchors' holders
            continue
        k = f"{key}.{name}" if key else str(name)
        d = r.mapping(d, k)
        r.only(d, k, ARM_KEYS)
        evals = {}
        for mode, e in r.mapping(d.get("evals"), f"{k}.evals").items():
            ek = f"{k}.evals.{mode}"
            e = r.mapping(e, ek)
            r.only(e, ek, EVAL_KEYS)
            for need in ("stage", "read"):
                if not isinstance(e.get(need), str):
                    raise r.fail(ek, f"needs `{need}:` (a name)")
            ovs = r.strings(e.get("overrides"), f"{ek}.overrides")
            deps = r.strings(e.get("deps"), f"{ek}.deps")
            evals[str(mode)] = Eval(str(mode), e["stage"], e["read"], ovs, str(e.get("reader") or ""), deps)
        tasks = d.get("tasks") or []
        if not isinstance(tasks, list) or not all(
            isinstance(t, dict) and isinstance(t.get("task"), str) for t in tasks
        ):
            raise r.fail(f"{k}.tasks", "expected a list of mappings, each with `task: <registered name>`")
        inputs = r.mapping(d.get("inputs"), f"{k}.inputs")
        for pk, src in inputs.items():
            if not isinstance(src, str) or src.count(".") != 1:
                raise r.fail(f"{k}.inputs.{pk}", f"expected `<arm>.<path key>`, got {src!r}")
        start = d.get("from")
        if start is not None and not isinstance(start, str):
            raise r.fail(f"{k}.from", f"expected an arm's name, got {start!r}")
        out[str(name)] = Arm(
            name=str(name),
            start=start,
            stages=r.strings(d.get("stages"), f"{k}.stages"),
            overrides=r.strings(d.get("overrides"), f"{k}.overrides"),
            inputs={str(a): b for a, b in inputs.items()},
            evals=evals,
            tasks=tuple(tasks),
        )
    return out


def load(name: str | Path, study_dir: Path = STUDY_DIR, seeds: list[int] | None = None) -> Study:
    """The study ``name`` (a name under ``study_dir`` or a path to a YAML file), checked; ``seeds`` replaces its
    seeds (``make study SEEDS=...``)."""
    path = Path(name) if str(name).endswith((".yaml", ".yml")) else study_dir / f"{name}.yaml"
    r = _Reader(path)
    d = r.data
    r.only(d, "", STUDY_KEYS)
    arms: dict[str, Arm] = {}
    origin: dict[str, str] = {}
    for i, inc in enumerate(r.strings(d.get("include"), "include")):
        ip = path.parent / f"{inc}.yaml"
        if not ip.exists():
            raise r.fail(f"include[{i}]", f"no arm file {ip}")
        ir = _Reader(ip)
        ir.only(ir.data, "", {"arms"})
        for a, arm in _arms(ir, ir.data.get("arms"), "arms").items():
            if a in arms:
                raise ir.fail(f"arms.{a}", f"already defined in {origin[a]}; define an arm once")
            arms[a], origin[a] = arm, str(ip)
    for a, arm in _arms(r, d.get("arms"), "arms").items():
        if a in arms:
            raise r.fail(f"arms.{a}", f"already defined in {origin[a]}; define an arm once (or give it another name)")
        arms[a], origin[a] = arm, str(path)
    run = r.strings(d.get("run"), "run")
    if not run:
        raise r.fail("run", "name the arms this study runs (a list)")
    for i, a in enumerate(run):
        if a not in arms:
            raise r.fail(f"run[{i}]", f"no arm {a!r}; known: {', '.join(sorted(arms)) or 'none'}")
    if len(set(run)) != len(run):
        raise r.fail("run", "an arm is named twice")
    for a, arm in arms.items():
        if arm.start is not None and arm.start not in arms:
            raise StudyError(f"{origin[a]}: arms.{a}.from: no arm {arm.start!r}")
        for pk, src in arm.inputs.items():
            if src.split(".")[0] not in arms:
                raise StudyError(f"{origin[a]}: arms.{a}.inputs.{pk}: no arm {src.split('.')[0]!r}")
    raw_seeds = seeds if seeds is not None else d.get("seeds")
    if not isinstance(raw_seeds, list) or not raw_seeds or not all(isinstance(s, int) and s >= 0 for s in raw_seeds):
        raise r.fail("seeds", f"expected a non-empty list of integers >= 0, got {raw_seeds!r}")
    if len(set(raw_seeds)) != len(raw_seeds):
        raise r.fail("seeds", f"a seed is given twice in {raw_seeds}; each seed runs once and counts once")
    modes = r.strings(d.get("modes"), "modes") or None
    study = Study(
        name=path.stem,
        file=path,
        description=str(d.get("description") or "").strip(),
        seeds=tuple(sorted(raw_seeds)),
        overrides=r.strings(d.get("overrides"), "overrides"),
        plugins=r.strings(d.get("plugins"), "plugins"),
        arms=arms,
        run=run,
        modes=modes,
        comparisons=(),
        checks=(),
        sections=_sections(r, d.get("sections")),
        clauses={str(k): str(v) for k, v in r.mapping(d.get("clauses"), "clauses").items()},
        merge=r.strings(d.get("merge"), "merge"),
    )
    _check_cycles(study, r)
    outcomes = {f"{a}/{e.mode}" for a, e in study.outcomes()}
    comparisons = []
    for k, c in r.entries(d, "comparisons", {"id", "a", "b", "subset"}, ("id", "a", "b")):
        for side in ("a", "b"):
            if c[side] not in outcomes:
                raise r.fail(f"{k}.{side}", f"{c[side]!r} is not an outcome of this study (<arm>/<mode> of a run arm)")
        comparisons.append(Comparison(c["id"], c["a"], c["b"], c.get("subset")))
    ids = [c.id for c in comparisons]
    if len(set(ids)) != len(ids):
        raise r.fail("comparisons", f"a comparison id is used twice: {sorted({i for i in ids if ids.count(i) > 1})}")
    checks = []
    for k, c in r.entries(d, "checks", {"id", "fn", "args", "clause"}, ("id", "fn")):
        args = r.mapping(c.get("args"), f"{k}.args")
        if "comparison" in args and args["comparison"] not in ids:
            raise r.fail(f"{k}.args.comparison", f"no comparison {args['comparison']!r}; known: {', '.join(ids)}")
        if c.get("clause") is not None and c["clause"] not in study.clauses:
            raise r.fail(f"{k}.clause", f"no clause {c['clause']!r} under `clauses:`")
        checks.append(Check(c["id"], c["fn"], args, c.get("clause")))
    return Study(**{**study.__dict__, "comparisons": tuple(comparisons), "checks": tuple(checks)})


def _sections(r: _Reader, raw: Any) -> tuple[tuple[str, dict[str, Any]], ...]:
    """``sections:`` entries: a registered section's name, or ``{section: <name>, <arg>: <value>, ...}``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise r.fail("sections", "expected a list")
    out = []
    for i, x in enumerate(raw):
        if isinstance(x, str):
            out.append((x, {}))
        elif isinstance(x, dict) and isinstance(x.get("section"), str):
            out.append((x["section"], {k: v for k, v in x.items() if k != "section"}))
        else:
            raise r.fail(f"sections[{i}]", f"expected a section's name or {{section: <name>, ...args}}, got {x!r}")
    return tuple(out)


def _check_cycles(study: Study, r: _Reader) -> None:
    for a in study.arms:
        seen = [a]
        cur = study.arms[a].start
        while cur is not None:
            if cur in seen:
                raise r.fail(f"arms.{a}.from", f"arms start from each other: {' -> '.join([*seen, cur])}")
            seen.append(cur)
            cur = study.arms[cur].start
