"""The securityContext of every worker pod (estimate, profile, train): what Pod Security
`restricted` asks (non-root, no privilege escalation, no capabilities, seccomp RuntimeDefault)
and a read-only root file system where the workload allows it. Pure: pod spec in, pod spec out."""

from __future__ import annotations

from edgetrain.api.pod_security import (
    JETSON_DEVICE_GID,
    WORKER_CACHE_ENV,
    WORKER_GID,
    WORKER_TMP,
    WORKER_UID,
)
from edgetrain.kube import Obj

TMP_VOLUME = "tmp"


def jetson_runtime(runtime_class: str | None) -> Obj:
    """Jetsons reach their GPU through the NVIDIA container runtime, not the device plugin."""
    return {"runtimeClassName": runtime_class} if runtime_class else {}


def container_security(read_only_root: bool) -> Obj:
    """A worker container's securityContext."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
    }


def pod_security(device_group: bool) -> Obj:
    """A worker pod's securityContext. fsGroup makes the pod's volumes (emptyDirs, a checkpoint
    PVC) group-writable by the worker; OnRootMismatch spares a large PVC a recursive chown on
    every start. `device_group`: a Jetson pod also joins the group of the GPU's device nodes."""
    sc: Obj = {
        "runAsNonRoot": True,
        "runAsUser": WORKER_UID,
        "runAsGroup": WORKER_GID,
        "fsGroup": WORKER_GID,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if device_group:
        sc["supplementalGroups"] = [JETSON_DEVICE_GID]
    return sc


def restrict(pod: Obj, *, read_only_root: bool = True, device_group: bool = False) -> Obj:
    """Confine a worker pod spec in place (and return it): the security contexts, an emptyDir
    at /tmp (the scratch space a read-only root leaves) and the libraries' caches pointed into
    it. Idempotent: a second call changes nothing."""
    pod["securityContext"] = pod_security(device_group)
    volumes = pod.setdefault("volumes", [])
    if not any(v.get("name") == TMP_VOLUME for v in volumes):
        volumes.append({"name": TMP_VOLUME, "emptyDir": {}})
    for container in pod.get("containers", []):
        container["securityContext"] = container_security(read_only_root)
        mounts = container.setdefault("volumeMounts", [])
        if not any(m.get("mountPath") == WORKER_TMP for m in mounts):
            mounts.append({"name": TMP_VOLUME, "mountPath": WORKER_TMP})
        env = container.setdefault("env", [])
        named = {e.get("name") for e in env}
        env.extend({"name": k, "value": v} for k, v in WORKER_CACHE_ENV.items() if k not in named)
    return pod
