"""Against the real API server: names in a spec (models, data sets, files, devices, node labels)
are checked by the CRD, so `kubectl apply` refuses a bad one with a 422 naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from edgetrain.api.names import DATASET_NAMES, MODEL_ARCHITECTURES
from edgetrain.cluster import KubeApiError, KubeClient
from edgetrain.workloads.catalog import DATASETS, MODELS
from tests.operator.conftest import job_manifest, patj_path

BAD: dict[str, tuple[dict[str, Any], str]] = {
    "unknown model": ({"model": {"architecture": "resnet9"}}, "spec.model.architecture"),
    "unknown data set": ({"dataset": {"name": "cifar10"}}, "spec.dataset.name"),
    "unknown proxy": ({"proxyDataset": {"name": "svhn"}}, "spec.proxyDataset.name"),
    "unknown pretrain set": ({"model": {"architecture": "resnet8-w025",
                                        "pretrain": {"dataset": "imagenet"}}},
                             "spec.model.pretrain.dataset"),
    "weights read as an option": ({"model": {"architecture": "resnet8-w025",
                                             "weights": "--help"}}, "spec.model.weights"),
    "weights with a newline": ({"model": {"architecture": "resnet8-w025",
                                          "weights": "/w.pt\nrm"}}, "spec.model.weights"),
    "device": ({"placement": {"device": "gpu; reboot"}}, "spec.placement.device"),
    "node label value": ({"placement": {"nodeSelector": {"edgetrain.io/device-model":
                                                         "jetson nano"}}},
                         "spec.placement.nodeSelector"),
    "node label key": ({"placement": {"nodeSelector": {"bad key!": "x"}}},
                       "spec.placement.nodeSelector"),
    "strategy": ({"strategy": {"profiling": "guess"}}, "spec.strategy.profiling"),
}


@pytest.mark.parametrize("what", list(BAD))
def test_bad_names_are_refused_naming_the_field(
    kube: KubeClient, crds: None, namespace: str, what: str
) -> None:
    spec, field = BAD[what]
    with pytest.raises(KubeApiError) as err:
        kube.create(patj_path(namespace), job_manifest("bad", **spec))
    assert err.value.code == 422, (what, err.value)
    assert field in err.value.message, (what, err.value.message)


def test_good_names_are_admitted(kube: KubeClient, crds: None, namespace: str) -> None:
    body = job_manifest("good", model={"architecture": "resnet8-w025", "weights": "/w/a b.pt"},
                        placement={"nodeSelector": {"edgetrain.io/device-model": "none",
                                                    "kubernetes.io/hostname": "n-1.a_b"}})
    kube.create(patj_path(namespace), body)


def test_the_crd_names_what_the_catalog_has() -> None:
    """One list of names: the CRD's enums equal what the workloads can load."""
    assert set(MODEL_ARCHITECTURES) == set(MODELS)
    assert set(DATASET_NAMES) == set(DATASETS)
