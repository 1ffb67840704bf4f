"""Image stores (imagestore.py): nodes seeded from one store by hard links hold its images as
containerd sees them, share the layers' files with it, and keep their metadata their own."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.cluster import imagestore
from edgetrain.cluster.images import CHART_REGISTRY
from edgetrain.cluster.realnode import missing_binaries
from tests.helpers import project_image_up_to_date, skip_here_fail_in_ci

pytestmark = [pytest.mark.cluster]

PLATFORM = "linux/arm64"
AGENT = f"{CHART_REGISTRY}/node-agent:0.1.0"
META = "io.containerd.metadata.v1.bolt/meta.db"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A stores folder of the module's own (EDGETRAIN_NODE_STORES), the agent's image built."""
    reason = ", ".join(missing_binaries()) + " not built" if missing_binaries() else None
    skip_here_fail_in_ci(reason, "no containerd in CI", "no containerd here")
    project_image_up_to_date("node-agent")
    path = tmp_path_factory.mktemp("stores")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGETRAIN_NODE_STORES", str(path))
        yield path


def _images(ctr: list[str]) -> list[str]:
    return subprocess.run([*ctr, "-n", "k8s.io", "images", "ls", "-q"], capture_output=True,
                          text=True, check=True).stdout.split()


def test_seeded_nodes_share_layers_and_keep_their_metadata(stores: Path, tmp_path: Path,
                                                           ) -> None:
    family = imagestore.set_name(["node-agent"], "0.1.0", PLATFORM)
    stale = stores / f"{family}_0000000000000000"
    (stale / "root").mkdir(parents=True)  # a store of an older build of the same images
    roots = [tmp_path / n / "containerd" for n in ("a", "b")]
    got = [imagestore.seed(root, ["node-agent"], "0.1.0", PLATFORM, print) for root in roots]
    assert got[0] == got[1] and got[0] and not got[0][0].missing, got
    (store,) = [p for p in stores.glob(f"{family}_*") if p.is_dir()]
    assert not stale.exists(), "the older build's store stayed"

    layers = [p for p in (store / "root").rglob("*") if p.is_file() and not p.is_symlink()
              and "snapshots" in p.parts]
    largest = max(layers, key=lambda p: p.stat().st_size).relative_to(store / "root")
    for root in roots:
        assert (root / largest).stat().st_ino == (store / "root" / largest).stat().st_ino
        assert (root / META).stat().st_ino != (store / "root" / META).stat().st_ino

    with imagestore.standalone_containerd(roots[0]) as ctr:
        assert AGENT in _images(ctr)
        # Unpacked for the overlay snapshotter, as the kubelet's pods need it: no pull.
        check = subprocess.run([*ctr, "-n", "k8s.io", "images", "check"], capture_output=True,
                               text=True, check=True).stdout.splitlines()
        (line,) = [row for row in check if row.startswith(AGENT + " ")]
        assert line.split()[-1] == "true", check
        subprocess.run([*ctr, "-n", "k8s.io", "images", "tag", AGENT, "localhost/only-a:1"],
                       check=True, capture_output=True)
        assert "localhost/only-a:1" in _images(ctr)
    # A write to one node's metadata reaches neither its sibling nor the store.
    third = tmp_path / "c" / "containerd"
    assert imagestore.seed(third, ["node-agent"], "0.1.0", PLATFORM, print) == got[0]
    for root in (roots[1], third):
        with imagestore.standalone_containerd(root) as ctr:
            images = _images(ctr)
            assert AGENT in images and "localhost/only-a:1" not in images


def test_a_store_seeds_only_an_empty_root_on_its_filesystem(
        stores: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "io.containerd.metadata.v1.bolt").mkdir()
    with pytest.raises(RuntimeError, match="not empty"):
        imagestore.seed(used, ["node-agent"], "0.1.0", PLATFORM, print)
    if Path("/dev/shm").is_dir() and os.stat("/dev/shm").st_dev != os.stat(stores).st_dev:
        elsewhere = Path("/dev/shm") / f"et-store-test-{os.getpid()}"
        try:
            assert imagestore.seed(elsewhere, ["node-agent"], "0.1.0", PLATFORM, print) is None
        finally:
            elsewhere.rmdir()
    monkeypatch.setenv("EDGETRAIN_NODE_STORES", "off")
    assert imagestore.seed(tmp_path / "off", ["node-agent"], "0.1.0", PLATFORM, print) is None
