"""Contracts: pydantic models and readers/writers for every file and output edgetrain shares."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgetrain.api.efficiency import (
        EfficiencyVector,
        parse_efficiency_json,
        read_efficiency,
        write_efficiency,
    )
    from edgetrain.api.errors import BadInputError, InputError
    from edgetrain.api.plan import BaselinePoint, Objective, PlanPoint, PlanResult, PowerMetric
    from edgetrain.api.profile import (
        MODE_COLUMNS,
        PROFILE_HEADER,
        REQUIRED_COLUMNS,
        ProfilePoint,
        format_profile_csv,
        parse_profile_csv,
        read_profile,
        write_profile,
    )

# Re-exported lazily (PEP 562): importing one contract module (`edgetrain.api.keys` in every
# pod's worker and agent) must not load the models and numpy of all the others; that cost each
# emulated arm64 pod start about a second.
_EXPORTS = {
    "edgetrain.api.efficiency": ("EfficiencyVector", "parse_efficiency_json", "read_efficiency",
                                 "write_efficiency"),
    "edgetrain.api.errors": ("BadInputError", "InputError"),
    "edgetrain.api.plan": ("BaselinePoint", "Objective", "PlanPoint", "PlanResult",
                           "PowerMetric"),
    "edgetrain.api.profile": ("MODE_COLUMNS", "PROFILE_HEADER", "REQUIRED_COLUMNS",
                              "ProfilePoint", "format_profile_csv", "parse_profile_csv",
                              "read_profile", "write_profile"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "MODE_COLUMNS",
    "PROFILE_HEADER",
    "REQUIRED_COLUMNS",
    "BadInputError",
    "BaselinePoint",
    "EfficiencyVector",
    "InputError",
    "Objective",
    "PlanPoint",
    "PlanResult",
    "PowerMetric",
    "ProfilePoint",
    "format_profile_csv",
    "parse_efficiency_json",
    "parse_profile_csv",
    "read_efficiency",
    "read_profile",
    "write_efficiency",
    "write_profile",
]


def __getattr__(name: str) -> object:
    """A re-exported name, its module imported on first use (then cached here)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
