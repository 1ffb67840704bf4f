"""Shared fixtures: the session's cluster, small profiles and efficiency vectors on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.api import EfficiencyVector, ProfilePoint, write_efficiency, write_profile
from edgetrain.device.sim import DeviceTwin
from edgetrain.workloads import workload_cost
from tests.cluster.fixtures import cluster, kube, namespace, repo_root, vnodes

# The session's control plane, for every test below (defined once: see tests/cluster/fixtures.py).
__all__ = ["cluster", "kube", "namespace", "repo_root", "vnodes"]

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
# they are the longest group.
HOST_STATE_TESTS = ("tests/test_readme.py", "tests/images/", "tests/cluster/test_realnode.py")
HOST_STATE_GROUP = "host-state"
_SHARED_SCOPES = ("module", "package", "class")


def xdist_group_of(item: pytest.Item) -> str | None:
    """The worker group `item` must share: host-wide state, or a module-scoped fixture (a fleet, a
    namespace) that would otherwise be built once per worker. None: any worker."""
    path = item.nodeid.split("::", 1)[0]
    if path.startswith(HOST_STATE_TESTS):
        return HOST_STATE_GROUP
    fixture_info = getattr(item, "_fixtureinfo", None)
    if fixture_info is not None:
        for defs in fixture_info.name2fixturedefs.values():
            if any(d.scope in _SHARED_SCOPES for d in defs):
                return path
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into scopes
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group and order tests for `pytest -n --dist loadgroup`; tests marked `cuda` run
    where CUDA exists and are skipped, saying why, elsewhere."""
    groups = {id(item): xdist_group_of(item) for item in items}
    for item in items:
        group = groups[id(item)]
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    # Longest first, so the last minutes are short tests filling both workers (run with
    # --no-loadscope-reorder, which keeps this order). Stable: every worker must collect the same.
    items.sort(key=lambda item: _start_rank(item, groups[id(item)]))
    _skip_cuda_without_device(items)


def _start_rank(item: pytest.Item, group: str | None) -> int:
    """0 starts first: the host-state group, then shared fleets, slow tests, cluster tests."""
    if group == HOST_STATE_GROUP:
        return 0
    if group is not None:
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
