"""Shared fixtures: the session's cluster, small profiles and efficiency vectors on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgetrain.api import EfficiencyVector, ProfilePoint, write_efficiency, write_profile
from edgetrain.device.sim import DeviceTwin
from edgetrain.workloads import workload_cost
from tests.cluster.fixtures import (
    checkpoint_root,
    cluster,
    estimator_image,
    kube,
    namespace,
    real_fleet,
    repo_root,
    slot,
    trainer_images,
)

# The session's control plane and real nodes, for every test below (defined once: see
# tests/cluster/fixtures.py).
__all__ = ["checkpoint_root", "cluster", "estimator_image", "kube", "namespace", "real_fleet",
           "repo_root", "slot", "trainer_images"]

MHZ = 1_000_000

# The first paper's Figure 1 situation (Jetson Nano, ResNet18 at 3×32×32, 5 W): b=128 only fits
# 307.2 MHz, b=64 reaches 460.8 MHz and trains 31.9 % faster there. Times are per sample.
FIGURE1_POINTS = [
    ProfilePoint(batch_size=b, gpu_freq_hz=f, time_per_sample_s=t, peak_power_w=p, mean_power_w=m)
    for b, f, t, p, m in [
        (128, 307_200_000, 0.0100, 4.60, 4.10),
        (128, 384_000_000, 0.0082, 5.20, 4.60),
        (128, 460_800_000, 0.0069, 5.70, 5.10),
        (128, 537_600_000, 0.0060, 6.30, 5.60),
        (64, 307_200_000, 0.0102, 4.10, 3.70),
        (64, 384_000_000, 0.0083, 4.50, 4.00),
        (64, 460_800_000, 0.00681, 4.90, 4.40),
        (64, 537_600_000, 0.0059, 5.40, 4.80),
    ]
]


# Tests that touch state one host has once: the real node's kubelet paths, interface and
# containerd (one real node per host), and podman's image store, which the README block and
# the image tests both rebuild. With `pytest -n` they share one worker, and start first: together
# they are the longest group. The install guide's test joins them: its arm64 Jetsons run under
# QEMU as the README block's do, and the two at once on 2 cores outlasted both their waits
# (a fresh clone's `.ci/run`, 2026-11-28: the block's 15 min, the guide's 1,003 s).
HOST_STATE_TESTS = ("tests/test_readme.py", "tests/test_install.py", "tests/images/",
                    "tests/cluster/test_realnode.py",
                    "tests/cluster/test_jetson_real.py", "tests/cluster/test_servers_real.py",
                    "tests/cluster/test_imagestore.py")
HOST_STATE_GROUP = "host-state"
_SHARED_SCOPES = ("module", "package", "class")


def worker_group(nodeid: str) -> str:
    """The tests that must share one worker: the host-state group, else one module (its
    module-scoped fixtures, a fleet or a shared namespace, are then built once)."""
    path = nodeid.split("::", 1)[0]
    return HOST_STATE_GROUP if path.startswith(HOST_STATE_TESTS) else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Schedule whole groups (`worker_group`) in collection order. xdist's own `loadgroup`
    cannot be used: it renames nodeids, which pytest 9 ignores, so its groups split."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedStateScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return SharedStateScheduling(config, log)


def _shares_a_fixture(item: pytest.Item) -> bool:
    fixture_info = getattr(item, "_fixtureinfo", None)
    return fixture_info is not None and any(
        d.scope in _SHARED_SCOPES for defs in fixture_info.name2fixturedefs.values() for d in defs)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first under `pytest -n` (the last minutes are then short tests filling both
    workers; stable, as every worker must collect the same order); tests marked `cuda` run
    where CUDA exists and are skipped, saying why, elsewhere."""
    items.sort(key=_start_rank)
    _skip_cuda_without_device(items)


def _start_rank(item: pytest.Item) -> int:
    """0 starts first: the host-state group, then shared fleets, slow tests, cluster tests."""
    if worker_group(item.nodeid) == HOST_STATE_GROUP:
        return 0
    if _shares_a_fixture(item):
        return 1
    if item.get_closest_marker("slow"):
        return 2
    return 3 if item.get_closest_marker("cluster") else 4


def _skip_cuda_without_device(items: list[pytest.Item]) -> None:
    marked = [item for item in items if item.get_closest_marker("cuda")]
    if not marked:
        return
    import torch  # only when such tests were collected: light test runs stay torch-free

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (none on this machine)")
    for item in marked:
        item.add_marker(skip)


@pytest.fixture
def figure1_files(tmp_path: Path) -> tuple[Path, Path]:
    """Figure-1 profile and an equal-r efficiency vector on disk."""
    profile, efficiency = tmp_path / "profile.csv", tmp_path / "efficiency.json"
    write_profile(profile, FIGURE1_POINTS)
    write_efficiency(
        efficiency,
        EfficiencyVector.from_samples(
            model="resnet18",
            dataset="cifar10",
            target_accuracy=0.87,
            batch_sizes=[64, 128],
            samples_to_accuracy=[40000.0, 40000.0],
        ),
    )
    return profile, efficiency


@pytest.fixture
def nano(tmp_path: Path) -> Iterator[DeviceTwin]:
    """A live Nano twin whose power settles in 50 ms, for fast profiling tests (simulated)."""
    with DeviceTwin(
        "jetson-nano",
        tmp_path / "twin",
        tick_s=0.01,
        power_settle_tau_s=0.05,
        cost_of=workload_cost,
    ) as twin:
        yield twin
