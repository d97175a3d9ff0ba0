"""Real ALFRED ingestion: ``traj_data.json`` -> EB-ALFRED episodes (see each module's docstring).

reader (files -> checked records), names (ALFRED -> EB types), scene (objects, instance names, initial
parents), convert (high_pddl -> EB actions), episodes (Episode dicts), replay (simulator check),
eb_split (EmbodiedBench split files, NL Steps comparison), prepare (the stage's library entry).
"""

from embodied_rft.alfred.convert import NOTES, Conversion, convert_plan
from embodied_rft.alfred.eb_split import EbRecord, NlComparison, compare_nl_steps, read_eb_split
from embodied_rft.alfred.episodes import ANNOTATION_MODES, build_episodes
from embodied_rft.alfred.names import eb_type, normalize_action
from embodied_rft.alfred.prepare import AlfredConfig, convert_checked, run_prepare_alfred
from embodied_rft.alfred.reader import Trajectory, iter_trajectories, parse_trajectory, read_trajectory
from embodied_rft.alfred.replay import ReplayResult, replay
from embodied_rft.alfred.scene import ConversionError, SceneIndex
from embodied_rft.schema import SPLITS, TASK_TYPES

__all__ = [
    "ANNOTATION_MODES",
    "AlfredConfig",
    "Conversion",
    "ConversionError",
    "EbRecord",
    "NOTES",
    "NlComparison",
    "ReplayResult",
    "SPLITS",
    "SceneIndex",
    "TASK_TYPES",
    "Trajectory",
    "build_episodes",
    "compare_nl_steps",
    "convert_checked",
    "convert_plan",
    "eb_type",
    "iter_trajectories",
    "normalize_action",
    "parse_trajectory",
    "read_eb_split",
    "read_trajectory",
    "replay",
    "run_prepare_alfred",
]
