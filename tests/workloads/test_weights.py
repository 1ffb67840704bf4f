"""Pretrained weights: cached by recipe, loaded across heads of a different size."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from edgetrain.workloads.models import build_model
from edgetrain.workloads.weights import (
    PretrainSpec,
    describe,
    file_sha256,
    load_pretrained,
    pretrain,
    weights_path,
)


def test_pretrain_caches_by_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path))
    spec = PretrainSpec(model="resnet8-w025", dataset="digits", samples=256, batch_size=64)
    path = pretrain(spec)
    assert path == weights_path(spec) and path.parent == tmp_path / "weights"
    info = describe(path)
    assert info["sha256"] == file_sha256(path)
    assert 0.0 <= float(info["test_accuracy"]) <= 1.0  # type: ignore[arg-type]
    mtime = path.stat().st_mtime_ns
    assert pretrain(spec) == path and path.stat().st_mtime_ns == mtime  # cached, not retrained
    other = spec.model_copy(update={"seed": 1})
    assert weights_path(other) != path


def test_load_pretrained_keeps_the_new_head(tmp_path: Path) -> None:
    source = build_model("resnet8-w025", 1, 10)
    torch.save(source.state_dict(), tmp_path / "w.pt")
    target = build_model("resnet8-w025", 1, 5)  # a different number of classes
    left = load_pretrained(target, tmp_path / "w.pt")
    assert left == ["fc.bias", "fc.weight"]
    assert torch.equal(target.state_dict()["stem.0.weight"], source.state_dict()["stem.0.weight"])
    with pytest.raises(FileNotFoundError, match="edgetrain pretrain"):
        load_pretrained(target, tmp_path / "missing.pt")
