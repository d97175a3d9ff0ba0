"""The symbolic EB-ALFRED world: action space, object table, simulator, goals, expert planner, observations
and the episode generator. See each module's docstring; the public API is re-exported here."""

from embodied_rft.schema import SUBSETS, TASK_TYPES
from embodied_rft.world.actions import (
    DROP,
    GLOBAL,
    N_GLOBAL,
    PUT_DOWN,
    ActionSpace,
    global_actions,
    plan_to_pairs,
    split_action,
    verb_targets,
)
from embodied_rft.world.episode import GOAL_KEYS, STATE_KEYS, Goal, ObjectSpec, SceneSpec, check_episode, parse_episode
from embodied_rft.world.generator import (
    GOALS_VALID,
    SPLITS,
    GeneratorConfig,
    episode_counts,
    generate_episodes,
    goal_key,
    run_prepare_generated,
    split_layouts,
)
from embodied_rft.world.layouts import ROOMS, Layout, make_layouts
from embodied_rft.world.objects import (
    ALFRED_TO_EB,
    MOVABLE_RECEPTACLES,
    RECEPTACLE_OBJECTS,
    SLICED_TYPE,
    TYPES,
    ObjectType,
    can_contain,
)
from embodied_rft.world.planner import PlanError, expert_plan, plan_for
from embodied_rft.world.simulator import N_PIECES, Simulator, StepResult

__all__ = [
    "ALFRED_TO_EB",
    "ActionSpace",
    "DROP",
    "GLOBAL",
    "GOALS_VALID",
    "GOAL_KEYS",
    "GeneratorConfig",
    "Goal",
    "Layout",
    "MOVABLE_RECEPTACLES",
    "N_GLOBAL",
    "N_PIECES",
    "ObjectSpec",
    "ObjectType",
    "PUT_DOWN",
    "PlanError",
    "RECEPTACLE_OBJECTS",
    "ROOMS",
    "SLICED_TYPE",
    "SPLITS",
    "STATE_KEYS",
    "SUBSETS",
    "SceneSpec",
    "Simulator",
    "StepResult",
    "TASK_TYPES",
    "TYPES",
    "can_contain",
    "check_episode",
    "episode_counts",
    "expert_plan",
    "generate_episodes",
    "global_actions",
    "goal_key",
    "make_layouts",
    "parse_episode",
    "plan_for",
    "plan_to_pairs",
    "run_prepare_generated",
    "split_action",
    "split_layouts",
    "verb_targets",
]
