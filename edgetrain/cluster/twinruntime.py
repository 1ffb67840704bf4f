"""The OCI runtime of a Jetson node: runc, after giving each container its device's files, as
NVIDIA's container runtime does on a real Jetson (it mounts the host's driver files and
device nodes into GPU containers). Here the device is the node's twin, so each container gets
the node's sysfs (the twin grafted in: `nodefs.py`) in place of a fresh one, the twin's CPUs
(which the node's sysfs leaves the host's), the twin's control directory
(`/run/edgetrain-twin`: what trains, for its power model) and `/etc/nv_tegra_release`. A
container's /sys stays read-only (recursively) unless the container is privileged, as runc
makes it. On an emulated node, containers also get `QEMU_CPU`: the board's core, which the
binfmt emulator reads from each process's environment.

`write_wrapper` writes a shell script that containerd runs as `BinaryName`; it calls this
file (standard library only) for `create` and then execs runc."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TWIN_CONTROL = "/run/edgetrain-twin"
L4T_RELEASE = "/etc/nv_tegra_release"
TWIN_CPUS = "/sys/devices/system/cpu"
SANDBOX_ANNOTATION = "io.kubernetes.cri.container-type"


def give_device(spec: dict[str, object], twin_root: str, qemu_cpu: str = "") -> bool:
    """Edit an OCI runtime spec in place; False where nothing was changed (a pod sandbox)."""
    annotations = spec.get("annotations") or {}
    if isinstance(annotations, dict) and annotations.get(SANDBOX_ANNOTATION) == "sandbox":
        return False
    process = spec.get("process")
    if qemu_cpu and isinstance(process, dict):
        env = process.setdefault("env", [])
        if not any(str(e).startswith("QEMU_CPU=") for e in env):  # a pod's own value wins
            env.append(f"QEMU_CPU={qemu_cpu}")
    mounts = spec.setdefault("mounts", [])
    assert isinstance(mounts, list)
    taken = {m.get("destination") for m in mounts}
    for m in mounts:
        if m.get("destination") == "/sys" and m.get("type") == "sysfs":
            read_only = "ro" in m.get("options", [])
            m.update({"type": "bind", "source": "/sys", "options": [
                "rbind", "nosuid", "noexec", "nodev", "rro" if read_only else "rw"]})
    # The board's CPUs (cores online, clock caps), which the node's own /sys leaves out (the
    # kubelet reads the host's there): over a hostPath of them (the agent's, read-write) or
    # under the container's /sys, read-only as it is.
    cpus = f"{twin_root}{TWIN_CPUS}"
    if os.path.isdir(cpus):
        bound = [m for m in mounts if m.get("destination") == TWIN_CPUS]
        for m in bound:
            m["source"] = cpus
        sysfs = next((m for m in mounts if m.get("destination") == "/sys"), None)
        if not bound and sysfs is not None:
            read_only = "ro" in sysfs.get("options", []) or "rro" in sysfs.get("options", [])
            mounts.append({"destination": TWIN_CPUS, "type": "bind", "source": cpus,
                           "options": ["rbind", "nosuid", "noexec", "nodev",
                                       "rro" if read_only else "rw"]})
    control = f"{twin_root}{TWIN_CONTROL}"
    if TWIN_CONTROL not in taken and os.path.isdir(control):
        mounts.append({"destination": TWIN_CONTROL, "type": "bind", "source": control,
                       "options": ["rbind", "rw", "nosuid", "nodev", "noexec"]})
    release = f"{twin_root}{L4T_RELEASE}"
    if L4T_RELEASE not in taken and os.path.isfile(release):
        mounts.append({"destination": L4T_RELEASE, "type": "bind", "source": release,
                       "options": ["bind", "ro", "nosuid", "nodev", "noexec"]})
    return True


def edit_bundle(bundle: str, twin_root: str, qemu_cpu: str = "") -> None:
    """Rewrite `<bundle>/config.json` for the twin (atomically)."""
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        spec = json.load(f)
    if give_device(spec, twin_root, qemu_cpu):
        tmp = path + ".edgetrain"
        with open(tmp, "w") as f:
            json.dump(spec, f)
        os.replace(tmp, path)


WRAPPER = """#!/bin/sh
# Written by `edgetrain cluster up`: the Jetson node's runtime (edgetrain/cluster/twinruntime.py).
bundle=""; create=""; prev=""
for arg in "$@"; do
  case "$prev" in --bundle|-b) bundle="$arg" ;; esac
  case "$arg" in create) create=1 ;; --bundle=*) bundle="${{arg#--bundle=}}" ;; esac
  prev="$arg"
done
if [ -n "$create" ] && [ -n "$bundle" ]; then
  {python} -I -S {script} "$bundle" {twin} {qemu_cpu} || exit 1
fi
exec {runc} "$@"
"""


def write_wrapper(path: Path, runc: str, twin_root: Path, python: str = "/usr/bin/python3",
                  qemu_cpu: str = "") -> Path:
    """The runtime script containerd calls instead of runc."""
    script = Path(__file__).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(WRAPPER.format(python=python, script=script, twin=twin_root, runc=runc,
                                   qemu_cpu=qemu_cpu))
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    edit_bundle(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
