"""Operator settings: environment variables `EDGETRAIN_OPERATOR_<NAME>`, overridable by flags."""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edgetrain import __version__
from edgetrain.api.keys import LABEL_NODE_KIND, NODE_KIND_JETSON
from edgetrain.api.names import DNS_SUBDOMAIN_PATTERN, IMAGE_PATTERN
from edgetrain.api.pod_security import DEFAULT_CHECKPOINT_DIR, WORKER_TMP

ENV_PREFIX = "EDGETRAIN_OPERATOR_"
# os/architecture[/variant] of an image's members, as in an OCI index (linux/arm64).
PLATFORM_PATTERN = r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$"
Platform = Annotated[str, Field(pattern=PLATFORM_PATTERN)]


class OperatorSettings(BaseModel):
    """Everything the operator needs that is not in a job (see docs/operator.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespaces: list[str] = Field(
        default_factory=list, description="namespaces to watch; empty: all namespaces"
    )
    # One image per role (chart: images.estimator, images.trainer), each with the platforms
    # it has a member for: the operator refuses a node whose architecture is not among them
    # instead of starting a pod that cannot exec (roles.image_refusal).
    estimator_image: str = Field(
        default=f"ghcr.io/edgetrain/estimator:{__version__}", pattern=IMAGE_PATTERN,
        description="image of the estimate pods (proxy estimation on the GPU servers)")
    estimator_platforms: list[Platform] = Field(
        default_factory=lambda: ["linux/amd64"], min_length=1,
        description="platforms estimator_image has a member for (os/arch)")
    trainer_image: str = Field(
        default=f"ghcr.io/edgetrain/trainer:{__version__}", pattern=IMAGE_PATTERN,
        description="image of the profile and train pods (on the Jetsons; match its JetPack)")
    trainer_platforms: list[Platform] = Field(
        default_factory=lambda: ["linux/arm64"], min_length=1,
        description="platforms trainer_image has a member for (os/arch)")
    server_selector: dict[str, str] = Field(
        default_factory=dict,
        description="labels every GPU server must carry, besides being one: a node with"
        " nvidia.com/gpu (the NVIDIA device plugin) or labelled edgetrain.io/node-kind=server,"
        " and not a Jetson (roles.node_role)",
    )
    jetson_selector: dict[str, str] = Field(
        default_factory=lambda: {LABEL_NODE_KIND: NODE_KIND_JETSON},
        description="node labels every Jetson candidate must carry (plus spec.placement)",
    )
    retry_limit: Annotated[int, Field(ge=0)] = Field(
        default=3, description="failed attempts retried per phase before the job fails"
    )
    retry_backoff_s: Annotated[float, Field(ge=0)] = Field(
        default=10.0, description="first retry delay; doubles with each failed attempt"
    )
    poll_interval_s: Annotated[float, Field(gt=0)] = Field(
        default=10.0,
        description="fallback reconcile period per running job; inputs landing wake a job at"
        " once, the poll catches what no watch reports (pods, nodes, deadlines, progress)",
    )
    reconcile_workers: Annotated[int, Field(ge=1, le=256)] = Field(
        default=32,
        description="threads that run the jobs' reconciles, apart from kopf's handler threads:"
        " a reconcile mostly waits on the API server, so a burst of wake-ups (one profile"
        " ConfigMap wakes every job that waits for it) should not queue behind a few",
    )
    decision_log: str | None = Field(
        default=None,
        description="a file the operator appends one JSON line to per reconcile (queue wait,"
        " time to its first decisive write, requests in a row, CPU); `edgetrain bench"
        " operator` sets it; none: no log",
    )
    no_node_grace_s: Annotated[float, Field(ge=0)] = Field(
        default=300.0,
        description="how long a job waits for a Ready node matching its placement before it"
        " fails (NoMatchingNode); bridges a node that is briefly NotReady",
    )
    unschedulable_grace_s: Annotated[float, Field(ge=0)] = Field(
        default=600.0,
        description="how long a worker pod may stay unschedulable before the job fails"
        " (Unschedulable, with the scheduler's message)",
    )
    checkpoint_dir: str = Field(
        default=DEFAULT_CHECKPOINT_DIR,
        description="root of training checkpoints, on storage every candidate node shares",
    )
    checkpoint_pvc: str | None = Field(
        default=None,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="a ReadWriteMany PVC mounted at checkpoint_dir in training pods; none: the"
        " path is already shared (virtual nodes share the host filesystem)",
    )
    profile_clocks_by_agent: bool = Field(
        default=False,
        description="profile pods ask the node agent for each GPU clock (an annotation on"
        " their own pod) instead of writing devfreq, which a restricted pod's read-only /sys"
        " forbids on a real Jetson, and training pods wait until the agent holds their pin and"
        " power mode before they train; needs the node agent on every Jetson (the chart's"
        " default)",
    )
    pin_frequency_in_pod: bool = Field(
        default=False,
        description="also pass --gpu-freq to `edgetrain train` (only where no node agent runs)",
    )
    fault_injection: bool = Field(
        default=False,
        description="honour the edgetrain.io/inject-failures and inject-hold annotations"
        " (tests only)",
    )
    worker_service_account: str = Field(default="edgetrain-worker", pattern=DNS_SUBDOMAIN_PATTERN)
    peering: str | None = Field(
        default=None, description="kopf peering name (one active replica); none: standalone"
    )
    leader_election: bool = Field(
        default=False,
        description="hold a coordination.k8s.io Lease before acting, so that one of several"
        " replicas reconciles and a standby takes over when the holder dies (the chart turns"
        " it on)",
    )
    leader_election_namespace: str | None = Field(
        default=None,
        description="namespace of the Lease; none: $POD_NAMESPACE, else the ServiceAccount's"
        " namespace, else default",
    )
    lease_name: str = Field(default="edgetrain-operator", description="name of the Lease")
    lease_duration_s: Annotated[float, Field(gt=0)] = Field(
        default=15.0, description="a standby takes over after the holder stopped renewing"
        " this long"
    )
    renew_deadline_s: Annotated[float, Field(gt=0)] = Field(
        default=10.0, description="the holder stops acting when it could not renew this long"
    )
    retry_period_s: Annotated[float, Field(gt=0)] = Field(
        default=2.0, description="how often the holder renews and a standby retries"
    )
    profile_min_window_s: Annotated[float, Field(gt=0)] = Field(
        default=1.0, description="`edgetrain profile --min-window` in profiling pods"
    )
    profile_stabilize_window_s: Annotated[float, Field(gt=0)] = Field(
        default=1.0, description="`edgetrain profile --stabilize-window` in profiling pods"
    )
    progress_interval_s: Annotated[float, Field(gt=0)] = Field(
        default=1.0, description="how often a training pod publishes its progress"
    )
    health_address: str = Field(
        default="127.0.0.1", description="listen address of kopf's /healthz (chart: the pod IP)"
    )
    health_port: Annotated[int, Field(ge=0, le=65535)] = Field(
        default=0, description="port of kopf's /healthz for the pod's probes; 0: no endpoint"
    )
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = Field(
        default=0, description="port of the operator's Prometheus /metrics (PowerBudget cap,"
        " planned and idle draw, each job's share); 0: none"
    )
    estimate_gpus: Annotated[int, Field(ge=0)] = Field(
        default=1,
        description="nvidia.com/gpu the estimate Job requests on the GPU server (device plugin);"
        " 0: request none. Jetson pods request none: the NVIDIA container runtime gives them"
        " the GPU",
    )
    estimate_parallelism: Annotated[int, Field(ge=1)] = Field(
        default=8,
        description="most pods of one estimate at once (an Indexed Job, one completion per"
        " batch size and seed); also bounded by the runs and the GPUs of the Ready servers",
    )
    jetson_runtime_class: str | None = Field(
        default=None,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="runtimeClassName of profile and train pods (e.g. nvidia, the NVIDIA"
        " container runtime); none: the node's default runtime",
    )

    worker_threads: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="OMP_NUM_THREADS of the estimate, profile and train pods (the workload's"
        " intra-op threads); none: the cores the pod may use, at most 4. 1 where a node runs"
        " several workloads on few cores: OpenMP's spinning threads then starve each other",
    )

    @model_validator(mode="after")
    def _lease_timing_order(self) -> OperatorSettings:
        # The holder must stop before a standby may take over, with room for one retry.
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                f"leader election needs {ENV_PREFIX}RETRY_PERIOD_S <"
                f" {ENV_PREFIX}RENEW_DEADLINE_S < {ENV_PREFIX}LEASE_DURATION_S, got"
                f" {self.retry_period_s:g} < {self.renew_deadline_s:g} <"
                f" {self.lease_duration_s:g}; raise the lease duration or lower the others")
        return self

    @model_validator(mode="after")
    def _checkpoints_outlive_the_pod(self) -> OperatorSettings:
        # Every worker pod mounts an emptyDir at /tmp: checkpoints there die with their pod, and
        # a re-planned or moved job would start again from sample 0.
        if PurePosixPath(WORKER_TMP) in (p := PurePosixPath(self.checkpoint_dir), *p.parents):
            raise ValueError(
                f"{ENV_PREFIX}CHECKPOINT_DIR {self.checkpoint_dir} is under {WORKER_TMP}, the"
                " worker pods' own emptyDir, where checkpoints die with their pod; choose a path"
                f" outside it (default {DEFAULT_CHECKPOINT_DIR})")
        return self


_LISTS = {"namespaces", "estimator_platforms", "trainer_platforms"}
_MAPS = {"server_selector", "jetson_selector"}


def _parse(name: str, text: str) -> Any:
    if name in _LISTS:
        return [v.strip() for v in text.split(",") if v.strip()]
    if name in _MAPS:
        pairs = [p.strip() for p in text.split(",") if p.strip()]
        out = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep:
                raise ValueError(f"{ENV_PREFIX}{name.upper()}: expected k=v[,k=v], got {text!r}")
            out[key.strip()] = value.strip()
        return out
    if text.lower() in ("", "none", "null") and name in (
        "checkpoint_pvc",
        "peering",
        "jetson_runtime_class",
        "leader_election_namespace",
        "decision_log",
        "worker_threads",
    ):
        return None
    return text


def load_settings(
    env: dict[str, str] | None = None, **overrides: Any
) -> OperatorSettings:
    """Settings from the environment, then explicit overrides (flags); errors name the variable."""
    source = os.environ if env is None else env
    values: dict[str, Any] = {}
    for name in OperatorSettings.model_fields:
        key = ENV_PREFIX + name.upper()
        if key in source:
            values[name] = _parse(name, source[key])
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return OperatorSettings.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        if not err["loc"]:  # a rule across fields names its variables itself
            raise ValueError(f"operator settings: {err['msg']}") from None
        field = str(err["loc"][0])
        raise ValueError(
            f"operator setting {field} ({ENV_PREFIX}{field.upper()}): {err['msg']}"
        ) from None
