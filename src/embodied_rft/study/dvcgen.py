"""A study as a DVC pipeline: ``studies/<name>/dvc.yaml`` (generated, like params.yaml, never edited by hand).

Each stage of each arm becomes one DVC stage ``<arm>-<stage>`` with ``foreach`` over the study's seeds; each
evaluation run ``<arm>-<stage>-<mode>`` (one per distinct stage and overrides: the Best-of-N selectors of one arm
share one ``bon`` run); each adapter task ``<arm>-<task>``; and one ``table`` stage that reads every outcome and
writes ``results/<name>/table.json`` (metrics) and ``table.md``. The commands are the paper pipeline's own entry
points (``python -m stages.<stage>``) with the arm's composed config — ``studies/<name>/params/<arm>.yaml``, written
from ``conf/`` with the study's, the arm chain's and the arm's overrides, exactly as ``make params`` writes
params.yaml — plus ``seed=<s>`` and every ``paths.*`` under ``runs/<name>/seed-<s>/<arm>/``. Code deps, params keys,
outs and metrics are the paper stage's entry in ``dvc.yaml``, with its ``${paths.*}`` resolved for the arm: a path an
arm does not make comes from the arm it starts from (``from``) or the one its ``inputs`` name. So ``dvc repro``,
the run cache, ``dvc.lock``, ``dvc status`` and ``dvc metrics`` work for a study as for the paper pipeline.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from embodied_rft.core.atomic import write_text_atomic
from embodied_rft.study import checks as _checks  # noqa: F401 - registers the generic checks
from embodied_rft.study import paper as _paper  # noqa: F401 - registers the paper pipeline's section
from embodied_rft.study import table as _table  # noqa: F401 - registers the evaluate reader
from embodied_rft.study.layout import (
    SEED,
    Pipeline,
    arm_dir,
    arm_paths,
    chain_overrides,
    entry_name,
    eval_runs,
    outcome_file,
    resolved,
    results_dir,
    studies_dir,
)
from embodied_rft.study.registry import READERS, TASKS, load_plugins
from embodied_rft.study.spec import Study, StudyError

HYDRA = "hydra.run.dir=. hydra.output_subdir=null hydra/job_logging=disabled hydra/hydra_logging=disabled"
HEADER = "# GENERATED from {src} by `make study S={name}` (python -m embodied_rft.study) -- do not edit.\n"
STUDY_CODE = ["src/embodied_rft/study", "src/embodied_rft/core/stats.py", "src/embodied_rft/core/atomic.py"]


def _q(args: list[str]) -> str:
    return " ".join(a if a == SEED or re.fullmatch(r"[\w./=,:@+-]+", a) else shlex.quote(a) for a in args)


def _escape(s: str) -> str:
    """An override as DVC leaves it: a Hydra interpolation is not DVC's (the seed, ``${item}``, is)."""
    return re.sub(r"\$\{(?!item\})", r"\\${", s)


class Generator:
    """Writes a study's DVC pipeline and the composed configs its stages read."""

    def __init__(self, study: Study, pipe: Pipeline | None = None, conf_dir: Path = Path("conf")) -> None:
        self.study, self.pipe, self.conf_dir = study, pipe or Pipeline.read(), conf_dir
        load_plugins(study.plugins, str(study.file))
        self.configs: dict[Any, dict[str, Any]] = {}  # arm -> its config; (arm, eval overrides) -> an eval's

    # --- validation and composition ---

    def compose(self) -> dict[str, str]:
        """``{arm: composed YAML}`` for every arm the study needs, each checked by building every stage's config
        (the checks of ``make params``), evaluation overrides included: a bad value is refused before any run."""
        from embodied_rft.params import section_configs

        s = self.study
        self.check_merge()
        texts = {}
        for arm in s.needed():
            a = s.arms[arm]
            for st in a.stages:
                if st not in self.pipe.stages:
                    raise StudyError(f"{s.file}: arms.{arm}.stages: no pipeline stage {st!r} in dvc.yaml")
            ovs = chain_overrides(s, arm)
            try:
                cfg = yaml.safe_load(_composed(self.conf_dir, tuple(ovs)))
                texts[arm] = unresolved(self.conf_dir, ovs)
                section_configs(cfg)
                for e in a.evals.values():
                    if e.stage not in self.pipe.stages:
                        raise StudyError(f"{s.file}: arms.{arm}.evals.{e.mode}.stage: no pipeline stage {e.stage!r}")
                    READERS.get_or_fail(e.reader_name, f"{s.file}: arms.{arm}.evals.{e.mode}.stage")
                    if e.overrides:
                        ecfg = yaml.safe_load(_composed(self.conf_dir, (*ovs, *e.overrides)))
                        section_configs(ecfg)
                        self.configs[(arm, e.overrides)] = ecfg
            except StudyError:
                raise
            except Exception as exc:  # noqa: BLE001 - Hydra's and the config builders' errors, named with the arm
                raise StudyError(f"{s.file}: arm {arm!r} (overrides {ovs}): {exc}") from None
            self.configs[arm] = cfg
        return texts

    def check_merge(self) -> None:
        """Every published table under ``merge:``: readable, a table of this study, its seeds disjoint from this
        run's and from the other tables' — refused before any seed runs, not after all of them."""
        from embodied_rft.study.table import SCHEMA

        s = self.study
        held = {seed: "this run's seeds" for seed in s.seeds}
        for f in s.merge:
            try:
                t = json.loads(Path(f).read_text("utf-8"))
            except (OSError, ValueError) as exc:
                raise StudyError(f"{s.file}: merge: {f}: not readable as a table ({exc})") from None
            if not isinstance(t, dict) or t.get("schema") != SCHEMA or t.get("study") != s.name:
                got = t.get("study") if isinstance(t, dict) else None
                raise StudyError(f"{s.file}: merge: {f}: not a table of study {s.name!r} (its study: {got!r})")
            if clash := sorted(x for x in t.get("seeds", []) if x in held):
                by = sorted({held[x] for x in clash})
                raise StudyError(
                    f"{s.file}: merge: {f}: seeds {clash} are already in {' and '.join(by)}; a seed is pooled once"
                )
            held.update({x: f for x in t.get("seeds", [])})

    # --- stages ---

    def _stage(
        self, arm: str, stage: str, paths: dict[str, str | None], extra: list[str], dep_keys: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        tmpl = self.pipe.stages[stage]
        s = self.study

        def res(p: str) -> str | None:
            m = re.fullmatch(r"\$\{paths\.(\w+)\}(.*)", p)
            if m is None:
                return p
            base = paths.get(m.group(1))
            return None if base is None else base + m.group(2)

        deps = []
        for d in tmpl.get("deps") or []:
            r = res(d)
            if r is not None:
                deps.append(r)
        deps += [p for o in extra for p in re.findall(r"(runs/[^\s,\]]+)", o) if p not in deps]
        cfg = self.configs[(arm, tuple(extra))] if (arm, tuple(extra)) in self.configs else self.configs.get(arm)
        deps += [p for p in plugin_code(cfg or {}, tmpl.get("params") or []) if p not in deps]
        for k in dep_keys:
            if paths.get(k) is None:
                raise StudyError(
                    f"{s.file}: arm {arm!r}: stage {stage} reads paths.{k}, which no arm of its chain makes"
                )
            deps += [] if paths[k] in deps else [paths[k]]
        entry: dict[str, Any] = {
            "cmd": _q(
                [
                    "python",
                    "-m",
                    f"stages.{stage}",
                    "--config-dir",
                    f"{studies_dir(s)}/params",
                    "--config-name",
                    arm,
                    *HYDRA.split(),
                    f"seed={SEED}",
                    *(f"paths.{k}={v}" for k, v in sorted(paths.items()) if v is not None),
                    *(_escape(o) for o in extra),
                ]
            ),
            "deps": deps,
        }
        if tmpl.get("params"):
            entry["params"] = [{f"{studies_dir(s)}/params/{arm}.yaml": list(tmpl["params"])}]
        for kind in ("outs", "metrics", "plots"):
            items = []
            for o in tmpl.get(kind) or []:
                r = res(entry_name(o))
                if r is None:
                    raise StudyError(f"{s.file}: arm {arm!r}: stage {stage} writes {entry_name(o)}, which has no path")
                items.append({r: dict(o[entry_name(o)])} if isinstance(o, dict) else r)
            if items:
                entry[kind] = items
        return entry

    def stages(self) -> dict[str, Any]:
        """Every DVC stage of the study (``foreach`` over its seeds) and the table stage."""
        s, pipe = self.study, self.pipe
        if not self.configs:
            self.compose()
        seeds = list(s.seeds)
        out: dict[str, Any] = {}

        def add(name: str, entry: dict[str, Any]) -> None:
            if name in out:
                raise StudyError(f"{s.file}: two DVC stages would be named {name!r}")
            out[name] = {"foreach": list(seeds), "do": {"wdir": "../..", **entry}}

        table_deps: list[str] = []
        for arm in s.needed():
            paths = arm_paths(s, pipe, arm)
            ctx = TaskContext(self, arm, paths)
            tasks = [  # built first: a task may add overrides to the arm's own stages (ctx.override)
                TASKS.get_or_fail(t["task"], f"{s.file}: arms.{arm}.tasks")(
                    ctx, **{k: v for k, v in t.items() if k != "task"}
                )
                for t in s.arms[arm].tasks
            ]
            for st in s.arms[arm].stages:
                add(f"{arm}-{st}", self._stage(arm, st, paths, ctx.overrides.get(st, [])))
            if arm in s.run:
                for folder, es in eval_runs(s, arm).items():
                    run_paths = {**paths}
                    for k in ("metrics_dir", "plots_dir", "reports_dir", "work_dir"):
                        run_paths[k] = f"{arm_dir(s, arm)}/{folder}/{pipe.paths[k]}"
                    keys = tuple(dict.fromkeys(k for e in es for k in e.deps))
                    add(f"{arm}-{folder}", self._stage(arm, es[0].stage, run_paths, list(es[0].overrides), keys))
                    table_deps += [outcome_file(s, arm, e.mode, seed) for e in es for seed in seeds]
            for built in tasks:
                for name, entry in built.items():
                    table_deps += [x.replace(SEED, str(seed)) for x in entry.pop("table_inputs", []) for seed in seeds]
                    add(f"{arm}-{name}", entry)
        out["table"] = {
            "wdir": "../..",
            "cmd": f"python -m embodied_rft.study table {s.file.as_posix()} --seeds {' '.join(map(str, seeds))}",
            "deps": [
                *STUDY_CODE,
                *sorted({f"src/{m.replace('.', '/')}.py" for m in s.plugins}),
                f"{studies_dir(s)}/study.json",
                *s.merge,
                *sorted(set(table_deps)),
            ],
            "metrics": [{f"{results_dir(s)}/table.json": {"cache": False}}],
            "outs": [{f"{results_dir(s)}/table.md": {"cache": False}}],
        }
        return out

    def files(self) -> dict[Path, str]:
        """``studies/<name>/``'s files: ``dvc.yaml``, ``params/<arm>.yaml`` and ``study.json`` (the resolved study
        the table stage depends on)."""
        s = self.study
        texts = self.compose()
        d = studies_dir(s)
        header = HEADER.format(src=s.file.as_posix(), name=s.name)
        out = {d / "params" / f"{arm}.yaml": header + text for arm, text in texts.items()}
        out[d / "study.json"] = json.dumps(resolved(s), indent=1, sort_keys=True) + "\n"
        out[d / "dvc.yaml"] = header + yaml.safe_dump({"stages": self.stages()}, sort_keys=False, width=10_000)
        return out

    def write(self) -> Path:
        """Write :meth:`files` (those unchanged are left alone, so a second generation is a no-op for DVC) and
        remove configs of arms the study no longer has; returns the dvc.yaml path."""
        files = self.files()
        for path, text in files.items():
            if not path.exists() or path.read_text("utf-8") != text:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(path, text)
        for old in (studies_dir(self.study) / "params").glob("*.yaml"):
            if old not in files:
                old.unlink()
        return studies_dir(self.study) / "dvc.yaml"


def _composed(conf_dir: Path, overrides: tuple[str, ...]) -> str:
    """params.yaml's composition of ``conf_dir`` with ``overrides`` (resolved), memoised with the folder's
    fingerprint: the arms of a study, and the studies of one process, share most of their compositions."""
    from embodied_rft.pipeline import compose_text

    return _memo(("resolved", _fingerprint(conf_dir), overrides), lambda: compose_text(conf_dir, list(overrides)))


def _fingerprint(conf_dir: Path) -> tuple[str, tuple[tuple[str, int, int], ...]]:
    root = Path(conf_dir).resolve()
    files = sorted(root.rglob("*.yaml"))
    return str(root), tuple((f.relative_to(root).as_posix(), f.stat().st_size, f.stat().st_mtime_ns) for f in files)


_MEMO: dict[Any, str] = {}


def _memo(key: Any, make: Any) -> str:
    if key not in _MEMO:
        _MEMO[key] = make()
    return _MEMO[key]


def unresolved(conf_dir: Path, overrides: list[str]) -> str:
    """``conf/`` composed with ``overrides``, its interpolations kept (``sft.seed: ${seed}``): the stage's
    ``seed=<s>`` then reaches every section that follows the seed, as it does when a stage composes ``conf/``.
    (params.yaml's composition resolves them: right for one seed, wrong for a file every seed reads.)"""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    def make() -> str:
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
                return OmegaConf.to_yaml(compose(config_name="config", overrides=list(overrides)), resolve=False)
        finally:
            GlobalHydra.instance().clear()

    return _memo(("unresolved", _fingerprint(conf_dir), tuple(overrides)), make)


def plugin_code(cfg: dict[str, Any], sections: list[str]) -> list[str]:
    """The extension packages a stage loads with this config: the ``plugins:`` table's modules whose name appears in
    the sections the stage tracks (``dvc.yaml`` ``params``) as a value (``reward.variant: regrpo``,
    ``model.tokenizer_extra: [verification]``), or as the key of a section switched on (``decompose.rot.enabled``,
    ``teacher.rot.reflection``) or a non-empty list (``grpo.anchors``). The paper pipeline's dvc.yaml lists no
    extension file; an arm that turns one on depends on its code."""
    from embodied_rft.core.plugins import switched_on

    table = cfg.get("plugins") or {}
    used: set[str] = set()

    def walk(node: Any, key: str | None) -> None:
        if isinstance(node, str) and node in table:
            used.add(node)
        elif isinstance(node, list):
            if key in table and node:
                used.add(key)
            for x in node:
                walk(x, None)
        elif isinstance(node, dict):
            if key in table and switched_on(node, "enabled", "reflection", "clean_ratio"):
                used.add(key)
            for k, v in node.items():
                walk(v, str(k))

    for sec in sections:
        node: Any = cfg
        for part in str(sec).split("."):
            node = node.get(part) if isinstance(node, dict) else None
        walk(node, str(sec).split(".")[-1])
    return sorted({"src/" + table[n].rsplit(".", 1)[0].replace(".", "/") for n in used})


class TaskContext:
    """What an adapter's task builder sees: the arm, its resolved paths, and the study's layout."""

    def __init__(self, gen: Generator, arm: str, paths: dict[str, str | None]) -> None:
        self.gen, self.study, self.arm, self.paths = gen, gen.study, arm, paths
        self.dir = arm_dir(gen.study, arm)
        self.seed = SEED
        self.overrides: dict[str, list[str]] = {}

    def path(self, key: str) -> str:
        p = self.paths.get(key)
        if p is None:
            raise StudyError(f"{self.study.file}: arm {self.arm!r}: no arm of its chain makes paths.{key}")
        return p

    def arm_path(self, arm: str, key: str) -> str:
        p = arm_paths(self.study, self.gen.pipe, arm).get(key)
        if p is None:
            raise StudyError(f"{self.study.file}: arm {arm!r}: no arm of its chain makes paths.{key}")
        return p

    def cmd(self, module: str, *args: str) -> str:
        return _q(["python", "-m", module, *args])

    def stage(self, stage: str, paths: dict[str, str], overrides: list[str]) -> dict[str, Any]:
        """A run of pipeline stage ``stage`` with this arm's config, ``paths`` replacing some of its paths and
        ``overrides`` added on its command line (a file under runs/ they name becomes a dep)."""
        return self.gen._stage(self.arm, stage, {**self.paths, **paths}, list(overrides))

    def override(self, stage: str, *overrides: str) -> None:
        """Add command-line overrides to one of this arm's own stages (``stages:``), e.g. a file a task of the arm
        makes (a file under runs/ they name becomes a dep of that stage)."""
        self.overrides.setdefault(stage, []).extend(overrides)
