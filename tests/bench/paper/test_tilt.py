"""The population tilt prior's built-in pairs are what the committed benches measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.bench.paper import read_recorded
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.proxies import population_for, run_pairs
from edgetrain.planner.tilt import BENCH_PAIRS, MIN_PAIRS

PAPER = Path(__file__).resolve().parents[3] / "docs/benchmarks/paper"


def test_bench_pairs_are_recomputed_from_the_committed_runs() -> None:
    pairs = []
    for name in ("small.json", "cpu.json"):
        run = read_recorded((PAPER / name).read_text())
        config = run.config
        by = {(e.model, e.dataset, e.seed): e for e in run.estimates}
        estimates = {estimate_key(w, ref, s): by[(w.model, ref.name, s)]
                     for w in config.workloads for ref in w.datasets for s in config.seeds}
        pairs += run_pairs(config, estimates)
    unique = {p.label: p.tilt for p in pairs}
    assert {p.label for p in BENCH_PAIRS} == set(unique)
    for p in BENCH_PAIRS:
        assert p.tilt == pytest.approx(unique[p.label], abs=1e-12), p.label
    # Enough pairs of other models for every cpu workload's prior to be trusted.
    cpu = read_recorded((PAPER / "cpu.json").read_text())
    own = [p for p in BENCH_PAIRS if p.label.startswith("cpu/")]
    for w in cpu.config.workloads:
        prior = population_for(cpu.config, w, own, cpu.config.recurring.policy)
        assert prior.pairs >= MIN_PAIRS and prior.trusted, (w.label, prior)
