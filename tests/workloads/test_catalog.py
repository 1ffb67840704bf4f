"""The torch-free catalog that input validation reads agrees with the real loaders and models."""

from __future__ import annotations

import pytest

from edgetrain.workloads import catalog, datasets
from edgetrain.workloads.models import MODEL_REGISTRY, is_text_model
from edgetrain.workloads.training import load_task


def test_models_match_the_registry() -> None:
    assert set(catalog.MODELS) == set(MODEL_REGISTRY)
    for name, kind in catalog.MODELS.items():
        assert is_text_model(name) == (kind == "text")


@pytest.mark.parametrize("name", list(catalog.DATASETS))
def test_dataset_facts_match_the_loader(name: str) -> None:
    info = catalog.DATASETS[name]
    for limit in (None, 100):
        task = load_task(name, limit)
        assert task.kind == info.kind
        assert task.train_size == info.train_size(limit), limit
        assert tuple(task.x_train.shape[1:]) == info.input_shape
        assert task.num_classes == info.num_classes
    assert tuple(catalog.DATASETS) == datasets.IMAGE_SETS + datasets.TEXT_SETS
    assert info.installed()
