"""`edgetrain run --dry-run`'s phases: cache keys and paths the real run uses, hits once cached."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.api import EfficiencyVector, write_efficiency
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.pipeline.dryrun import dry_run

SPEC = PowerAwareTrainingJobSpec.model_validate(
    {
        "model": {"architecture": "resnet8-w025"},
        "dataset": {"name": "digits"},
        "proxyDataset": {"name": "digits"},
        "targetAccuracy": 0.5,
        "batchSizes": [8, 16],
        "budget": {"estimateSamples": 1000, "trainSamples": 3000, "seeds": [0, 1]},
    }
)


def test_dry_run_counts_work_and_sees_a_cached_vector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path))
    phases = {p.phase: p for p in dry_run(SPEC)}
    assert list(phases) == ["estimate", "profile", "train"]
    assert not phases["estimate"].cached
    assert phases["estimate"].samples_to_train == 2 * 2 * 1000
    assert phases["train"].samples_to_train == 3000
    assert phases["profile"].key and phases["profile"].samples_to_train > 0
    path = phases["estimate"].path
    assert path is not None and path.startswith(str(tmp_path))
    write_efficiency(
        path,
        EfficiencyVector.from_samples(model="resnet8-w025", dataset="digits",
                                      target_accuracy=0.5, batch_sizes=[8, 16],
                                      samples_to_accuracy=[100.0, 200.0]),
    )
    again = {p.phase: p for p in dry_run(SPEC)}
    assert again["estimate"].cached and again["estimate"].samples_to_train == 0
    assert again["estimate"].key == phases["estimate"].key
