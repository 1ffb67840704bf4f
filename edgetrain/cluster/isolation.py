"""What a container's securityContext and read-only mounts mean for a virtual node's process,
enforced by the kernel as a real kubelet's runtime does: a private mount namespace with
read-only bind mounts (EROFS even for root), a read-only root file system, the pod's UID, GID
and supplemental groups, and the capability bounding set.

`container_isolation` is pure (pod spec in, plan out); `Isolation.enter` runs in the child
between fork and exec, so it only makes system calls (ctypes) and raises nothing but OSError.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from edgetrain.kube import Obj

CLONE_NEWNS = 0x0002_0000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_KEEPCAPS, PR_CAPBSET_DROP, PR_CAP_AMBIENT = 1, 8, 24, 47
PR_CAP_AMBIENT_RAISE = 2
_LINUX_CAPABILITY_VERSION_3 = 0x2008_0522
CAP_LAST = 40  # CAP_CHECKPOINT_RESTORE (Linux 5.9); higher numbers are ignored by the kernel

# Capability names as a pod spec writes them (without CAP_), by number (linux/capability.h).
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)
CAP_DAC_READ_SEARCH = CAPABILITIES.index("DAC_READ_SEARCH")
# What containerd and CRI-O give a container that neither adds nor drops capabilities.
DEFAULT_CAPABILITIES = frozenset({
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
    "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
})
# Kernel file systems a container gets its own copy of; they keep their flags under
# readOnlyRootFilesystem (a container's /proc, /dev and /dev/shm stay writable too).
KERNEL_FS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2",
                       "securityfs", "debugfs", "tracefs", "pstore", "bpf", "fusectl",
                       "configfs", "hugetlbfs", "binfmt_misc", "autofs", "nsfs"})


class SecurityContextError(ValueError):
    """A securityContext the kubelet would refuse (CreateContainerConfigError)."""


@dataclass(frozen=True)
class Isolation:
    """How one container process is confined; `needed` is False for a plain container."""

    read_only_root: bool = False
    # (host path, read-only), parents before children: bind-mounted onto themselves.
    mounts: tuple[tuple[str, bool], ...] = ()
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()
    # Capabilities left in the bounding set (None: the process keeps what it has).
    capabilities: frozenset[str] | None = None
    privileged: bool = False

    @property
    def needed(self) -> bool:
        return bool(self.read_only_root or any(ro for _, ro in self.mounts)
                    or self.uid not in (None, 0) or self.gid not in (None, 0)
                    or self.capabilities is not None)

    def enter(self) -> None:
        """In the child before exec: namespace, mounts, groups, UID, capabilities. A failure
        is also written to the container's log (subprocess only says preexec_fn failed)."""
        try:
            self._enter()
        except OSError as exc:
            os.write(2, f"vnode: cannot confine the container: {exc}\n".encode())
            raise

    def _enter(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if self.read_only_root or any(ro for _, ro in self.mounts):
            _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            # Nothing done here may leak back into the host's mount table.
            _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
            if self.read_only_root:
                # This namespace's own table, read once it is private: the host's mounts come
                # and go (container runtimes, other pods), and a table read before the fork
                # named points that were gone by now.
                with open("/proc/self/mountinfo") as table:
                    points = root_mount_points(table.read())
                for point in points:
                    try:
                        _remount(libc, point, read_only=True)
                    except OSError as exc:
                        # Shadowed by a later mount over a parent: the path now leads elsewhere
                        # (a point of its own in this list) or nowhere.
                        if exc.errno not in (errno.ENOENT, errno.EINVAL):
                            raise
            for path, read_only in self.mounts:
                p = path.encode()
                _check(libc.mount(p, p, None, MS_BIND, None), f"bind {path}")
                _remount(libc, path, read_only)
        if self.gid is not None:
            os.setgroups(list(self.groups))
            os.setgid(self.gid)
        non_root = self.uid not in (None, 0)
        if self.capabilities is not None and not self.privileged:
            keep = {CAPABILITIES.index(c) for c in self.capabilities if c in CAPABILITIES}
            if non_root:
                keep.add(CAP_DAC_READ_SEARCH)
            for cap in range(CAP_LAST + 1):
                if cap not in keep:
                    libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL above the kernel's last
        if non_root:
            assert self.uid is not None
            libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
            os.setuid(self.uid)
            _read_search_only(libc)
        # Last: a change of credentials clears it. SIGTERM when the agent dies.
        libc.prctl(PR_SET_PDEATHSIG, 15, 0, 0, 0)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _remount(libc: ctypes.CDLL, path: str, read_only: bool) -> None:
    """Set a bind mount read-only or read-write, keeping its nosuid/nodev/noexec flags."""
    kept = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    flags = MS_REMOUNT | MS_BIND | kept | (MS_RDONLY if read_only else 0)
    _check(libc.mount(None, path.encode(), None, flags, None), f"remount {path}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _read_search_only(libc: ctypes.CDLL) -> None:
    """After setuid: keep CAP_DAC_READ_SEARCH alone, as an ambient capability over exec.

    It stands in for an image's world-readable files: the interpreter, the virtualenv and the
    pod's directory live under root-only directories here (/root is 0700). It grants reading
    and directory search, never writing, so every write is still checked as the pod's UID."""
    bit = 1 << CAP_DAC_READ_SEARCH
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)(_CapData(bit, bit, bit), _CapData(0, 0, 0))
    _check(libc.capset(ctypes.byref(header), data), "capset")
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH, 0, 0),
           "raise ambient CAP_DAC_READ_SEARCH")


def root_mount_points(mountinfo: str) -> tuple[str, ...]:
    """Mount points of non-kernel file systems (from /proc/self/mountinfo), outside /proc,
    /sys and /dev: what a read-only root file system makes read-only."""
    out = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, fstype = left.split(), right.split()[0] if right else ""
        if len(fields) < 5 or fstype in KERNEL_FS:
            continue
        point = fields[4].replace("\\040", " ")
        if any(point == top or point.startswith(top + "/") for top in ("/proc", "/sys", "/dev")):
            continue
        out.append(point)
    return tuple(dict.fromkeys(out))


def _merged(pod: Obj, container: Obj, key: str) -> object:
    """A container's securityContext field, else the pod's (the kubelet's precedence)."""
    c = container.get("securityContext") or {}
    if key in c:
        return c[key]
    return (pod.get("securityContext") or {}).get(key)


def container_isolation(pod_spec: Obj, container: Obj, mounts: Sequence[tuple[str, bool]],
                        ) -> Isolation:
    """The confinement of one container: its securityContext and resolved volume mounts
    ((host path, readOnly) in mount order). Raises SecurityContextError like the kubelet."""
    sc = container.get("securityContext") or {}
    privileged = bool(sc.get("privileged", False))
    uid = _merged(pod_spec, container, "runAsUser")
    gid = _merged(pod_spec, container, "runAsGroup")
    if _merged(pod_spec, container, "runAsNonRoot") and uid in (None, 0):
        # Images are not pulled here, so the image's USER is unknown: like an image without
        # one (root), a pod must name its non-root UID.
        raise SecurityContextError(
            f"container {container['name']!r} has runAsNonRoot and no non-zero runAsUser "
            "(a virtual node runs no image, so it cannot take the UID from one): set "
            "securityContext.runAsUser")
    psc = pod_spec.get("securityContext") or {}
    groups = [int(g) for g in psc.get("supplementalGroups") or []]
    if psc.get("fsGroup") is not None:
        groups.append(int(psc["fsGroup"]))
    caps_sc = sc.get("capabilities") or {}
    capabilities: frozenset[str] | None = None
    if "drop" in caps_sc or "add" in caps_sc:
        drop = {str(c).upper().removeprefix("CAP_") for c in caps_sc.get("drop") or []}
        add = {str(c).upper().removeprefix("CAP_") for c in caps_sc.get("add") or []}
        base = frozenset() if "ALL" in drop else DEFAULT_CAPABILITIES - drop
        capabilities = frozenset(base | add)
    ordered = sorted(dict(mounts).items(), key=lambda m: (len(Path(m[0]).parts), m[0]))
    ro_root = bool(sc.get("readOnlyRootFilesystem", False))
    return Isolation(
        read_only_root=ro_root,
        mounts=tuple(ordered) if (ro_root or any(ro for _, ro in ordered)) else (),
        uid=None if uid is None else int(str(uid)),
        gid=None if gid is None and uid in (None, 0) else int(str(gid or 0)),
        groups=tuple(dict.fromkeys(groups)),
        capabilities=capabilities,
        privileged=privileged,
    )
