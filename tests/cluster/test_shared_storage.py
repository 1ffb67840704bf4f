"""What virtual nodes share with restricted worker pods (UID 65532): the twin's tree through
the Jetson device group, and the checkpoint root. Plain files, no cluster."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from edgetrain.api.pod_security import JETSON_DEVICE_GID, WORKER_GID, WORKER_UID
from edgetrain.cluster.twin import share_with_group
from edgetrain.cluster.vnode import prepare_shared_dir
from edgetrain.device.sim import DeviceTwin
from edgetrain.device.sim.control import atomic_write

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root hands files to a group")


@needs_root
def test_the_twin_tree_goes_to_the_device_group_and_stays_there(tmp_path: Path) -> None:
    twin = DeviceTwin("jetson-nano", tmp_path / "twin").build()
    share_with_group(twin.root, JETSON_DEVICE_GID)
    for top, _dirs, files in os.walk(twin.root):
        st = os.stat(top)
        assert st.st_gid == JETSON_DEVICE_GID and st.st_mode & stat.S_ISGID, top
        assert st.st_mode & 0o070 == 0o070 and st.st_mode & 0o002 == 0, top
        for name in files:
            path = os.path.join(top, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode
                assert os.stat(path).st_gid == JETSON_DEVICE_GID and mode & 0o060 == 0o060
                assert mode & 0o002 == 0, path  # nobody outside the group writes
    # A file the twin replaces (a clamped min_freq) keeps its mode; a new one gets the group.
    min_freq = twin.devfreq_dir / "min_freq"
    atomic_write(min_freq, "76800000\n")
    assert stat.S_IMODE(min_freq.stat().st_mode) & 0o060 == 0o060
    new = twin.root / "run" / "edgetrain-twin" / "new.json"
    atomic_write(new, "{}")
    assert new.stat().st_gid == JETSON_DEVICE_GID and stat.S_IMODE(new.stat().st_mode) == 0o644


@needs_root
def test_the_checkpoint_root_belongs_to_the_worker(tmp_path: Path) -> None:
    root = tmp_path / "var" / "checkpoints"
    for _ in range(2):  # idempotent
        prepare_shared_dir(root)
        st = root.stat()
        assert (st.st_uid, st.st_gid) == (WORKER_UID, WORKER_GID)
        assert stat.S_IMODE(st.st_mode) == 0o2770
