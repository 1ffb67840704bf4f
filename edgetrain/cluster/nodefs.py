"""The file system a namespaced node sees, made inside its own mount namespace (run as a
script, standard library only, by the node's namespace holder; `nsnode.py` starts it).

A kubelet and containerd hard-code host paths (`/var/lib/kubelet/device-plugins`,
`/var/log/containers`, `/run/containerd/s`) and a hostPath volume creates what it names. Here
each such path is the node's own directory, bound over the host's in the node's namespace
only (propagation private: nothing reaches the host's mount table), so several kubelets share
one host and none writes outside the cluster's directory. A Jetson node's device twin is
grafted where a Jetson has its files: its sysfs tree into a sysfs of the node's own network
namespace, its `/etc/nv_tegra_release` over /etc. When the last process in the namespace
exits, every mount made here goes with it.

Grafting into a directory that lacks an entry (sysfs, /etc: nothing may be created there)
first *opens* it: the directory is bound aside, a tmpfs goes over it, and each original
entry is bound back (directories recursively, with their submounts), so the new entry can
be added beside them. Files are bound, never copied: the twin updates its files in place,
which a bind mount follows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

STASH = "/run/.edgetrain-node/stash"  # where opened directories' originals stay reachable


def _mount(*args: str) -> None:
    res = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise OSError(f"mount {' '.join(args)}: {res.stderr.strip()}")


def _is_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


class Grafter:
    """Opens directories and grafts entries into them; remembers what it bound back, so the
    host's entries can be made read-only afterwards."""

    def __init__(self) -> None:
        self.opened: set[str] = set()
        self.host_entries: list[str] = []  # bound back from the host's view
        self._stash_n = 0

    def open(self, target: str) -> None:
        """Make `target` a tmpfs holding binds of its original entries (once)."""
        if target in self.opened:
            return
        self._stash_n += 1
        stash = f"{STASH}/{self._stash_n}"
        os.makedirs(stash, exist_ok=True)
        _mount("--rbind", target, stash)
        mode = os.stat(stash).st_mode & 0o7777
        _mount("-t", "tmpfs", "-o", f"mode={mode:o}", "edgetrain-node", target)
        for name in sorted(os.listdir(stash)):
            src, dst = f"{stash}/{name}", f"{target}/{name}"
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
                continue
            self._bind(src, dst, recursive=True)
            self.host_entries.append(dst)
        self.opened.add(target)

    def _bind(self, src: str, dst: str, *, recursive: bool) -> None:
        if _is_dir(src):
            os.makedirs(dst, exist_ok=True)
        elif not os.path.lexists(dst):
            with open(dst, "a"):
                pass
        _mount("--rbind" if recursive else "--bind", src, dst)

    def graft(self, target: str, source: str, skip: frozenset[str] = frozenset()) -> None:
        """Merge the tree `source` into the directory `target`: where both hold a directory,
        go deeper; elsewhere the source's entry wins (opening `target` if needed)."""
        for name in sorted(os.listdir(source)):
            src, dst = f"{source}/{name}", f"{target}/{name}"
            if dst in skip:
                continue
            if _is_dir(src) and _is_dir(dst):
                self.graft(dst, src, skip)
                continue
            if os.path.lexists(dst) and not os.path.islink(dst) and os.path.isdir(dst) == \
                    _is_dir(src) and not os.path.islink(src):
                # Same kind on both sides (a file over a file): bind over it in place.
                _mount("--bind", src, dst)
                continue
            self.open(target)
            self._replace(src, dst)

    def _replace(self, src: str, dst: str) -> None:
        if os.path.lexists(dst):
            subprocess.run(["umount", "-l", dst], capture_output=True, check=False)
            if _is_dir(dst):
                os.rmdir(dst)
            else:
                os.unlink(dst)
            self.host_entries = [e for e in self.host_entries if e != dst]
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            self._bind(src, dst, recursive=True)

    def read_only(self, keep_writable: tuple[str, ...]) -> None:
        """Remount the opened directories and the host's entries bound back into them
        read-only (the node's own binds, the twin's and the cgroup file system stay
        writable): nothing new appears in the host's directories, even privately."""
        for entry in (*self.opened, *self.host_entries):
            # Only this mount's flag: the writable mounts below it keep theirs.
            if os.path.islink(entry) or any(entry == k or entry.startswith(k + "/")
                                            for k in keep_writable):
                continue
            subprocess.run(["mount", "-o", "remount,bind,ro", entry], capture_output=True,
                           check=False)


def setup(spec: dict[str, object]) -> None:
    """Make the node's view: the host's root file system read-only, the node's own directories
    bound writable where the kubelet and containerd expect theirs, a sysfs of its own, the
    twin grafted in."""
    _mount("--make-rprivate", "/")
    _mount("-t", "tmpfs", "-o", "mode=755", "edgetrain-run", "/run")
    os.makedirs(STASH, exist_ok=True)
    for path in spec.get("writable", []):  # type: ignore[attr-defined]
        _mount("--bind", str(path), str(path))
    # Shared host directories, held aside before the node's own directories cover their paths.
    shared = [str(p) for p in spec.get("shared", [])]  # type: ignore[attr-defined]
    for i, path in enumerate(shared):
        os.makedirs(f"{STASH}-shared/{i}", exist_ok=True)
        _mount("--bind", path, f"{STASH}-shared/{i}")
    g = Grafter()
    binds = dict(spec["binds"])  # type: ignore[call-overload]
    for target, source in sorted(binds.items()):
        if os.path.lexists(target) and _is_dir(target) == _is_dir(source):
            _mount("--bind", source, target)
            continue
        parent = os.path.dirname(target)
        if not os.path.isdir(parent):
            raise OSError(f"cannot make {target}: no directory {parent} on this host")
        g.open(parent)
        g._replace(source, target)
    for i, path in enumerate(shared):
        if not _is_dir(path):
            raise OSError(f"cannot share {path}: no directory there in the node")
        _mount("--move", f"{STASH}-shared/{i}", path)
    # Read-only: nothing the node runs (a hostPath volume it creates, a default path) writes
    # the host's files. Only this mount's flag changes, in this namespace: submounts (/dev,
    # /proc, the binds above, which were made while it was writable) keep theirs, and the
    # host's root stays as it is.
    _mount("-o", "remount,bind,ro", "/")
    # A sysfs of the node's own network namespace (/sys/class/net shows its interfaces), with
    # the host's cgroup hierarchies inside it (the kubelet and runc manage the node's cgroups).
    cgroups = f"{STASH}-cgroup"
    os.makedirs(cgroups, exist_ok=True)
    _mount("--rbind", "/sys/fs/cgroup", cgroups)
    _mount("-t", "sysfs", "-o", "nosuid,nodev,noexec", "sysfs", "/sys")
    _mount("--rbind", cgroups, "/sys/fs/cgroup")
    subprocess.run(["umount", "-l", cgroups], capture_output=True, check=False)
    twin = str(spec.get("twin_root") or "")
    if twin:
        skip = frozenset(str(s) for s in spec.get("twin_skip", []))  # type: ignore[attr-defined]
        g.graft("/sys", f"{twin}/sys", skip)
        nv = f"{twin}/etc/nv_tegra_release"
        if os.path.exists(nv):
            g.open("/etc")
            g._replace(nv, "/etc/nv_tegra_release")
    g.read_only(keep_writable=("/sys/fs/cgroup", *binds, *shared))


def main(argv: list[str]) -> int:
    """nodefs.py SPEC.json READY_FILE -- HOLDER ARGV...: set up, say so, become the holder."""
    spec_path, ready = argv[0], argv[1]
    holder = argv[argv.index("--") + 1:]
    with open(spec_path) as f:
        spec = json.load(f)
    try:
        setup(spec)
    except OSError as exc:
        print(f"nodefs: {exc}", file=sys.stderr, flush=True)
        return 1
    with open(ready, "w") as f:
        f.write(f"{os.getpid()}\n")
    os.execvp(holder[0], holder)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
