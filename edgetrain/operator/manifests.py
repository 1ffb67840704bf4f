"""Builders of the objects the operator creates: plain dicts, no API calls (unit-tested)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edgetrain.api.job import API_VERSION, KIND, PowerAwareTrainingJobSpec, profile_cache_key
from edgetrain.api.keys import (
    ANNOTATION_GPU_FREQUENCY_HZ,
    ANNOTATION_INJECT_FAILURES,
    ANNOTATION_INJECT_HOLD,
    ANNOTATION_POWER_GRANT_SEQUENCE,
    ANNOTATION_POWER_LIMIT_WATTS,
    LABEL_CACHE,
    LABEL_CACHE_KEY,
    LABEL_DEVICE_MODEL,
    LABEL_JOB,
    LABEL_L4T,
    LABEL_MODEL,
    LABEL_PHASE,
    POWER_MODE_ANNOTATIONS,
)
from edgetrain.api.workload_spec import (
    profile_argv,
    profile_spec,
    train_argv,
    train_spec,
)
from edgetrain.kube import SERVICE_ACCOUNT_DIR, Obj
from edgetrain.operator.settings import OperatorSettings
from edgetrain.operator.worker_security import jetson_runtime, restrict

LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGER = "edgetrain-operator"
WORK = "/work"


def short_name(base: str, suffix: str, limit: int = 52) -> str:
    """`<base>-<suffix>` within `limit` characters (a hash keeps truncated names unique)."""
    name = f"{base}-{suffix}"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(base.encode()).hexdigest()[:6]
    keep = limit - len(suffix) - len(digest) - 2
    return f"{base[:keep].rstrip('-')}-{digest}-{suffix}"


def label_value(text: str) -> str:
    """A valid label value (≤ 63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63]
    return clean.strip("-._")


def owner_reference(patj: Obj) -> Obj:
    """Owner reference to the job (garbage collection deletes what it owns)."""
    meta = patj["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_argument(patj: Obj) -> str:
    """The job as `edgetrain worker --owner` takes it (API_VERSION:KIND:NAME:UID)."""
    meta = patj["metadata"]
    return f"{API_VERSION}:{KIND}:{meta['name']}:{meta['uid']}"


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller (for what the operator creates: its job's uid)."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid") or "") or None
    return None


def job_event(patj: Obj, kind: str, reason: str, message: str, key: str, now: str) -> Obj:
    """A core/v1 Event on the job, named by the job's uid and `key`: the same key always makes
    the same name, so posting it twice is refused (409) rather than repeated."""
    meta = patj["metadata"]
    digest = hashlib.sha256(f"{meta['uid']}/{key}".encode()).hexdigest()[:16]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name'][:200]}.{digest}", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta["uid"]},
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": MANAGER},
        "reportingComponent": MANAGER,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def owned_metadata(
    patj: Obj, name: str, labels: dict[str, str], annotations: dict[str, str] | None = None
) -> Obj:
    """Metadata of an object the job owns: in its namespace, garbage-collected with it."""
    meta: Obj = {
        "name": name,
        "namespace": patj["metadata"]["namespace"],
        "labels": labels,
        "ownerReferences": [owner_reference(patj)],
    }
    if annotations is not None:
        meta["annotations"] = annotations
    return meta


def weights_identity(spec: PowerAwareTrainingJobSpec) -> str | None:
    """What identifies the starting weights without reading them (the operator never does)."""
    if spec.model.weights:
        return "path:" + spec.model.weights
    if spec.model.pretrain:
        return "pretrain:" + spec.model.pretrain.model_dump_json()
    return None


def profile_key(spec: PowerAwareTrainingJobSpec, device_model: str, l4t: str | None) -> str:
    """`profile_cache_key`, with the input named by its data set: the operator never loads data
    to learn the input shape."""
    base = profile_cache_key(spec, device_model, l4t, ())
    payload = json.dumps({"profile": base, "dataset": spec.dataset.model_dump()}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def efficiency_configmap_name(key: str) -> str:
    """Cache ConfigMap of an efficiency vector."""
    return f"edgetrain-efficiency-{key}"


def profile_configmap_name(key: str) -> str:
    """Cache ConfigMap of a profile."""
    return f"edgetrain-profile-{key}"


def release_configmap_name(patj_name: str, phase_key: str) -> str:
    """The ConfigMap whose creation releases a held worker of one phase (fault injection)."""
    return short_name(patj_name, f"release-{phase_key}")


def progress_configmap_name(patj_name: str) -> str:
    """The training pod's progress ConfigMap (owned by the job)."""
    return short_name(patj_name, "progress")


def _common_labels(patj: Obj, phase: str) -> dict[str, str]:
    return {
        LABEL_JOB: label_value(patj["metadata"]["name"]),
        LABEL_PHASE: phase,
        LABEL_MANAGED: MANAGER,
    }


def _weights(spec: PowerAwareTrainingJobSpec) -> Path | None:
    return Path(spec.model.weights) if spec.model.weights else None


def _pretrain_args(spec: PowerAwareTrainingJobSpec) -> list[str]:
    if spec.model.weights or not spec.model.pretrain:
        return []
    return [
        "--pretrain",
        json.dumps(
            {
                "model": spec.model.architecture,
                **spec.model.pretrain.model_dump(),
                "device": spec.compute.device,
                "precision": spec.compute.precision.value,
            }
        ),
    ]


def _container(name: str, image: str, args: list[str], env: list[Obj]) -> Obj:
    return {
        "name": name,
        "image": image,
        "command": ["edgetrain"],
        "args": args,
        "env": [
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            # The worker writes the workload's one-line error here (the termination message).
            {"name": "EDGETRAIN_TERMINATION_LOG", "value": "/dev/termination-log"},
            *env,
        ],
        "volumeMounts": [{"name": "work", "mountPath": WORK}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _pod_spec(settings: OperatorSettings, container: Obj, restart: str, *,
              read_only_root: bool = True, device_group: bool = False, **extra: Any) -> Obj:
    if settings.worker_threads is not None:  # torch reads it, and so does `torch_threads`
        container["env"].append({"name": "OMP_NUM_THREADS",
                                 "value": str(settings.worker_threads)})
    return restrict({
        "serviceAccountName": settings.worker_service_account,
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 15,
        "containers": [container],
        "volumes": [{"name": "work", "emptyDir": {}}],
        **extra,
    }, read_only_root=read_only_root, device_group=device_group)


def _worker_args(
    *,
    publish: str | None = None,
    files: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    apply_as: str | None = None,
    owner: str | None = None,
    progress: str | None = None,
    hold: bool = False,
    inject: str | None = None,
    hold_release: str | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    # The service-account mount as an argument: virtual nodes rewrite mount paths in args.
    args = ["worker", "--sa-dir", str(SERVICE_ACCOUNT_DIR)]
    if publish:
        args += ["--publish", publish]
    for key, path in (files or {}).items():
        args += ["--file", f"{key}={path}"]
    for key, value in (labels or {}).items():
        args += ["--label", f"{key}={value}"]
    if apply_as:
        args += ["--apply-as", apply_as]
    if owner:
        args += ["--owner", owner]
    if progress:
        args += ["--progress", progress]
    if hold:
        args.append("--hold")
    if inject:
        args += ["--inject-failure", inject]
    if hold_release:
        args += ["--hold-at-progress", hold_release]
    return args + (extra or [])


def profile_daemonset(
    patj: Obj,
    spec: PowerAwareTrainingJobSpec,
    settings: OperatorSettings,
    *,
    device_model: str,
    node: str,
    l4t: str | None,
    key: str,
    inject: str | None = None,
    ceiling_w: float | None = None,
    grant_sequence: int | None = None,
) -> Obj:
    """A DaemonSet profiling one device model on one node of it (see docs/operator.md). Under
    a site budget its pod carries the sweep's ceiling as its power limit (the node agent guards
    it, the budget counts it) and the grant it runs under."""
    name = short_name(patj["metadata"]["name"], f"profile-{label_value(device_model)}")
    labels = {
        **_common_labels(patj, "profile"),
        LABEL_DEVICE_MODEL: label_value(device_model),
        LABEL_CACHE_KEY: key,
    }
    cm_labels = {
        LABEL_CACHE: "profile",
        LABEL_CACHE_KEY: key,
        LABEL_DEVICE_MODEL: label_value(device_model),
        LABEL_MODEL: label_value(spec.model.architecture),
        LABEL_MANAGED: MANAGER,
    }
    if l4t:
        cm_labels[LABEL_L4T] = label_value(l4t)
    out = f"{WORK}/profile.csv"
    pspec = profile_spec(spec, min_window_s=settings.profile_min_window_s,
                         stabilize_window_s=settings.profile_stabilize_window_s)
    # Predicted profiling asks the agent for each power mode too (CPU cores, CPU and EMC).
    by_agent = settings.profile_clocks_by_agent
    cmd = [
        "edgetrain", "profile", *profile_argv(pspec), "--output", out, "--json-progress",
        *(["--clock-by-agent", "--sa-dir", str(SERVICE_ACCOUNT_DIR)] if by_agent else []),
    ]
    args = _worker_args(
        publish=profile_configmap_name(key),
        files={"profile.csv": out, "profile.meta.json": f"{WORK}/profile.meta.json"},
        labels=cm_labels,
        hold=True,  # DaemonSet pods restart when they exit: hold until the operator removes it
        inject=inject,
        extra=["--", *cmd],
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": LABEL_DEVICE_MODEL, "operator": "In", "values": [device_model]},
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]},
                        ]
                    }
                ]
            }
        }
    }
    pod_name = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    pod = _pod_spec(
        settings,
        _container("profile", settings.trainer_image, args, [pod_name] if by_agent else []),
        "Always",
        nodeSelector={**settings.jetson_selector, **spec.placement.node_selector},
        affinity=affinity,
        device_group=True,
        **jetson_runtime(settings.jetson_runtime_class),
    )
    template: Obj = {"labels": labels}
    if ceiling_w is not None:
        template["annotations"] = _grant_annotations(ceiling_w, grant_sequence)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": owned_metadata(patj, name, labels),
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": template, "spec": pod},
        },
    }


def _grant_annotations(limit_w: float, grant_sequence: int | None) -> dict[str, str]:
    out = {ANNOTATION_POWER_LIMIT_WATTS: f"{limit_w:g}"}
    if grant_sequence:
        out[ANNOTATION_POWER_GRANT_SEQUENCE] = str(grant_sequence)
    return out


def _await_agent(gpu_frequency_hz: int, power_mode: tuple[int, int, int] | None) -> list[str]:
    """`edgetrain train` waits until the node agent holds the pod's pin and power mode, so it
    never trains on the clock the pod found (the agent writes both, then reports them)."""
    mode = ["--await-power-mode", ",".join(map(str, power_mode))] if power_mode else []
    return ["--await-pin", str(gpu_frequency_hz), *mode]


def checkpoint_dir(settings: OperatorSettings, patj: Obj, run: str) -> str:
    """A checkpoint folder of one run of the job (a run keeps its batch size)."""
    meta = patj["metadata"]
    job = f"{meta['name']}-{meta['uid'][:8]}"
    return f"{settings.checkpoint_dir}/{meta['namespace']}/{job}/{run}"


def train_job(
    patj: Obj,
    spec: PowerAwareTrainingJobSpec,
    settings: OperatorSettings,
    *,
    node: str,
    batch_size: int,
    gpu_frequency_hz: int,
    attempt: int,
    ckpt_dir: str,
    carry_from: str | None = None,
    inject: str | None = None,
    hold_release: str | None = None,
    power_mode: tuple[int, int, int] | None = None,
    grant_sequence: int | None = None,
) -> Obj:
    """A Job pinned to `node` running `edgetrain train` at b, annotated with f and the limit
    (and the CPU cores, CPU and EMC clocks of `power_mode`, which the node agent sets)."""
    name = short_name(patj["metadata"]["name"], f"train-{attempt}")
    labels = _common_labels(patj, "train")
    limit = spec.power_limit_watts
    annotations = {
        ANNOTATION_GPU_FREQUENCY_HZ: str(gpu_frequency_hz),
        ANNOTATION_POWER_LIMIT_WATTS: "" if limit is None or math.isinf(limit) else f"{limit:g}",
    }
    if not annotations[ANNOTATION_POWER_LIMIT_WATTS]:
        del annotations[ANNOTATION_POWER_LIMIT_WATTS]
    if grant_sequence:
        annotations[ANNOTATION_POWER_GRANT_SEQUENCE] = str(grant_sequence)
    if power_mode is not None:
        annotations.update(zip(POWER_MODE_ANNOTATIONS, map(str, power_mode), strict=True))
    cmd = [
        "edgetrain", "train", *train_argv(train_spec(spec, batch_size, _weights(spec))),
        "--checkpoint-dir", ckpt_dir,
        *(["--gpu-freq", str(gpu_frequency_hz)] if settings.pin_frequency_in_pod else []),
        *(_await_agent(gpu_frequency_hz, power_mode)
          if settings.profile_clocks_by_agent and not settings.pin_frequency_in_pod else []),
        "--json-progress",
    ]
    extra = [*_pretrain_args(spec)]
    if carry_from:
        extra += ["--carry-from", carry_from, "--carry-to", f"{ckpt_dir}/carried-weights.pt"]
    args = _worker_args(
        progress=progress_configmap_name(patj["metadata"]["name"]),
        inject=inject,
        hold_release=hold_release,
        extra=[
            *extra,
            "--progress-interval", repr(settings.progress_interval_s),
            "--",
            *cmd,
        ],
    )
    container = _container("train", settings.trainer_image, args, [])
    pod = _pod_spec(
        settings,
        container,
        "Never",
        nodeSelector={"kubernetes.io/hostname": node},
        # No PVC: checkpoints go to the node's file system (on virtual nodes the shared host's).
        read_only_root=bool(settings.checkpoint_pvc),
        device_group=True,
        **jetson_runtime(settings.jetson_runtime_class),
    )
    if settings.checkpoint_pvc:
        pod["volumes"].append(
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": settings.checkpoint_pvc}}
        )
        container["volumeMounts"].append(
            {"name": "checkpoints", "mountPath": settings.checkpoint_dir}
        )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": owned_metadata(patj, name, labels, annotations),
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": pod,
            },
        },
    }


def progress_configmap(patj: Obj) -> Obj:
    """Empty progress ConfigMap the training pod patches (owned by the job)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(
            patj, progress_configmap_name(patj["metadata"]["name"]), _common_labels(patj, "train")
        ),
        "data": {},
    }


def injected_failures(patj: Obj, settings: OperatorSettings) -> dict[str, int]:
    """`edgetrain.io/inject-failures: estimate=2,profile=1,train=1` (only when enabled)."""
    if not settings.fault_injection:
        return {}
    text = (patj["metadata"].get("annotations") or {}).get(ANNOTATION_INJECT_FAILURES, "")
    out: dict[str, int] = {}
    for part in text.split(","):
        phase, sep, count = part.partition("=")
        if sep and count.strip().isdigit():
            out[phase.strip()] = int(count)
    return out


HOLDABLE_PHASES = ("estimate", "train")


def injected_hold(patj: Obj, settings: OperatorSettings, phase_key: str) -> str | None:
    """The release ConfigMap a held `phase_key` worker waits for, if the job's
    `edgetrain.io/inject-hold: estimate,train` names that phase (only when enabled)."""
    if not settings.fault_injection or phase_key not in HOLDABLE_PHASES:
        return None
    text = (patj["metadata"].get("annotations") or {}).get(ANNOTATION_INJECT_HOLD, "")
    if phase_key not in {part.strip() for part in text.split(",")}:
        return None
    return release_configmap_name(patj["metadata"]["name"], phase_key)
