"""Evaluation: interactive episodes in the symbolic simulator (EB's execution rules), offline metrics on
held-out decomposed samples, and the Table-1-shaped report. Entry point: :func:`run_evaluate`."""

from .aggregate import aggregate, summarize
from .config import EpisodeLimits, EvalConfig
from .episode import EpisodeRun, read_plan, run_lockstep
from .offline import offline_metrics, score_responses
from .policy import (
    ExpertPolicy,
    ModelPolicy,
    PlanContext,
    Policy,
    PolicySpec,
    RandomPolicy,
)
from .report import PROXY_LABEL, render_markdown, table_rows
from .runner import run_episodes
from .stage import run_evaluate, select_episodes, split_paths
from .store import ResultStore

__all__ = [
    "PROXY_LABEL",
    "EpisodeLimits",
    "EpisodeRun",
    "EvalConfig",
    "ExpertPolicy",
    "ModelPolicy",
    "PlanContext",
    "Policy",
    "PolicySpec",
    "RandomPolicy",
    "ResultStore",
    "aggregate",
    "offline_metrics",
    "read_plan",
    "render_markdown",
    "run_episodes",
    "run_evaluate",
    "run_lockstep",
    "score_responses",
    "select_episodes",
    "split_paths",
    "summarize",
    "table_rows",
]
