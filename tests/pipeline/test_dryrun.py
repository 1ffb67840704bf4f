"""`edgetrain run --dry-run`'s phases: cache keys and paths the real run uses, hits once cached."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.api import EfficiencyVector, write_efficiency
from edgetrain.api.job import PowerAwareTrainingJobSpec, profile_cache_key
from edgetrain.device.sim import DeviceTwin
from edgetrain.pipeline.dryrun import dry_run, profile_cache_path

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


def test_profile_key_is_the_one_the_run_computes_on_the_twin(
    nano: DeviceTwin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dry run names the twin's profile without starting it: same board, L4T and shape."""
    from edgetrain.workloads.device_session import DeviceSession
    from edgetrain.workloads.training import load_task

    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path))
    session = DeviceSession(nano.root)
    shape = tuple(int(d) for d in load_task("digits").x_train.shape[1:])
    key = profile_cache_key(SPEC, session.board_name, session.identity.l4t, shape)
    profile = next(p for p in dry_run(SPEC) if p.phase == "profile")
    assert profile.key == key
    assert profile.path == str(profile_cache_path(SPEC, session.board_name, key))
