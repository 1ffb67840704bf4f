"""status of a PowerAwareTrainingJob: what the operator writes (camelCase on the wire)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from edgetrain.api.enums import StrEnum

#: maxLength of every free-text string in the CRD (spec and status; api/crd.py). It bounds CEL's
#: cost estimate for the immutability rule, and the API server refuses a longer status (422).
MAX_STRING = 1024
#: Characters kept from the end of a cut string: a crash's last line says what failed.
_KEEP_TAIL = 300
_CUT = " … "


def fit_string(text: str, limit: int = MAX_STRING) -> str:
    """`text` within `limit` characters: its head and tail around a marker when longer."""
    if len(text) <= limit:
        return text
    head = limit - len(_CUT) - _KEEP_TAIL
    return text[:head] + _CUT + text[-_KEEP_TAIL:]


def _fit(value: object) -> object:
    if isinstance(value, str):
        return fit_string(value)
    if isinstance(value, dict):
        return {k: _fit(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fit(v) for v in value]
    return value


class Phase(StrEnum):
    """Where a job is; `Succeeded` and `Failed` are final."""

    pending = "Pending"
    estimating = "EstimatingEfficiency"
    profiling = "Profiling"
    selecting = "Selecting"
    # On a site under a PowerBudget whose free power does not cover the job's cheapest point.
    waiting_for_power = "WaitingForPower"
    training = "Training"
    succeeded = "Succeeded"
    failed = "Failed"

    @property
    def final(self) -> bool:
        """No more work happens in this phase."""
        return self in (Phase.succeeded, Phase.failed)


class _Status(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", validate_assignment=True
    )


class Condition(_Status):
    """Kubernetes-style condition (type: a phase name, Ready, or Failed)."""

    type: str
    status: str = Field(pattern="^(True|False|Unknown)$")
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""


class ObservationStatus(_Status):
    """One earlier job's observation that this plan learned from."""

    job: str
    batch_size: int
    samples: float
    reached_target: bool = True


#: Status lists are bounded (a recurring job's history grows without end).
MAX_LISTED = 32


class RSourcesStatus(_Status):
    """Where the planned r came from (issue 41)."""

    proxy_seeds: int | None = Field(default=None, description="seeds the proxy's r merges")
    observations: int = Field(default=0, description="earlier jobs' observations used")
    tilt_prior_mean: float = Field(default=0.0, description="population tilt per doubling of b")
    tilt_prior_sd: float = 0.2
    tilt_pairs: int = Field(default=0, description="(proxy, target) pairs pooled for it")
    tilt_trusted: bool = Field(default=False, description="enough pairs to use the mean")
    noise_scale_proxy: float | None = Field(
        default=None, description="B_simple on the proxy (geometric mean over its runs)"
    )
    noise_scale_target: float | None = Field(
        default=None, description="B_simple on the target set, from the observations"
    )
    noise_shape_used: bool = Field(default=False, description="both measured: shapes the prior")


class GateStatus(_Status):
    """The exploration gate's decision (costs in incumbent trainings: 0.1 = 10 % of one)."""

    explored: bool
    incumbent_batch_size: int = Field(description="the posterior mean's choice")
    candidate_batch_size: int | None = Field(
        default=None, description="the size one doubling away weighed (none: no size to weigh)"
    )
    value: float = Field(description="expected saving over the remaining recurrences")
    cost: float = Field(description="expected extra time of this job at the candidate")
    pessimistic: float = Field(description="this job's overrun at the pessimistic bound")
    budget_left: float = Field(description="alpha × jobs − earlier explorations' overruns")
    expected_recurrences: int
    remaining: int = Field(description="recurrences still expected after this job")
    alpha: float
    reason: str = ""


class HistoryStatus(_Status):
    """Recurring jobs (issues 30, 41): the proxy's r (prior), the observations, the posterior r,
    where the planned r came from and whether the gate explored."""

    config_map: str | None = Field(default=None, description="the history ConfigMap (cluster)")
    key: str
    chooser: str
    batch_sizes: list[int]
    prior_r: list[float]
    posterior_r: list[float] = Field(description="posterior mean r")
    posterior_log_sd: list[float] = Field(
        description="sd of log N(b) − log N(b_ref), b_ref the most observed size (else the"
        " proxy's best): the doubt per size about how it compares, the common scale taken out"
    )
    planned_r: list[float] = Field(description="the r the plan used (posterior mean, gated)")
    observations: list[ObservationStatus] = Field(default_factory=list, max_length=MAX_LISTED)
    observations_total: int = 0
    skipped: list[str] = Field(
        default_factory=list, max_length=MAX_LISTED, description="'entry: why' for each entry"
        " left out (corrupt, foreign, diverged, other weights)"
    )
    sources: RSourcesStatus = Field(default_factory=RSourcesStatus)
    gate: GateStatus | None = Field(
        default=None, description="null: no profile was planned with it yet"
    )


class EfficiencyStatus(_Status):
    """Where the batch-size efficiency vector lives, and whether it came from the cache."""

    config_map: str
    key: str
    cached: bool
    history: HistoryStatus | None = Field(
        default=None, description="prior, observations and posterior (learnFromHistory)"
    )


class ProfileStatus(_Status):
    """One device model's profile (LUT)."""

    device_model: str
    node: str = Field(description="the node it was (or would be) profiled on")
    l4t: str | None = Field(default=None, alias="l4t")
    config_map: str
    key: str
    cached: bool | None = Field(default=None, description="null while still profiling")
    power_limit_watts: float | None = Field(
        default=None, description="limit the frontier was cut at (null: full profile / no limit)"
    )


class PlanPointStatus(_Status):
    """An operating point: a plan or a baseline."""

    batch_size: int
    gpu_frequency_hz: int
    power_watts: float
    predicted_seconds: float | None = None
    relative_time: float
    ratio_to_plan: float | None = None


class CandidateStatus(_Status):
    """The plan on one candidate device model (the best one is the selection)."""

    device_model: str
    batch_size: int | None = None
    gpu_frequency_hz: int | None = None
    predicted_seconds: float | None = None
    objective_value: float | None = None
    error: str | None = None


class SelectionStatus(_Status):
    """The chosen node and (b, f), the plan's baselines, and the other candidates."""

    node: str
    device_model: str
    batch_size: int
    gpu_frequency_hz: int
    gpu_frequency_m_hz: int = Field(alias="gpuFrequencyMHz")
    # The rest of a full power mode, when the profile had one (predicted profiling).
    cpu_cores: int | None = None
    cpu_frequency_hz: int | None = None
    emc_frequency_hz: int | None = None
    power_watts: float
    # Defaults: the status is written without nulls, and the CRD requires what has none.
    power_limit_watts: float | None = None
    predicted_seconds: float | None = None
    relative_time: float
    objective: str
    baselines: dict[str, PlanPointStatus] = Field(default_factory=dict)
    candidates: list[CandidateStatus] = Field(default_factory=list)


class TrainingStatus(_Status):
    """The fine-tuning run: which Job/pod, and its progress (totals over all segments)."""

    job: str | None = None
    pod: str | None = None
    node: str | None = None
    attempt: int = 0
    segment: int = Field(default=0, description="re-plans so far (each changes b or f)")
    checkpoint_dir: str | None = None
    samples: int = 0
    accuracy: float | None = None
    device_seconds: float = 0.0
    energy_joules: float | None = None
    peak_power_watts: float | None = None
    reached_target: bool | None = None
    simulated: bool | None = None
    device: str | None = Field(default=None, description="where the pod trains: cpu, cuda:N")
    precision: str | None = Field(default=None, description="fp32, fp16 or bf16")
    carry_from: str | None = Field(
        default=None, description="the previous segment's checkpoint folder this segment's"
        " Job starts from (a re-plan that changed b)")
    samples_to_target: float | None = Field(
        default=None, description="where the accuracy curve crossed the target (interpolated)"
    )
    gradient_noise_scale: float | None = Field(
        default=None, description="B_simple measured in training (McCandlish et al. 2018)"
    )
    carried_samples: int = Field(default=0, description="samples of earlier segments")
    carried_device_seconds: float = 0.0
    carried_energy_joules: float = 0.0
    nodes_lost: list[str] = Field(default_factory=list)


class PhaseAttempts(_Status):
    """Failed attempts per phase, and when the next retry may start."""

    estimate: int = 0
    profile: int = 0
    train: int = 0
    next_retry_at: float | None = Field(default=None, description="unix seconds")
    waiting_for_node_since: float | None = Field(
        default=None, description="unix seconds since no Ready node matched the placement"
    )


class PowerShareStatus(_Status):
    """The job's share of its site's PowerBudget (the budget loop grants it; see api/budget)."""

    budget: str
    node: str = Field(default="", description="the node the share was asked for")
    device_model: str = ""
    watts: float | None = Field(default=None, description="granted W; null: waiting")
    purpose: Literal["train", "profile"] = Field(
        default="train", description="what the share is asked for: a training plan, or the"
        " ceiling of a profiling sweep")
    sequence: int = Field(default=0, ge=0, description="the grant sequence acknowledged: the"
                          " job plans, and its pods run, only under that grant")


class PendingEvent(_Status):
    """A keyed Event the status implies and the operator had not yet seen posted when it wrote
    it (the Event's name follows from the job's uid and `key`)."""

    key: str
    type: str = Field(pattern="^(Normal|Warning)$")
    reason: str
    message: str = ""


#: Keyed Events a status carries at most (a reconcile makes up to about ten).
MAX_PENDING_EVENTS = 32


class PowerAwareTrainingJobStatus(_Status):
    """status of a PowerAwareTrainingJob."""

    phase: Phase = Phase.pending
    message: str = ""
    reason: str = ""
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    efficiency: EfficiencyStatus | None = None
    profiles: list[ProfileStatus] = Field(default_factory=list)
    selection: SelectionStatus | None = None
    training: TrainingStatus | None = None
    power_share: PowerShareStatus | None = None
    attempts: PhaseAttempts = Field(default_factory=PhaseAttempts)
    transitions: int = Field(
        default=0, description="phase changes so far; they name the job's Events, so an Event is"
        " posted once however many operator replicas decide the same step")
    started_at: str | None = None
    finished_at: str | None = None
    pending_events: list[PendingEvent] = Field(
        default_factory=list, max_length=MAX_PENDING_EVENTS,
        description="keyed Events this status implies that were not yet seen posted when it was"
        " written: the operator posts them after the write that decides (off the critical"
        " path); a replica that takes over posts those it does not find")

    def wire(self) -> dict[str, object]:
        """The JSON the API server stores (camelCase, no nulls), every string within the schema's
        limit: a status the server refuses would never be written, and the job would stall."""
        wire = _fit(self.model_dump(mode="json", by_alias=True, exclude_none=True))
        assert isinstance(wire, dict)
        return wire
