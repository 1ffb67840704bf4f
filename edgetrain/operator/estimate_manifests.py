"""Builders of the estimate's objects (plain dicts, no API calls): the Indexed Job that trains one
(batch size, seed) run per completion on the GPU servers, the parts ConfigMap its pods publish
into, and the cache ConfigMap of the vector the operator merges from the parts."""

from __future__ import annotations

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.keys import GPU_RESOURCE, LABEL_CACHE, LABEL_CACHE_KEY, LABEL_MODEL
from edgetrain.api.workload_spec import estimate_argv, estimate_spec
from edgetrain.kube import Obj
from edgetrain.operator.estimate_parts import parts_configmap_name, requests_gpus, runs_of
from edgetrain.operator.manifests import (
    LABEL_MANAGED,
    MANAGER,
    WORK,
    _common_labels,
    _container,
    _pod_spec,
    _pretrain_args,
    _weights,
    _worker_args,
    efficiency_configmap_name,
    label_value,
    owned_metadata,
    owner_argument,
    short_name,
)
from edgetrain.operator.roles import estimate_affinity
from edgetrain.operator.settings import OperatorSettings

# Set by the Job controller in every pod of an Indexed Job (its completion index).
INDEX_ENV = "JOB_COMPLETION_INDEX"
# The estimate Job's uid, from the label the Job controller puts on its pods: the parts' tag.
JOB_UID_ENV = "EDGETRAIN_ESTIMATE_JOB_UID"
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
PARTS_CACHE = "estimate-parts"  # edgetrain.io/cache value: indexed, and it wakes the job


def estimate_job_name(patj_name: str, attempt: int) -> str:
    """The estimate Job of one attempt."""
    return short_name(patj_name, f"estimate-{attempt}")


def efficiency_labels(spec: PowerAwareTrainingJobSpec, key: str) -> dict[str, str]:
    """Labels of the efficiency cache ConfigMap (the cache index and wake-ups select them)."""
    return {
        LABEL_CACHE: "efficiency",
        LABEL_CACHE_KEY: key,
        LABEL_MODEL: label_value(spec.model.architecture),
        LABEL_MANAGED: MANAGER,
    }


def parts_labels(patj: Obj, key: str) -> dict[str, str]:
    """Labels of the parts ConfigMap: a cache entry (the operator's watch holds it; the last
    part wakes the job) of the estimate's key."""
    return {**_common_labels(patj, "estimate"), LABEL_CACHE: PARTS_CACHE, LABEL_CACHE_KEY: key}


def part_manager(index: int | str) -> str:
    """The field manager a run's part is applied as (one per completion index: no two runs'
    writes ever conflict)."""
    return f"edgetrain-part-{index}"


def parts_configmap(patj: Obj, job_name: str, key: str) -> Obj:
    """The parts ConfigMap as the pods' applies make it (the first one creates it), owned by
    the job. The operator does not make it: nothing waits on a write before the Job."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(patj, parts_configmap_name(job_name),
                                   parts_labels(patj, key)),
        "data": {},
    }


def efficiency_configmap(namespace: str, spec: PowerAwareTrainingJobSpec, key: str,
                         vector: EfficiencyVector) -> Obj:
    """The cache ConfigMap of the merged vector: what a single estimate pod publishes, with
    the same key, labels and JSON (it outlives the job: no owner)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": efficiency_configmap_name(key), "namespace": namespace,
                     "labels": efficiency_labels(spec, key)},
        "data": {"efficiency.json": vector.model_dump_json(indent=2) + "\n"},
    }


def estimate_job(
    patj: Obj,
    spec: PowerAwareTrainingJobSpec,
    settings: OperatorSettings,
    *,
    key: str,
    attempt: int,
    parallelism: int = 1,
    inject: str | None = None,
    hold_release: str | None = None,
) -> Obj:
    """An Indexed Job on the GPU servers: completion i runs `edgetrain estimate --run-index i`
    and publishes its part; `parallelism` pods at once, spread over the servers."""
    name = estimate_job_name(patj["metadata"]["name"], attempt)
    labels = {**_common_labels(patj, "estimate"), LABEL_CACHE_KEY: key}
    out = f"{WORK}/part.json"
    cmd = [
        "edgetrain", "estimate", *estimate_argv(estimate_spec(spec, _weights(spec))),
        "--run-index", f"$({INDEX_ENV})", "--part-of", f"{key}/$({JOB_UID_ENV})",
        "--output", out, "--json-progress",
    ]
    args = _worker_args(
        publish=parts_configmap_name(name),
        # $(VAR) in args is expanded by the kubelet from the container's environment.
        files={f"part-$({INDEX_ENV}).json": out},
        # One request per part, no read: each run applies its own key (and the same labels
        # and owner), so parts that land together never conflict.
        labels=parts_labels(patj, key),
        apply_as=part_manager(f"$({INDEX_ENV})"),
        owner=owner_argument(patj),
        inject=inject,
        hold_release=hold_release,
        extra=[*_pretrain_args(spec), "--", *cmd],
    )
    uid_env = {"name": JOB_UID_ENV, "valueFrom": {"fieldRef": {
        "fieldPath": f"metadata.labels['{JOB_UID_LABEL}']"}}}
    container = _container("estimate", settings.estimator_image, args, [uid_env])
    if requests_gpus(spec, settings):
        # The GPU server's device plugin exposes its GPUs as nvidia.com/gpu (limits only).
        container["resources"] = {"limits": {GPU_RESOURCE: str(settings.estimate_gpus)}}
    pod = _pod_spec(
        settings,
        container,
        "Never",
        nodeSelector=dict(settings.server_selector),
        # Never a Jetson, and only an architecture the estimator image has a member for.
        affinity=estimate_affinity(settings),
        # Soft: with one server (or all others full) the pods still run, one after another.
        topologySpreadConstraints=[{
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": labels},
            "matchLabelKeys": [JOB_UID_LABEL],
        }],
    )
    completions = len(runs_of(spec))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": owned_metadata(patj, name, labels),
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": max(1, min(parallelism, completions)),
            "backoffLimit": 0,  # the operator retries, with its own back-off and limit
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
