"""Worker pods (estimate, profile, train) meet Pod Security `restricted`: the pure builders'
security contexts table-tested, and the API server's Pod Security admission asked (a
server-side dry run in a namespace that enforces `restricted`) about each pod template."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from edgetrain.api.pod_security import (
    JETSON_DEVICE_GID,
    LABEL_POD_SECURITY_ENFORCE,
    POD_SECURITY_RESTRICTED,
    WORKER_CACHE_ENV,
    WORKER_TMP,
    WORKER_UID,
)
from edgetrain.cluster import KubeApiError, KubeClient, api_path
from edgetrain.operator import estimate_manifests as em
from edgetrain.operator import manifests as mf
from edgetrain.operator.settings import OperatorSettings, load_settings
from edgetrain.operator.worker_security import restrict
from tests.operator.test_manifests import PATJ, SPEC

Builder = Callable[[OperatorSettings], dict[str, Any]]
BUILDERS: dict[str, Builder] = {
    "estimate": lambda s: em.estimate_job(PATJ, SPEC, s, key="k1", attempt=0),
    "profile": lambda s: mf.profile_daemonset(PATJ, SPEC, s, device_model="jetson-nano",
                                              node="n1", l4t="32.7.1", key="pk"),
    "train": lambda s: mf.train_job(PATJ, SPEC, s, node="n1", batch_size=16,
                                    gpu_frequency_hz=307_200_000, attempt=0,
                                    ckpt_dir="/var/lib/edgetrain/checkpoints/ns/j1/b16"),
}


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj["spec"]["template"]["spec"])


# (phase, checkpoint PVC) -> (read-only root, in the Jetson device group)
CASES = [
    ("estimate", None, True, False),
    ("profile", None, True, True),
    ("train", None, False, True),   # checkpoints on the node's own file system
    ("train", "ckpt", True, True),  # checkpoints on the PVC: the root can be read-only
]


@pytest.mark.parametrize(("phase", "pvc", "read_only_root", "device_group"), CASES)
def test_every_worker_pod_is_restricted(phase: str, pvc: str | None, read_only_root: bool,
                                        device_group: bool) -> None:
    pod = _pod(BUILDERS[phase](load_settings({}, checkpoint_pvc=pvc)))
    sc = pod["securityContext"]
    assert (sc["runAsNonRoot"], sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]) == (
        True, WORKER_UID, WORKER_UID, WORKER_UID)
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc.get("supplementalGroups", []) == ([JETSON_DEVICE_GID] if device_group else [])
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root}
    # The scratch space a read-only root leaves, and the libraries' caches in it.
    tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == WORKER_TMP)
    assert {"name": tmp["name"], "emptyDir": {}} in pod["volumes"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert all(env[k] == v and v.startswith(WORKER_TMP) for k, v in WORKER_CACHE_ENV.items())
    assert "privileged" not in container["securityContext"] and "hostPath" not in str(pod)


def test_restrict_is_idempotent_and_keeps_what_the_pod_sets() -> None:
    pod = {"containers": [{"name": "w", "env": [{"name": "MPLCONFIGDIR", "value": "/work/mpl"}]}],
           "volumes": [{"name": "work", "emptyDir": {}}]}
    once = restrict(copy.deepcopy(pod))
    assert restrict(copy.deepcopy(once)) == once
    env = [e for e in once["containers"][0]["env"] if e["name"] == "MPLCONFIGDIR"]
    assert env == [{"name": "MPLCONFIGDIR", "value": "/work/mpl"}]
    assert [v["name"] for v in once["volumes"]].count("tmp") == 1


@pytest.mark.cluster
def test_pod_security_admits_every_worker_pod(kube: KubeClient, namespace: str) -> None:
    """The API server's Pod Security admission, in a namespace that enforces `restricted`
    (every namespace of the operator's tests does: conftest.py), admits each worker pod
    template (dry run: nothing is scheduled) and refuses the same pod without its
    securityContext, so the check can fail."""
    labels = kube.get(api_path("v1", "namespaces", name=namespace))["metadata"]["labels"]
    assert labels[LABEL_POD_SECURITY_ENFORCE] == POD_SECURITY_RESTRICTED
    restricted_ns = namespace
    for phase, build in BUILDERS.items():
        obj = build(load_settings({}))
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"probe-{phase}", "labels": obj["spec"]["template"][
                   "metadata"]["labels"]},
               "spec": _pod(obj)}
        kube.create(api_path("v1", "pods", restricted_ns), pod, dryRun="All")
        bare = copy.deepcopy(pod)
        del bare["spec"]["securityContext"], bare["spec"]["containers"][0]["securityContext"]
        with pytest.raises(KubeApiError) as err:
            kube.create(api_path("v1", "pods", restricted_ns), bare, dryRun="All")
        assert err.value.code == 403 and 'violates PodSecurity "restricted' in err.value.message
