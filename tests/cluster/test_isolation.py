"""Virtual nodes confine a container as a kubelet's runtime does, enforced by the kernel:
read-only volume mounts and a read-only root file system (EROFS even for root, in the
container's own mount namespace), the pod's UID/GID, and the capabilities it keeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edgetrain.api.pod_security import WORKER_GID, WORKER_UID
from edgetrain.cluster import KubeClient, VNodeAgent, api_path, container_log
from edgetrain.cluster.isolation import SecurityContextError, container_isolation, root_mount_points
from edgetrain.device.sim import BOARDS
from edgetrain.operator.worker_security import restrict

NANO = BOARDS["jetson-nano"]
DEVFREQ = f"/{NANO.gpu_device_dir}/devfreq/{NANO.devfreq_name}"

MOUNTINFO = """\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:5 / /proc rw,nosuid - proc proc rw
24 22 0:6 / /sys rw - sysfs sysfs rw
25 24 0:7 / /sys/fs/cgroup rw - cgroup2 cgroup rw
26 22 0:8 / /dev rw - devtmpfs devtmpfs rw
27 26 0:9 / /dev/shm rw - tmpfs tmpfs rw
28 22 0:10 / /tmp rw - tmpfs tmpfs rw
29 22 253:1 / /work\\040dir rw - xfs /dev/vdb rw
"""


def test_root_mount_points_skip_kernel_file_systems() -> None:
    assert root_mount_points(MOUNTINFO) == ("/", "/tmp", "/work dir")


@pytest.mark.parametrize(("pod", "container", "expect"), [
    # A plain container needs no namespace and keeps what it has.
    ({}, {"name": "c"}, {"needed": False, "uid": None, "capabilities": None}),
    # The operator's context: pod-level UID/GID, container-level the rest.
    ({"securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True}},
     {"name": "c", "securityContext": {"readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}}},
     {"needed": True, "uid": 65532, "gid": 65532, "capabilities": frozenset(),
      "read_only_root": True}),
    # The container's runAsUser wins over the pod's; GID 0 when no runAsGroup, as runc does.
    ({"securityContext": {"runAsUser": 1000}}, {"name": "c", "securityContext": {"runAsUser": 7}},
     {"uid": 7, "gid": 0}),
    # Dropping one default capability keeps the others; add puts one back.
    ({}, {"name": "c", "securityContext": {"capabilities": {"drop": ["NET_RAW"],
                                                              "add": ["SYS_TIME"]}}},
     {"capabilities_has": {"CHOWN", "SYS_TIME"}, "capabilities_lacks": {"NET_RAW"}}),
])
def test_security_context_table(pod: dict[str, Any], container: dict[str, Any],
                                expect: dict[str, Any]) -> None:
    iso = container_isolation(pod, container, [])
    for key, want in expect.items():
        if key == "capabilities_has":
            assert iso.capabilities is not None and want <= iso.capabilities
        elif key == "capabilities_lacks":
            assert iso.capabilities is not None and not want & iso.capabilities
        else:
            assert getattr(iso, key) == want, key


def test_mounts_go_parents_first_and_only_when_something_is_read_only() -> None:
    mounts = [("/t/sys/devices/gpu", False), ("/t/sys", True), ("/t/state", False)]
    iso = container_isolation({}, {"name": "c"}, mounts)
    assert iso.mounts == (("/t/state", False), ("/t/sys", True), ("/t/sys/devices/gpu", False))
    assert container_isolation({}, {"name": "c"}, [("/t/state", False)]).mounts == ()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root, as a kubelet does")
def test_a_read_only_root_covers_the_mounts_of_the_moment_it_starts(tmp_path: Path) -> None:
    """The child reads its own mount table: a mount made after the plan is read-only too, and
    none that vanished since (container runtimes' mounts come and go) can fail the start."""
    iso = container_isolation({}, {"name": "c", "securityContext": {
        "readOnlyRootFilesystem": True}}, [])
    late = tmp_path / "late"
    late.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(late)], check=True)
    try:
        proc = subprocess.run([sys.executable, "-c", f"open({str(late / 'f')!r}, 'w')"],
                              preexec_fn=iso.enter, capture_output=True, text=True, check=False)
    finally:
        subprocess.run(["umount", str(late)], check=True)
    assert proc.returncode == 1 and "Read-only file system" in proc.stderr, proc.stderr
    assert not (late / "f").exists()


def test_run_as_non_root_without_a_uid_is_refused() -> None:
    with pytest.raises(SecurityContextError, match="runAsNonRoot and no non-zero runAsUser"):
        container_isolation({"securityContext": {"runAsNonRoot": True}}, {"name": "op"}, [])


# What each container tries; it prints one JSON object of path -> "ok" or the errno name.
PROBE = """
import errno, json, os, sys
out = {"uid": os.getuid(), "gid": os.getgid(), "results": []}
for path in sys.argv[1:]:
    try:
        with open(os.path.expandvars(path), "a"):
            pass
        out["results"].append("ok")
    except OSError as exc:
        out["results"].append(errno.errorcode[exc.errno])
print(json.dumps(out))
"""


def _container(name: str, sc: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    return {
        "name": name, "image": "edgetrain:dev", "command": ["python", "-c", PROBE, *paths],
        "securityContext": sc, "env": [{"name": "NAME", "value": name}],
        "volumeMounts": [
            {"name": "sys", "mountPath": "/sys", "readOnly": True},
            {"name": "gpu-devfreq", "mountPath": DEVFREQ},
            {"name": "scratch", "mountPath": "/scratch"},
        ],
    }


@pytest.mark.cluster
def test_writes_outside_the_writable_mounts_fail(vnodes: VNodeAgent, kube: KubeClient,
                                                  namespace: str) -> None:
    """The node agent's chart layout on a virtual Nano: /sys read-only with the GPU devfreq
    directory read-write over it, a read-only root file system; root without capabilities
    writes the devfreq file and nothing else, and a non-root UID cannot even write that."""
    paths = [
        f"{DEVFREQ}/max_freq",                        # the one writable sysfs directory
        f"/{NANO.gpu_device_dir}/railgate_enable",     # the rest of /sys: read-only
        "$EDGETRAIN_SYSFS_ROOT/sys/class/thermal/x",  # the same tree by its host path
        "$EDGETRAIN_POD_ROOT/written-to-root",        # the root file system
        "/scratch/$NAME",                             # an emptyDir
    ]
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "confined"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": "vn-jetson-nano-0"},
            "containers": [
                _container("root", {"runAsUser": 0, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}, paths),
                _container("nonroot", {"runAsUser": 65532, "runAsGroup": 65532,
                                       "readOnlyRootFilesystem": True,
                                       "capabilities": {"drop": ["ALL"]}}, paths),
            ],
            "volumes": [
                {"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}},
                {"name": "gpu-devfreq", "hostPath": {"path": DEVFREQ, "type": "Directory"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        },
    }
    kube.create(api_path("v1", "pods", namespace), pod)
    done = kube.wait_for(api_path("v1", "pods", namespace, "confined"),
                         lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
                         timeout_s=60, what="probe pod done")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    results = {name: json.loads(container_log(done, name).read_text().strip().splitlines()[-1])
               for name in ("root", "nonroot")}
    root, nonroot = results["root"], results["nonroot"]
    assert (root["uid"], nonroot["uid"], nonroot["gid"]) == (0, 65532, 65532)
    assert root["results"] == ["ok", "EROFS", "EROFS", "EROFS", "ok"], root
    # As UID 65532 the existing root-owned files (0644) are refused by permission before the
    # mount is asked (EACCES), new files by the read-only mount (EROFS): only the emptyDir.
    assert nonroot["results"] == ["EACCES", "EACCES", "EROFS", "EROFS", "ok"], nonroot


@pytest.mark.cluster
def test_a_restricted_worker_drives_the_twin_through_the_device_group(
        vnodes: VNodeAgent, kube: KubeClient, namespace: str) -> None:
    """An operator worker pod (worker_security.restrict: UID 65532, no capabilities, read-only
    root) on a virtual Nano sets the twin's GPU clock and tells it what trains, as the profile
    and train pods do, through the Jetson device group its supplementalGroups name; the same
    pod without that group is refused (EACCES). Both write only /tmp besides."""
    paths = [
        f"$EDGETRAIN_SYSFS_ROOT{DEVFREQ}/max_freq",            # devfreq, written in place
        "$EDGETRAIN_SYSFS_ROOT/run/edgetrain-twin/new-$NAME",  # the twin's control dir
        "$EDGETRAIN_POD_ROOT/written-to-root",                 # the root file system
        "/tmp/$NAME",                                          # the worker's scratch emptyDir
    ]
    for name, group in (("worker", True), ("outsider", False)):
        container = {**_container(name, {}, paths), "volumeMounts": []}
        spec = restrict({"restartPolicy": "Never",
                         "nodeSelector": {"kubernetes.io/hostname": "vn-jetson-nano-0"},
                         "containers": [container]}, device_group=group)
        kube.create(api_path("v1", "pods", namespace),
                    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                     "spec": spec})
    results = {}
    for name in ("worker", "outsider"):
        done = kube.wait_for(api_path("v1", "pods", namespace, name),
                             lambda p: p.get("status", {}).get("phase") in ("Succeeded",
                                                                            "Failed"),
                             timeout_s=60, what=f"{name} pod done")
        assert done["status"]["phase"] == "Succeeded", done["status"]
        results[name] = json.loads(
            container_log(done, name).read_text().strip().splitlines()[-1])
    worker, outsider = results["worker"], results["outsider"]
    assert (worker["uid"], worker["gid"]) == (WORKER_UID, WORKER_GID)
    assert worker["results"] == ["ok", "ok", "EROFS", "ok"], worker
    assert outsider["results"] == ["EACCES", "EACCES", "EROFS", "ok"], outsider
