"""How many intra-op threads the workloads use: OMP_NUM_THREADS wins, else the usable cores."""

from __future__ import annotations

import pytest

from edgetrain.workloads.training import torch_threads


@pytest.mark.parametrize(("environ", "cores", "threads"), [
    ({}, 2, 2),
    ({}, 1, 1),
    ({}, 12, 4),  # an AGX Orin: more threads than 4 only add synchronisation for our models
    ({"OMP_NUM_THREADS": "1"}, 12, 1),
    ({"OMP_NUM_THREADS": "6"}, 2, 6),  # the user's word, even above the cores
    ({"OMP_NUM_THREADS": " 3 "}, 8, 3),
    ({"OMP_NUM_THREADS": "0"}, 2, 2),  # not a thread count: ignored
    ({"OMP_NUM_THREADS": "two"}, 2, 2),
    ({"OMP_NUM_THREADS": ""}, 8, 4),
])
def test_threads(environ: dict[str, str], cores: int, threads: int) -> None:
    assert torch_threads(environ, cores) == threads


def test_the_default_counts_the_cores_this_process_may_use() -> None:
    assert 1 <= torch_threads({}) <= 4
