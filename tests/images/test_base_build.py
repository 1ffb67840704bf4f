"""The local Debian base (scripts/build-images.sh --base-only): a build killed mid-way leaves no
chroot mounts on the host."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-images.sh"

# Stands in for mmdebstrap's slow part only: it mounts in its chroot as root mode does, then is
# killed before it can unmount (a test timeout's SIGKILL).
KILLED_MMDEBSTRAP = """#!/bin/bash
set -e
chroot="$(mktemp -d)"
mount -t tmpfs {source} "$chroot"
touch "$chroot/inside" "$TMPDIR/ran"
kill -KILL $$
"""


def _mounts_of(source: str) -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if f" - tmpfs {source} " in line]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("podman") is None
                    or shutil.which("unshare") is None,
                    reason="root with podman and unshare: what the base build needs")
def test_a_base_build_killed_mid_way_leaves_no_mounts(tmp_path: Path) -> None:
    source = f"edgetrain-test-{os.getpid()}"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "mmdebstrap"
    fake.write_text(KILLED_MMDEBSTRAP.format(source=source))
    fake.chmod(0o755)
    # An empty image store and cache: the base is missing, so the script makes it. vfs: the
    # overlay driver would mount its directory onto itself.
    store = tmp_path / "store"
    conf = tmp_path / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{store}/graph"\n'
                    f'runroot = "{store}/run"\n')
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}",
           "CONTAINERS_STORAGE_CONF": str(conf), "CONTAINER_ENGINE": "podman",
           "EDGETRAIN_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    try:
        done = subprocess.run(["bash", str(SCRIPT), "--base-only", "amd64"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode != 0, done.stderr  # the build was killed: no base, no success
        assert (tmp_path / "ran").exists(), done.stderr  # it reached mmdebstrap
        assert _mounts_of(source) == [], "the killed build's chroot mount outlived it"
        assert list(tmp_path.glob("tmp.*/inside")) == []  # what it wrote went with the mount
    finally:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            if f" - tmpfs {source} " in line or f" {tmp_path}/" in line:
                subprocess.run(["umount", "-l", line.split()[4]], check=False)
