"""Contracts: pydantic models and readers/writers for every file and output edgetrain shares."""

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
