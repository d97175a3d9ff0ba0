"""The ReGRPO tests run with its plug-ins registered, as a stage whose config uses them has them (core/plugins.py)."""

import embodied_rft.regrpo.plugin  # noqa: F401 - registers ReGRPO's sections, reward, hooks
