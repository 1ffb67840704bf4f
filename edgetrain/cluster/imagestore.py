"""Prepared image stores for real nodes (docs/cluster.md, "Image stores"): a containerd root
that holds one set of the project's images for one platform, made once per build of those
images, and a node's `/var/lib/containerd` seeded from it by hard links before its containerd
starts, as a fleet flashed from one disk image. Each node then has its own containerd, metadata
and snapshots, but no copy of the layers: importing the 5.1 GB CPU estimator into a node took
about 2 min and 5 GB of disk; seeding takes a second or two and no disk."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

from edgetrain.cluster import binaries
from edgetrain.cluster.images import (
    REGISTRIES,
    ImageExports,
    ImportResult,
    member_digest,
    podman_ref,
)

STORE_FORMAT = 1
# Files containerd writes in place: each seeded node gets copies, never links (a write through
# a link would reach the store and every node seeded from it). The snapshots and the content
# blobs are never written once committed, so they are shared.
PRIVATE_FILES = ("io.containerd.metadata.v1.bolt/meta.db",
                 "io.containerd.snapshotter.v1.overlayfs/metadata.db")
# Left out of a store: the instance's own identity and its scratch directories.
LEFT_OUT = ("io.containerd.grpc.v1.introspection", "opt", "tmpmounts")
RECORD = "store.json"
Log = Callable[[str], None]


def stores_dir() -> Path:
    """$EDGETRAIN_NODE_STORES, else ~/.cache/edgetrain/node-images."""
    env = os.environ.get("EDGETRAIN_NODE_STORES", "")
    if env and env != "off":
        return Path(env)
    return Path.home() / ".cache" / "edgetrain" / "node-images"


def enabled() -> bool:
    """Stores are used unless EDGETRAIN_NODE_STORES is `off` (every node then imports)."""
    return os.environ.get("EDGETRAIN_NODE_STORES", "") != "off"


def _podman_json(args: Sequence[str]) -> object:
    res = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    return json.loads(res.stdout) if res.returncode == 0 and res.stdout.strip() else None


def source_digest(ref: str, platform: str) -> str:
    """What podman holds for `ref` on `platform`: its list's member digest, or the image's ID."""
    listed = _podman_json(["manifest", "inspect", ref])
    if isinstance(listed, dict):
        return member_digest(listed, platform) or "no-member"
    found = _podman_json(["image", "inspect", "--format", "json", ref])
    return str(found[0]["Id"]) if isinstance(found, list) and found else "unknown"


@functools.cache  # asked once per node seeded; the binary does not change under a process
def _containerd_version() -> str:
    res = subprocess.run([str(binaries.bin_dir() / "containerd"), "--version"],
                         capture_output=True, text=True, check=False)
    return res.stdout.strip()


def set_name(names: Sequence[str], tag: str, platform: str) -> str:
    """The store's family: one platform's set of images at one version."""
    return f"{platform.replace('/', '-')}_{'+'.join(sorted(set(names)))}_{tag}"


def store_key(names: Sequence[str], tag: str, platform: str) -> str:
    """A digest of what the store would hold: each image as podman has it now, and the
    containerd that writes the store's metadata."""
    sources = {}
    for name in sorted(set(names)):
        ref = podman_ref(name, tag)
        sources[name] = [ref, source_digest(ref, platform)] if ref else None
    text = json.dumps({"format": STORE_FORMAT, "platform": platform, "tag": tag,
                       "registries": list(REGISTRIES), "sources": sources,
                       "containerd": _containerd_version()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path, mode: int) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _builder_toml(root: Path, state: Path, socket: Path) -> str:
    # Only content, snapshots and metadata: no CRI, no NRI (nothing runs in a store).
    return f"""version = 4
root = "{root}"
state = "{state}"
imports = []
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime",
                    "io.containerd.cri.v1.images", "io.containerd.nri.v1.nri",
                    "io.containerd.podsandbox.controller.v1.podsandbox"]
[plugins."io.containerd.server.v1.grpc"]
  address = "{socket}"
[plugins."io.containerd.server.v1.ttrpc"]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
"""


@contextlib.contextmanager
def standalone_containerd(root: Path) -> Iterator[list[str]]:
    """A containerd over `root` with nothing but content, snapshots and metadata (no CRI, no
    NRI: nothing runs in a store); yields `ctr` with its address, and stops it on exit."""
    with tempfile.TemporaryDirectory(prefix="et-store-") as tmp:
        run = Path(tmp)
        config = run / "config.toml"
        config.write_text(_builder_toml(root, run / "state", run / "c.sock"))
        with (run / "containerd.log").open("w") as log:
            proc = subprocess.Popen([str(binaries.bin_dir() / "containerd"),
                                     f"--config={config}", "--log-level=warn"],
                                    stdout=log, stderr=subprocess.STDOUT)
            ctr = [str(binaries.bin_dir() / "ctr"), "--address", str(run / "c.sock")]
            try:
                deadline = time.monotonic() + 60
                while subprocess.run([*ctr, "version"], capture_output=True,
                                     check=False).returncode != 0:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("a store's containerd did not start: "
                                           + (run / "containerd.log").read_text()[-500:])
                    time.sleep(0.2)
                yield ctr
            finally:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                _unmount_under(run)


def _unmount_under(path: Path) -> None:
    """Unmount what a containerd left mounted in its state (`ctr images mount` does), deepest
    first, so that removing the folder cannot reach into an image."""
    prefix = str(path) + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f if line.split()[4].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


def _build(dest: Path, names: Sequence[str], tag: str, platform: str) -> list[ImportResult]:
    """Import the images into a containerd of the store's own, then stop it."""
    with standalone_containerd(dest / "root") as ctr:
        exports = ImageExports(dest / "exports", tag)
        try:
            results = exports.import_into(ctr, names, platform)
        finally:
            exports.clean()
        _collect_garbage(ctr)
        return results


def _collect_garbage(ctr: list[str]) -> None:
    """Drop the unpacked layers' blobs now (`--discard-unpacked-layers` leaves them to a
    garbage collection that may not run before the store's containerd stops: 4.8 GB of the
    estimator's stayed): removing an image with `--sync` runs one and waits for it."""
    k8s = [*ctr, "-n", "k8s.io"]
    names = subprocess.run([*k8s, "images", "ls", "-q"], capture_output=True, text=True,
                           check=True).stdout.split()
    if not names:
        return
    marker = "localhost/edgetrain/store-gc:0"
    subprocess.run([*k8s, "images", "tag", "--force", names[0], marker], check=True,
                   capture_output=True)
    subprocess.run([*k8s, "images", "rm", "--sync", marker], check=True, capture_output=True)


def _ensure_locked(names: Sequence[str], tag: str, platform: str, log: Log,
                   ) -> tuple[Path, list[ImportResult]]:
    """ensure_store's work, its family's lock held."""
    family = set_name(names, tag, platform)
    path = stores_dir() / f"{family}_{store_key(names, tag, platform)}"
    if not (path / RECORD).exists():
        started = time.monotonic()
        tmp = path.with_name(path.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        results = _build(tmp, names, tag, platform)
        for left in LEFT_OUT:
            shutil.rmtree(tmp / "root" / left, ignore_errors=True)
        (tmp / RECORD).write_text(json.dumps(
            {"images": [asdict(r) for r in results], "platform": platform}, indent=2))
        tmp.rename(path)
        for old in stores_dir().glob(f"{family}_*"):
            if old != path:
                shutil.rmtree(old, ignore_errors=True)
        log(f"image store {path.name}: {', '.join(sorted(set(names)))} ({platform}) made in "
            f"{time.monotonic() - started:.1f} s")
    record = json.loads((path / RECORD).read_text())
    return path, [ImportResult(**r) for r in record["images"]]


def ensure_store(names: Sequence[str], tag: str, platform: str, log: Log = print,
                 ) -> tuple[Path, list[ImportResult]]:
    """The store for these images as podman holds them now, made if there is none; older
    stores of the same set go."""
    with _locked(stores_dir() / f"{set_name(names, tag, platform)}.lock", fcntl.LOCK_EX):
        return _ensure_locked(names, tag, platform, log)


def can_seed(containerd_root: Path) -> bool:
    """Hard links need the store and the node on one filesystem."""
    if not enabled() or shutil.which("podman") is None:
        return False
    stores_dir().mkdir(parents=True, exist_ok=True)
    containerd_root.mkdir(parents=True, exist_ok=True)
    return os.stat(stores_dir()).st_dev == os.stat(containerd_root).st_dev


def seed(containerd_root: Path, names: Sequence[str], tag: str, platform: str,
         log: Log = print) -> list[ImportResult] | None:
    """Seed a node's containerd root (empty, its containerd not started) with the images, or
    None where a store cannot serve it (then the node imports them)."""
    if not names or not can_seed(containerd_root):
        return None
    if any(containerd_root.iterdir()):
        raise RuntimeError(f"{containerd_root} is not empty: a store seeds a new node only")
    # One lock over making and linking: a newer build of the set removes the older store.
    with _locked(stores_dir() / f"{set_name(names, tag, platform)}.lock", fcntl.LOCK_EX):
        path, results = _ensure_locked(names, tag, platform, log)
        subprocess.run(["cp", "-al", "--", f"{path / 'root'}/.", str(containerd_root)],
                       check=True, capture_output=True)
    for private in PRIVATE_FILES:
        target = containerd_root / private
        if target.exists():  # the link's content, as a file of the node's own
            copy = target.with_name(target.name + ".copy")
            shutil.copy2(target, copy)
            os.replace(copy, target)
    return results
